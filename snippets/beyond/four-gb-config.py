# GPT-2 124M with nanoGPT's default batch, on a 4 GB card
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 5 * 8
dtype = 'bfloat16'  # T4, RTX 20xx (before Ampere): emulated, math attention; use 'float16' there
