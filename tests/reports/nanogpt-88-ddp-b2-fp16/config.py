# nanoGPT's train.py defaults (no config file); the command line sets dataset, dtype, batch_size, compile.
# train.py's default gradient_accumulation_steps = 5 * 8, divided by the world size (4) under DDP.
