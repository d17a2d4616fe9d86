# hold every example to a 12 GB card: its total memory as PyTorch reports it
pytest examples --gpu-memory 11.69GiB
