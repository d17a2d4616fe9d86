python sample.py --device=cpu
