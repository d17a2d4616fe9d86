# config/train_mine.py for a 12 GB card, after the settings of situation.py
batch_size = 8  # half the micro-batch ...
gradient_accumulation_steps = 64  # ... twice the micro-steps: still 512 sequences per optimizer step
eval_batch_size = 4  # needs the new estimate_loss (estimate_loss_chunked.py)
eval_iters = 100
eval_interval = 500
