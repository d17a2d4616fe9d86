python sample.py --dtype=float32
