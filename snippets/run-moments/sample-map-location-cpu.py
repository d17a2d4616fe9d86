checkpoint = torch.load(ckpt_path, map_location='cpu')  # weights and optimizer state stay in host memory
