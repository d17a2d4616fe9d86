# Paste into train.py to see what empty_cache() can and cannot give back
import torch


def show_cuda_memory(label):
    allocated = torch.cuda.memory_allocated() / 2**30  # held by live tensors
    reserved = torch.cuda.memory_reserved() / 2**30  # held by the caching allocator
    print(f"{label}: allocated {allocated:.2f} GiB, reserved {reserved:.2f} GiB")


def empty_cache_and_report():
    show_cuda_memory("before empty_cache()")
    torch.cuda.empty_cache()  # returns cached, unused blocks to the driver; live tensors stay
    show_cuda_memory("after empty_cache()")
