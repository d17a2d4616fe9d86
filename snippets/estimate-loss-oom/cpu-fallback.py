device = 'cpu'
compile = False
