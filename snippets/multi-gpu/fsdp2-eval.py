if iter_num % eval_interval == 0 and not master_process:
    estimate_loss()  # the other ranks join rank 0's sharded forward
