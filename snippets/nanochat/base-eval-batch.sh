torchrun --standalone --nproc_per_node=8 -m scripts.base_eval -- --device-batch-size=8
