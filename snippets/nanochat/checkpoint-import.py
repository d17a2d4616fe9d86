import torch.utils.checkpoint
