# training keeps block_size
eval_block_size = 512  # tokens per sequence in estimate_loss
