# GPT-2 124M with train.py's defaults, trained on an RTX 3080 10GB and now resumed from out/ckpt.pt
init_from = 'resume'
n_layer = 12
n_head = 12
n_embd = 768
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 40
