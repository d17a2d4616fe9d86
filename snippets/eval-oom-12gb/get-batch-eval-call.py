X, Y = get_batch(split, eval_block_size)  # both splits, eval_block_size tokens per sequence
