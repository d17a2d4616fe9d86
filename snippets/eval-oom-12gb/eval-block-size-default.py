eval_block_size = 0  # tokens per sequence in estimate_loss(); 0: block_size
