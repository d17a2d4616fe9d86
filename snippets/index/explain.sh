# the whole traceback, or just the "CUDA out of memory" line, saved to a file
oomguide explain oom.txt --lang en
# straight from a log; with your config, sizes are matched to the byte
tail -n 40 train.log | oomguide explain - --config config/train_gpt2.py
