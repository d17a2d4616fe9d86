# sample.py with GPT-2 XL's weights on an 8 GB card, as it is and in float32
oomguide check --sample --set init_from=gpt2-xl --gpu "RTX 3070"
oomguide check --sample --set init_from=gpt2-xl --set dtype=float32 --gpu "RTX 3070"
# sample.py with your own checkpoint (out/ckpt.pt), as your sample.py loads it
oomguide check --sample --gpu "RTX 3070"
