"""``oomguide check --nanochat PATH -- <command>``: a nanochat run predicted with nanochat's own code.

One module per job:

- ``command``   the reader's command line (python / torchrun) and the script's argparse, read from
                its syntax tree, never executed
- ``code``      nanochat's GPT, MuonAdamW, flash_attention and KVCache imported from the checkout
                (the one place that touches sys.path)
- ``plan``      a script's arguments -> the model's shape and the phases the script runs
- ``phases``    one phase on fake tensors (oomguide's tracker, kernels, allocator replay)
- ``compiled``  torch.compile's fused loss over nanochat's softcapped logits
- ``check``     the verdict: each phase's peak, reserved, fits, largest --device-batch-size (a dict)
- ``render``    that dict as text in the reader's language (catalog domain ``check``)

Never imports torch.cuda.
"""
