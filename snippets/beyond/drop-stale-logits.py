# train.py, in the training loop: add this line just before `losses = estimate_loss()`
logits = None  # the last micro-step's (B, T, V) logits: nothing reads them again
