# does each phase fit in 12 GiB, and what is the largest batch_size that does?
oomguide check config/train_gpt2.py --gpu-memory 12GiB
# overrides as train.py takes them (--batch_size=8 becomes --set batch_size=8)
oomguide check config/train_gpt2.py --set batch_size=8 --gpu-memory 12GiB
