# The run of this page: GPT-2's layout with n_embd = 576 (about 77M parameters), FP16, on an RTX 4070 12 GB
n_layer = 12
n_head = 12  # 576 / 12 = 48 per head
n_embd = 576
bias = True
batch_size = 16
block_size = 1024
gradient_accumulation_steps = 32  # 16 x 32 = 512 sequences per optimizer step
dtype = "float16"
eval_interval = 2000
eval_iters = 200
