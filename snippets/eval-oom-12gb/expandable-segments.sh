# before Python starts: the allocator reads it once, when CUDA is initialised
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
