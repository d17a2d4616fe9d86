# in a checkout of the oomguide repository
pip install -e '.[test]'
# every snippet, applied to a copy of your nanoGPT checkout and run with its own train.py
pytest examples --nanogpt ~/nanoGPT
