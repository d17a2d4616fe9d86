dtype = 'float16'  # for GPUs without bfloat16 (before Ampere)
