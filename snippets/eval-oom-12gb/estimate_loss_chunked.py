# ruff: noqa: F821
# reads train.py's model, ctx, get_batch, eval_iters and eval_batch_size
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
                x, y = X[i : i + chunk], Y[i : i + chunk]
                with ctx:
                    logits, loss = model(x, y)
                total += loss.item() * x.size(0)  # chunk mean, weighted by its size
            losses[k] = total / X.size(0)  # the mean over the whole batch, as before
        out[split] = losses.mean()
    model.train()
    return out
