# in training, each Block's activations are recomputed in backward instead of being kept
import torch
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint


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
        if self.training and torch.is_grad_enabled():
            x = checkpoint(block, x, use_reentrant=False)  # keeps only the Block's input
        else:
            x = block(x)  # estimate_loss and generation: no graph, nothing to save
    x = self.transformer.ln_f(x)

    if targets is not None:
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
    else:
        logits = self.lm_head(x[:, [-1], :])  # note: using list [-1] to preserve the dim
        loss = None

    return logits, loss
