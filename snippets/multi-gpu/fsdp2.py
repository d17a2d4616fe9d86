from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

# shard each Block, then the rest; weights are gathered in the autocast dtype
policy = MixedPrecisionPolicy(param_dtype=ptdtype, reduce_dtype=torch.float32)
for block in model.transformer.h:
    fully_shard(block, mp_policy=policy)
fully_shard(model, mp_policy=policy)
# an evaluation forward leaves the top-level weights gathered: shard them again on every rank
model.register_forward_hook(lambda module, args, output: None if module.training else module.reshard())
# fully_shard replaced the parameters: build the optimizer again, on the shards
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
