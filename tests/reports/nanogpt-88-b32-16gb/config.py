# nanoGPT's train.py defaults (no config file); the command line sets batch_size and compile.
