"""oomguide: CUDA out-of-memory in nanoGPT, predicted without a GPU and explained."""

__version__ = "0.1.0"
