# the fix the article ends with
batch_size = 4
gradient_accumulation_steps = 16
compile = False
