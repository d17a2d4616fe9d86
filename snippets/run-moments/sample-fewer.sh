python sample.py --num_samples=1 --max_new_tokens=100
