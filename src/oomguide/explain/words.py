"""The English sentences of ``oomguide explain``: the message ids of its catalogs, by role.

What it does: names each sentence explain prints by the role it plays (a heading, a row of figures,
a diagnosis), so that ``render`` can pick it by key. Every string is marked with ``N_`` and is the
msgid of locale/<lang>/LC_MESSAGES/explain.po; ``{names}`` are filled in by ``render``. Change a
sentence here, then run ``python -m oomguide.i18n`` and translate what comes out empty or fuzzy.

It must never hold a translation, format a figure, or decide which sentence applies.
"""

from __future__ import annotations

from ..i18n import N_

# TRANSLATORS: the message format in the title ("message format: PyTorch 1.4 to 2.0"): the PyTorch
# versions that print it; "2.1+" and "CUDA error" are shown as they are
FORMAT_NAMES: dict[str, str] = {
    "pre-2.1": N_("1.4 to 2.0"),
    "1.0-1.3": N_("1.0 to 1.3"),
    "short": N_("short form"),
}

TEXT: dict[str, str] = {
    "title": N_("CUDA out of memory on GPU {gpu} (message format: PyTorch {format})"),
    # a message that names no GPU ("GPU has 79.19 GiB total, ..."): PyTorch's short form of some releases
    "title_any_gpu": N_("CUDA out of memory (message format: PyTorch {format})"),
    "several": N_("{n} OOM messages in the input; explaining the last one."),
    "context_estimate_loss": N_(
        "The traceback passes through estimate_loss(): it ran out during evaluation."
    ),
    "context_train_step": N_("The traceback passes through backward(): it ran out in a training step."),
    "context_generate": N_("The traceback passes through generate(): it ran out while generating."),
    "context_resume": N_(
        "The traceback passes through torch.load() or load_state_dict(): it ran out while resuming "
        "from a checkpoint."
    ),
    "context_first_step": N_(
        "The traceback passes through the optimizer's _init_group(): it ran out in the first "
        "optimizer step, while AdamW created its state."
    ),
    "context_optimizer_step": N_(
        "The traceback passes through the optimizer's step(): it ran out in optimizer.step()."
    ),
    # the moment of the run, from the prediction's figures where the traceback does not say it
    "moment_resume": N_(
        "This run resumes from a checkpoint that its train.py loads onto the card "
        "(torch.load(..., map_location=device)): the saved weights stay there for the whole run."
    ),
    "moment_first_step": N_(
        "The prediction places the failure in the first optimizer step, where AdamW creates its "
        "state (two float32 copies of the weights) while the gradients are alive."
    ),
    "note": N_("note: {note}"),
    # TRANSLATORS: a size read from the reader's message, as PyTorch printed it ("6.14 GiB"):
    # in your quotation marks where your language writes 6,14 GiB (de „{size}“, fr « {size} »),
    # so that it reads as a quotation beside the sizes oomguide computes; else "{size}" as it is
    "quoted": N_("{size}"),
    "h_figures": N_("Figures read"),
    # one row of figures: a label and its value (the separator as the language writes it)
    "label_value": N_("{label}: {value}"),
    "requested": N_("requested (Tried to allocate)"),
    "capacity": N_("total capacity"),
    "free": N_("free"),
    "allowed": N_("allowed (memory fraction)"),
    "in_use": N_("in use by this process"),
    "allocated": N_("allocated by PyTorch"),
    "reserved_unallocated": N_("reserved by PyTorch, unallocated"),
    "reserved": N_("reserved by PyTorch in total"),
    # the same two where the message does not print them (PyTorch 1.4-2.0, 1.0-1.3): computed, and said so
    "reserved_unallocated_computed": N_("reserved by PyTorch, unallocated (reserved − allocated)"),
    "reserved_computed": N_("reserved by PyTorch in total (allocated + cached)"),
    "non_pytorch": N_("non-PyTorch memory of this process (in use − allocated − unallocated)"),
    "other_processes": N_("used by other processes (capacity − free − in use)"),
    "outside_pytorch": N_("outside PyTorch's allocator (capacity − free − reserved)"),
    "process": N_("process {pid}"),
    "h_tensor": N_("Which tensor"),
    "small_request": N_(
        "{req} is one of the allocator's smallest segments (a tensor under 1 MiB asks for 2 MiB, "
        "under 10 MiB for 20 MiB): it names no particular tensor. The card was already full when "
        "a small tensor was needed."
    ),
    "is_size_of": N_("{req} is the size of:"),
    "is_size_of_config": N_("In this config, {req} is the size of:"),
    "is_size_of_nanochat": N_("In nanochat (a nanochat traceback), {req} is the size of:"),
    "nanochat_match": N_(
        "{desc}: shape {shape}, {dtype}, at --device-batch-size {batch} and --max-seq-len {seq} (vocab {vocab})"
    ),
    "config_match": N_("{desc}: shape {shape}, {dtype}, {nbytes} bytes → {req}"),
    "config_no_match": N_("None of this config's tensors prints as {req}; at other batch and block sizes:"),
    "search_group": N_(
        "{desc}: batch {batch} × block {block} × vocab {vocab} × {itemsize} bytes ({dtype}) = "
        "{nbytes} bytes → {req}"
    ),
    "search_also": N_("same size: {pairs} (batch × block)"),
    # TRANSLATORS: between the items of a list ("48 × 512, 12 × 2048"): the language's list separator
    "list_sep": N_(", "),
    "search_vocab_too": N_(
        "the same with vocab {vocab} (GPT-2 without padding), e.g. batch {batch} × block {block} "
        "= {nbytes} bytes"
    ),
    "no_match": N_(
        "{req} is not the size of a GPT-2 logits buffer (vocab 50304 or 50257, block 64–2048, batch 1–512)."
    ),
    "hint_nanochat": N_(
        "oomguide check --nanochat PATH -- <the command line> predicts every phase of that run and the "
        "largest --device-batch-size that fits."
    ),
    "hint_config": N_(
        "Pass your config (--config CONFIG, --set KEY=VALUE) to compare with your model's "
        "activations and weights and to predict each phase."
    ),
    "h_prediction": N_(
        "Prediction for this config on a card of {card} ({usable} for PyTorch after the CUDA context)"
    ),
    "pred_compiled_checkout": N_(
        "as oomguide check predicts it for the nanoGPT checkout {path}: the model compiled (compile = True)"
    ),
    "pred_eager_checkout": N_(
        "as oomguide check predicts it for the nanoGPT checkout {path}: the model run eagerly (compile = False)"
    ),
    "pred_compiled_released": N_(
        "as oomguide check predicts it for nanoGPT as released (no checkout found): the model compiled "
        "(compile = True)"
    ),
    "pred_eager_released": N_(
        "as oomguide check predicts it for nanoGPT as released (no checkout found): the model run eagerly "
        "(compile = False)"
    ),
    "pred_fits": N_("{phase}: predicted peak {peak}, fits"),
    "pred_borderline": N_(
        "{phase}: predicted peak {peak}, borderline: within the measured uncertainty of the predictions, "
        "whether it runs depends on how the caching allocator has split its segments "
        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True removes that doubt)"
    ),
    "pred_no": N_(
        "{phase}: predicted peak {peak}, does not fit; the first allocation that fails asks for {fail} ({what})"
    ),
    # TRANSLATORS: a phase that does not fit ({verdict}), then how its failing allocation compares with
    # the message's ({comparison}: "the same size as in this message" or "this message: 6.14 GiB")
    "pred_compared": N_("{verdict} — {comparison}"),
    "pred_same": N_("the same size as in this message"),
    "pred_diff": N_("this message: {req}"),
    "pred_all_fit": N_(
        "Every phase fits this card in the prediction, yet the run ran out: something the "
        "prediction does not model holds memory (other tensors of your script, memory that earlier work "
        "in the same process left cached, kernel workspaces, other processes), or the config differs "
        "from the run's."
    ),
    "h_diagnosis": N_("Diagnosis"),
    "too_little_memory": N_(
        "Too little memory: PyTorch's live tensors take {allocated} of the {capacity} card, and "
        "the {req} request did not fit in what was left ({free} free, {unalloc} cached). Keep "
        "less memory alive at once: a smaller batch, a shorter block, or a loss computed in "
        "chunks."
    ),
    "allowed_limit": N_(
        "This process was allowed {allowed} of the {capacity} card (a cap set with "
        "torch.cuda.set_per_process_memory_fraction, as pytest examples --gpu-memory sets one, or a "
        "shared GPU's), and the card still had {free} free: the cap stopped this allocation, not the "
        "card. What the cap left: {allowed} less the {reserved} reserved by PyTorch = {room}. Other "
        "processes did not take this memory: closing them would not help."
    ),
    "too_little_memory_allowed": N_(
        "Too little memory: PyTorch's live tensors take {allocated} of the {allowed} allowed, and the "
        "{req} request did not fit in what the cap left ({room} under the cap, {unalloc} cached). Keep "
        "less memory alive at once: a smaller batch, a shorter block, or a loss computed in chunks."
    ),
    "too_little_memory_short": N_(
        "Too little memory: PyTorch's live tensors take {allocated} of the {capacity} card, and "
        "the {req} request did not fit in what was left ({free} free, {unalloc} cached)."
    ),
    "too_little_huge": N_(
        "The request alone ({req}) is larger than the whole card ({capacity}): no allocator "
        "setting helps; this tensor has to get smaller."
    ),
    "fragmentation": N_(
        "Fragmentation: {unalloc} is reserved by PyTorch but unallocated, cached in pieces none "
        "of which could hold {req} (free plus cached: {sum}). Set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA is initialised; it reuses "
        "that memory but does not create any."
    ),
    "expandable_segments_cannot_help": N_(
        "Not fragmentation: {unalloc} is reserved by PyTorch but unallocated, yet even in one piece, "
        "free plus cached memory ({free} + {unalloc} = {sum}) is less than the {req} request. No "
        "allocator setting against fragmentation can help here (PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True, max_split_size_mb): at best it makes the free and the cached "
        "memory usable as one piece; it creates none."
    ),
    "other_processes_d": N_(
        "Other processes hold {other} of this card (capacity − free − this process's {in_use}). "
        "Close them (nvidia-smi lists them) or run on a GPU of your own."
    ),
    "other_processes_old": N_(
        "{outside} of the card is not held by PyTorch in this process; apart from this process's "
        "CUDA context (a few hundred MiB) that is other processes. Close them (nvidia-smi lists "
        "them) or run on a GPU of your own."
    ),
    "model_states_exceed_card": N_(
        "Model states too large: {params} parameters × 16 bytes (float32 weights, gradients, "
        "AdamW's exp_avg and exp_avg_sq) = {states} ({states_gb}). The card has {card} "
        "({card_gb}), of which PyTorch can use about {usable} after the CUDA context. This does "
        "not fit before any activation, so no batch size helps: train a smaller model (n_layer, "
        "n_embd) or use a card with more memory."
    ),
    "model_states_with_copies_exceed_card": N_(
        "Model states fill the card: {params} parameters × 16 bytes (float32 weights, gradients, "
        "AdamW's exp_avg and exp_avg_sq) = {states} ({states_gb}), which alone fits the {usable} "
        "PyTorch can use of this {card} card, with {margin} to spare. With autocast's {dtype} "
        "copies of the weights ({copies}, alive during forward and backward) it is {total}: more "
        "than the card before any activation. A smaller batch cannot help: train a smaller model "
        "(n_layer, n_embd) or use a card with more memory."
    ),
    "model_states_info": N_(
        "Model states: {params} parameters × 16 bytes = {states} ({states_gb}) on a card of {card}."
    ),
    "h_links": N_("Read next"),
    # a message that asks for no size ("CUDA error: out of memory", or the short form alone)
    "context_to_device": N_(
        "The traceback passes through .to(device) or .cuda(): it ran out while moving tensors to the GPU."
    ),
    "title_no_request": N_(
        "CUDA out of memory (message format: PyTorch {format}), without a requested size"
    ),
    "no_request": N_(
        "CUDA itself ran out of memory, outside PyTorch's caching allocator, so the message names no "
        "tensor and no size. This happens while CUDA creates its context, loads kernels, or while a "
        "library (cuBLAS, cuDNN, NCCL) allocates on its own; most often another process already holds "
        "the card, and the run fails at model.to(device) or at its first CUDA call."
    ),
    "short_no_request": N_(
        "The message gives the card's figures but not the size that was asked for: this process held "
        "{in_use} of the {capacity} card, {free} was free."
    ),
    "h_checks": N_("What to check"),
    "check_nvidia_smi": N_(
        "nvidia-smi: which processes hold memory on this card. End those you no longer need "
        "(kill <PID>), or choose a free card with CUDA_VISIBLE_DEVICES."
    ),
    "check_mem_get_info": N_(
        "torch.cuda.mem_get_info() just before model.to(device): the free and total bytes as CUDA sees "
        "them, before your model arrives."
    ),
    "check_weights": N_(
        "If the card is free and it still fails at model.to(device), the weights alone do not fit: run "
        "oomguide check with your config."
    ),
    "check_launch_blocking": N_(
        "CUDA reports errors asynchronously: run once with CUDA_LAUNCH_BLOCKING=1 to see the line that "
        "really failed."
    ),
    # when the prediction says the phase fits, yet the message failed in it
    "h_disagreement": N_("Why the prediction and the message differ"),
    "dis_intro": N_(
        "The message failed in {phase}, but the prediction says {phase} fits (predicted peak {peak}). "
        "The message's figures that explain the difference:"
    ),
    "dis_card": N_(
        "the prediction is for a card of {card}; the message's card has {capacity} (--gpu-memory)."
    ),
    "dis_other_explains": N_(
        "other processes held {other} of the card. The prediction gives this process the whole card "
        "less the CUDA context; without their memory about {room} was left for PyTorch, less than the "
        "predicted peak: this alone explains the failure."
    ),
    "dis_other_partly": N_(
        "other processes held {other} of the card, which left about {room} for PyTorch: still more "
        "than the predicted peak, so this explains only part of the difference."
    ),
    "dis_fragmentation": N_(
        "{unalloc} was reserved by PyTorch but unallocated (cached in pieces); the prediction replays "
        "the caching allocator for this run alone, not what earlier work in the same process left cached."
    ),
    "dis_allocated": N_(
        "PyTorch held {allocated} and asked for {req} more ({allocated} + {req} = {total}), {excess} beyond "
        "the predicted peak. Tensors the prediction does not know about were alive: torch.compile's buffers, tensors "
        "your script keeps, or a config that differs from the run's."
    ),
    "dis_none": N_(
        "none of the message's figures explains it: check that the config you gave is the one the run used."
    ),
}
