# what empty_cache() can and cannot give back, printed before each evaluation
gib = 2**30
print(f"before empty_cache(): allocated {torch.cuda.memory_allocated() / gib:.2f} GiB, "
      f"reserved {torch.cuda.memory_reserved() / gib:.2f} GiB")
torch.cuda.empty_cache()  # returns cached, unused blocks to the driver; live tensors stay
print(f"after empty_cache(): allocated {torch.cuda.memory_allocated() / gib:.2f} GiB, "
      f"reserved {torch.cuda.memory_reserved() / gib:.2f} GiB")
