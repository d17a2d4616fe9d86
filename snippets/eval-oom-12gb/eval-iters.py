eval_iters = 50  # batches per split: a quarter of the time of 200, a noisier estimate, the same peak
