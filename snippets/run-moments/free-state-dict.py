state_dict = None  # checkpoint['model'] is still referenced by this name: let it go too
