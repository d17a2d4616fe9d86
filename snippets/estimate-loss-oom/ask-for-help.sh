# the card, its driver and what else runs on it
nvidia-smi
# PyTorch and the CUDA version it was built with
python -c "import torch; print(torch.__version__, torch.version.cuda)"
# your config, and the error message with oomguide's reading of it
cat config/train_gpt2_12gb.py
oomguide explain oom.txt
