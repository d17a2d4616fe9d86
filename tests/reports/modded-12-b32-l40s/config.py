# modded-nanogpt's train_gpt2.py (October 2024) translated to nanoGPT's settings.
# device_batch_size -> batch_size; sequence_length -> block_size; GPTConfig(vocab_size=50304,
# n_layer=12, n_head=6, n_embd=768); bfloat16 autocast; model = torch.compile(model).
batch_size = 32
block_size = 1024
n_layer = 12
n_head = 6  # inferred: the October 2024 model (case.toml)
n_embd = 768
dtype = 'bfloat16'
compile = True
# 8 * 64 sequences per step over 8 GPUs of 32, written as nanoGPT's global count
# (train.py divides it by the world size)
gradient_accumulation_steps = 16
