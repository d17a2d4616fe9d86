# The source's combination, corrected so that nanoGPT accepts it
batch_size = 16
gradient_accumulation_steps = 32
block_size = 1024
eval_batch_size = 4  # needs the new estimate_loss (estimate_loss_chunked.py)
eval_iters = 100
eval_interval = 500
n_embd = 512
n_head = 8  # the source keeps n_head = 12, which does not divide 512
grad_checkpoint = True  # not a nanoGPT setting: use the checkpointed forward (oomguide reads this key)
