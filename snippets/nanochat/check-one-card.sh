oomguide check --nanochat ~/nanochat --gpu "RTX 4090" -- python -m scripts.base_train --depth=20
