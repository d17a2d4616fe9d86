# in a checkout of the oomguide repository
pip install -e '.[test]'
pytest examples
