# nanoGPT's train.py defaults (no config file); the command line sets dataset, dtype, batch_size, compile.
# Under DDP train.py divides gradient_accumulation_steps (40) by the world size (4).
gradient_accumulation_steps = 10
