model = DDP(model, device_ids=[ddp_local_rank], gradient_as_bucket_view=True)
