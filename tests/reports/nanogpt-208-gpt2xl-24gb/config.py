# config/finetune_shakespeare.py as nanoGPT had it in March 2023: the settings that matter for memory.
eval_interval = 5
eval_iters = 40
dataset = 'shakespeare'
init_from = 'gpt2-xl'
batch_size = 1
gradient_accumulation_steps = 32
