# config/train_gpt2.py as nanoGPT has it: the settings that matter for memory.
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 5 * 8  # train.py divides it by the world size (8) under DDP
eval_interval = 1000
eval_iters = 200
