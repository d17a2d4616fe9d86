# in a checkout of the oomguide repository, on a CUDA machine: both phases for real, capped to a 4 GB card
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True pytest examples/test_beyond.py -k four_gb --gpu-memory 4GiB
