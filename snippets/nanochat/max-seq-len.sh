torchrun --standalone --nproc_per_node=8 -m scripts.base_train -- --depth=24 --target-param-data-ratio=8 --device-batch-size=16 --max-seq-len=1024 --fp8 --run=$WANDB_RUN
