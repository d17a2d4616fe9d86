oomguide check --nanochat ~/nanochat --gpu "H100 80GB" -- torchrun --standalone --nproc_per_node=8 -m scripts.base_train -- --depth=20 --device-batch-size=32
