"""How much GPU memory a phase of nanoGPT's training takes: measured on CUDA, predicted anywhere.

Prediction (no GPU needed): the real model code runs on fake tensors (``FakeTensorMode``), which carry shapes
and dtypes but no data; a dispatch mode sees every storage the ops create and when it dies, so it
knows the live bytes after every allocation, the peak, the largest allocation and the first one that
would not fit a budget. A CPU-only PyTorch cannot run fake *CUDA* tensors, so the prediction runs on
fake CPU tensors and models what CUDA does differently.

The package, one module per job:

- ``units``       sizes, the default card, the CUDA context set aside (``usable_bytes``): the
                  torch-free ``oomguide.units``, which explain imports without this package
- ``cuda_model``  everything CUDA does differently from the fake-CPU run: allocator rounding,
                  CUDA autocast's lists and loss path, recomputation under it
- ``tracker``     the allocation tracker (TorchDispatchMode)
- ``models``      oomguide's GPT or a reader's nanoGPT model.py
- ``predict``     a phase on fake tensors
- ``phases``      a phase's state and code run tracked (a first and a later phase in one run)
- ``moments``     resuming from a checkpoint (train.py) and sample.py's generate(), on fake tensors
- ``search``      the batch-size search (``max_batch_size``)
- ``batches``     a phase's traces as functions of the batch size: the search's probes from two runs
- ``prefetch``    ``oomguide check``: those second runs made meanwhile by a forked child
- ``light_dynamo`` ``oomguide``: ``torch._dynamo`` loaded only when more than fake tensors need it
- ``measure``     a phase on a real GPU: the only module that calls torch.cuda
- ``distributed`` one rank of several: DDP (its reducer's buckets modelled) and FSDP2 (run for real
                  over the fake process group); ``from oomguide.memory import distributed``

- ``compiled``    what torch.compile changes (fused loss, fused casts): a rule-based model
- ``alloc_conf`` ``PYTORCH_CUDA_ALLOC_CONF``, parsed as PyTorch parses it
- ``allocator``  PyTorch's caching allocator replayed on the tracker's events
- ``reserved``   the phase's warm-up and replay: reserved peak and the verdict on reserved memory
- ``kernels``    CUDA's attention backend per compute capability and dtype, 1-byte dropout masks
- ``gpus``       cards by name (``gpus.json``): memory as PyTorch reports it, compute capability

Not modelled yet: kernels' private workspaces.
The names below are what the CLI, the examples and the notebook use: ``from oomguide import memory``.
"""

from .compiled import CompiledAutocast, compiled_context
from .cuda_model import CudaAutocast, block_size, cuda_autocast_context, segment_size
from .measure import (
    CardTooSmall,
    cuda_available,
    cuda_capability,
    cuda_device_name,
    cuda_driver,
    cuda_total_bytes,
    empty_cache_effect,
    expandable_segments_in_use,
    limit_cuda_memory,
    measure,
    non_pytorch_bytes,
    phase_peaks,
)
from .models import ModelSource, PredictionError, load_model_source
from .predict import CHECKS, MOMENTS, PHASES, STATES, PhaseResult, checks_run, predict
from .search import max_batch_size
from .tracker import CATEGORIES, Allocation, AllocationTracker
from .units import (
    CONTEXT_BYTES,
    DEFAULT_GPU_MEMORY,
    GiB,
    MiB,
    fmt_bytes,
    gib,
    parse_size,
    usable_bytes,
)

__all__ = [
    "CardTooSmall",
    "cuda_capability",
    "non_pytorch_bytes",
    "CATEGORIES",
    "CHECKS",
    "MOMENTS",
    "CONTEXT_BYTES",
    "DEFAULT_GPU_MEMORY",
    "PHASES",
    "STATES",
    "Allocation",
    "AllocationTracker",
    "CompiledAutocast",
    "CudaAutocast",
    "GiB",
    "PredictionError",
    "MiB",
    "ModelSource",
    "PhaseResult",
    "block_size",
    "checks_run",
    "compiled_context",
    "cuda_autocast_context",
    "cuda_available",
    "cuda_device_name",
    "cuda_driver",
    "cuda_total_bytes",
    "empty_cache_effect",
    "expandable_segments_in_use",
    "fmt_bytes",
    "gib",
    "limit_cuda_memory",
    "load_model_source",
    "max_batch_size",
    "measure",
    "phase_peaks",
    "parse_size",
    "predict",
    "segment_size",
    "usable_bytes",
]
