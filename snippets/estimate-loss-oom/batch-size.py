# 4 sequences per micro-step, 16 micro-steps per optimizer step: still 64 sequences per step
batch_size = 4
gradient_accumulation_steps = 16
