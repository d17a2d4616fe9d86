raw_model = model  # fully_shard wraps nothing: there is no model.module
