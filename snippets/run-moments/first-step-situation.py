# GPT-2 XL's shape (about 1.56B parameters) from scratch on an RTX 4090, one sequence per micro-step
n_layer = 48
n_head = 25
n_embd = 1600
batch_size = 1
block_size = 1024
gradient_accumulation_steps = 40
