oomguide check --nanochat ~/nanochat --gpu "RTX 3090" -- python -m scripts.base_train --depth=20 --device-batch-size=4
