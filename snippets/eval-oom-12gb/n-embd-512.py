n_embd = 512
n_head = 8  # 8 heads of 64; n_head = 12 does not divide 512 and nanoGPT's GPT refuses it
