# ruff: noqa: F821
# nanoGPT train.py: replace estimate_loss() with this one; it is called as before: losses = estimate_loss().
# It reads train.py's model, ctx, get_batch and eval_iters, and one new setting: add
# `eval_batch_size = 0` next to eval_iters (0: the whole batch at once), then set it in a config file.
import torch


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)  # batch_size sequences, as before
            chunk = eval_batch_size or X.size(0)
            total = 0.0
            for i in range(0, X.size(0), chunk):  # forward chunk sequences at a time
                with ctx:
                    logits, loss = model(X[i : i + chunk], Y[i : i + chunk])
                total += loss.item() * logits.size(0)  # chunk mean, weighted by its size
            losses[k] = total / X.size(0)  # the mean over the whole batch, as before
        out[split] = losses.mean()
    model.train()
    return out
