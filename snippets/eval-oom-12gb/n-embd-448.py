n_embd = 448
n_head = 7  # 7 heads of 64; n_head = 12 does not divide 448 and nanoGPT's GPT refuses it
