# the first fix as overrides: the config file stays as it is
python train.py config/train_gpt2_12gb.py --batch_size=4 --gradient_accumulation_steps=16
