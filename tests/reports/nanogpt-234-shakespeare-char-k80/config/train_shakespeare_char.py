# config/train_shakespeare_char.py as nanoGPT has it: the settings that matter for memory.
eval_interval = 250
eval_iters = 200
dataset = 'shakespeare_char'
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256
n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2
dtype = 'float16'  # inferred: a K80 has no bfloat16 (case.toml)
compile = False  # inferred: torch.compile's Triton backend does not support a K80 (case.toml)
