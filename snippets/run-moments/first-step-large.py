# GPT-2 Large's shape (about 774M parameters): weights, gradients and AdamW state are half as large
n_layer = 36
n_head = 20
n_embd = 1280
