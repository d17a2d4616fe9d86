torchrun --standalone --nproc_per_node=8 -m scripts.base_train -- --depth=20 --target-param-data-ratio=8 --device-batch-size=16 --fp8 --run=$WANDB_RUN
