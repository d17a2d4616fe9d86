eval_interval = 1000  # evaluate every 1000 iterations
eval_iters = 50       # 50 batches per split instead of 200
