# config/train_gpt2_4gb.py: GPT-2 124M with nanoGPT's default batch, on a 4 GB card
# (model.py with the forward of four-gb-model.py, train.py with drop-stale-logits.py)
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 5 * 8
dtype = 'bfloat16'  # T4, RTX 20xx (before Ampere): emulated, math attention; use 'float16' there
