# config/config.py of train-llm-from-scratch (March 2025), in nanoGPT's names.
n_layer = 64  # N_BLOCKS
n_head = 16  # N_HEAD
n_embd = 2048  # N_EMBED
vocab_size = 50304  # VOCAB_SIZE
block_size = 16  # T_CONTEXT_LENGTH: the training batches' length (the model's position table is CONTEXT_LENGTH = 512)
batch_size = 32  # T_BATCH_SIZE
bias = True
dropout = 0.0
dtype = 'float32'  # inferred
compile = False
gradient_accumulation_steps = 1  # inferred
