block_size = 512  # half the context: half the tokens per sequence
