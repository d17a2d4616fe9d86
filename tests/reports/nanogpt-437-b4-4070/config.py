# nanoGPT's train.py defaults (GPT-2 124M from scratch); the comment names batch size and accumulation.
