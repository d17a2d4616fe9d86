# llm.c's train_gpt2.py (April 2024) translated to nanoGPT's settings: pretrained GPT-2 124M,
# float32, B = 4, T = 64, no torch.compile.
init_from = 'gpt2'
batch_size = 4
block_size = 64
dtype = 'float32'
compile = False
gradient_accumulation_steps = 1
