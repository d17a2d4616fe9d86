torchrun --standalone --nproc_per_node=8 -m scripts.chat_sft -- --device-batch-size=8 --run=$WANDB_RUN
