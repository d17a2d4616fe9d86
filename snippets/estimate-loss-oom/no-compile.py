compile = False  # run the model eagerly, without torch.compile
