# set before Python starts, so it is in place before CUDA is initialised
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
python train.py config/train_gpt2_12gb.py
