# compute lm_head and the loss in chunks of rows, so the (B*T, V) logits never exist
import torch

LOSS_CHUNK_SIZE = 1024  # rows (token positions) of logits alive at a time


def chunk_loss_sum(lm_head, x, targets):
    logits = lm_head(x)  # (rows, V): one chunk only
    return torch.nn.functional.cross_entropy(logits, targets, ignore_index=-1, reduction="sum")


def forward(self, idx, targets=None):
    device = idx.device
    b, t = idx.size()
    assert t <= self.config.block_size, (
        f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
    )
    pos = torch.arange(0, t, dtype=torch.long, device=device)  # shape (t)
    tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
    pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (t, n_embd)
    x = self.transformer.drop(tok_emb + pos_emb)
    for block in self.transformer.h:
        x = block(x)
    x = self.transformer.ln_f(x)

    if targets is None:
        # generation: logits of the last position only, as before
        return self.lm_head(x[:, [-1], :]), None

    x, targets = x.view(b * t, -1), targets.view(b * t)
    loss_sum = 0.0
    for start in range(0, b * t, LOSS_CHUNK_SIZE):
        rows = slice(start, start + LOSS_CHUNK_SIZE)
        if torch.is_grad_enabled():
            # training: recompute the chunk's logits in backward instead of keeping them
            loss_sum = loss_sum + torch.utils.checkpoint.checkpoint(
                chunk_loss_sum, self.lm_head, x[rows], targets[rows], use_reentrant=False
            )
        else:
            loss_sum = loss_sum + chunk_loss_sum(self.lm_head, x[rows], targets[rows])
    loss = loss_sum / (targets != -1).sum()
    # no full logits to return: train.py and estimate_loss() only use the loss
    return None, loss
