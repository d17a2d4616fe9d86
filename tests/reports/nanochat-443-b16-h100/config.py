# nanochat's base_train (January 2026, speedrun.sh: --depth=20) translated to nanoGPT's settings.
# depth 20 -> n_layer=20, model_dim = 64 * depth = 1280, 10 heads of 128; max_seq_len 2048;
# vocab 65536 (nanochat's tokenizer); bfloat16; torch.compile. device_batch_size -> batch_size.
batch_size = 16
block_size = 2048
n_layer = 20
n_head = 10
n_embd = 1280
vocab_size = 65536
dtype = 'bfloat16'
compile = True
gradient_accumulation_steps = 16  # the same total batch with half the device batch: two micro-steps per rank
