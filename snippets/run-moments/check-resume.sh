# the resumed run as your train.py does it: loading the checkpoint, the first evaluation, the steps
oomguide check config/train_gpt2_10gb.py --gpu "RTX 3080 10GB"
