# GPT-2 124M with nanoGPT's default batch, on a 4 GB card
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 5 * 8
dtype = 'bfloat16'  # train.py picks 'float16' on cards without bfloat16: the same memory
