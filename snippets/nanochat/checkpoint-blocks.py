# recompute each Block in backward instead of keeping its activations
if self.training and torch.is_grad_enabled():
    x = torch.utils.checkpoint.checkpoint(block, x, ve, cos_sin, self.window_sizes[i], kv_cache, use_reentrant=False)
else:
    x = block(x, ve, cos_sin, self.window_sizes[i], kv_cache)
