# from the first forward to the first optimizer step, and the steps after it
oomguide check config/train_xl_24gb.py --gpu "RTX 4090"
