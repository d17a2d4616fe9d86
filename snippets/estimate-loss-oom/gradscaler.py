# the current spelling of the scaler line (no FutureWarning)
scaler = torch.amp.GradScaler('cuda', enabled=(dtype == 'float16'))
