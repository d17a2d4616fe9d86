# try 2 if 4 still runs out of memory
eval_batch_size = 4  # sequences per forward in estimate_loss
