# The run that fails at the first estimate_loss(): GPT-2 124M from scratch on a 12 GB card
batch_size = 64
block_size = 1024
gradient_accumulation_steps = 1
n_layer = 12
n_head = 12
n_embd = 768
dtype = 'bfloat16'
compile = True
eval_interval = 2000
eval_iters = 200
