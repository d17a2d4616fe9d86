# train.py, in the training loop: add the `logits = None` line before estimate_loss()
if iter_num % eval_interval == 0 and master_process:
    logits = None  # the last micro-step's (B, T, V) logits: train.py never reads them again
    losses = estimate_loss()
