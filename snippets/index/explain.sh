# the whole traceback, or just the "CUDA out of memory" line, saved to a file;
# it answers in your locale's language, or in the one --lang names (en, ja, zh, de, fr)
oomguide explain oom.txt
# straight from a log; with your config, sizes are matched to the byte
tail -n 40 train.log | oomguide explain - --config config/train_gpt2.py
