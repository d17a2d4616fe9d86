# config/finetune_shakespeare.py as nanoGPT had it in early 2023: the settings that matter for memory.
eval_interval = 5
eval_iters = 40
dataset = 'shakespeare'
batch_size = 1
gradient_accumulation_steps = 32
init_from = 'gpt2-xl'
