eval_batch_size = 0  # sequences per forward in estimate_loss(); 0: the whole batch at once
