checkpoint = torch.load(ckpt_path, map_location='cpu')  # host memory: nothing lands on the card here
