# ruff: noqa: F821
# reads train.py's data_dir, batch_size, block_size, device and device_type
import os

import numpy as np
import torch


def get_batch(split, length=None):
    length = length or block_size  # evaluation may ask for shorter sequences
    if length > block_size:
        raise ValueError(f"eval_block_size = {length} is longer than block_size = {block_size}")
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - length, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i : i + length].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + length].astype(np.int64)) for i in ix])
    if device_type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y
