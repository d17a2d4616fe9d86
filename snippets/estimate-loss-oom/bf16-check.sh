# True: the card has bfloat16 (train.py's default); False: use float16
python -c "import torch; print(torch.cuda.is_available() and torch.cuda.is_bf16_supported())"
