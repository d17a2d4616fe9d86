logits = None  # the last micro-step's (B, T, V) logits: nothing reads them again
