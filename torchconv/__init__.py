"""torchconv: four hand-written convolution algorithms (direct, CSG, unrolled GEMM, Winograd
F(2x2,3x3)) as PyTorch operators with autograd, and a drop-in replacement for nn.Conv2d."""
import torch  # noqa: F401  (loads libtorch before our extension)

from . import _C
from .functional import (ALGORITHMS, available_algorithms, candidate_algorithms, conv2d, select_algorithm,
                         unsupported_reason)
from .modules import Conv2d, convert
from .tuning import clear_cache, get_benchmark, load_cache, save_cache, set_benchmark, tune
from .explain import explain

__version__ = "0.1.0"
__all__ = [
    "ALGORITHMS",
    "Conv2d",
    "available_algorithms",
    "candidate_algorithms",
    "clear_cache",
    "explain",
    "get_benchmark",
    "load_cache",
    "save_cache",
    "set_benchmark",
    "tune",
    "conv2d",
    "convert",
    "get_tuning",
    "get_variant",
    "get_workspace_limit",
    "select_algorithm",
    "set_tuning",
    "set_variant",
    "set_workspace_limit",
    "unsupported_reason",
    "variants",
]


def set_workspace_limit(nbytes):
    """Cap the scratch memory (im2col matrices, Winograd tiles) one call may allocate; algorithms
    then process the batch in chunks. Default 256 MiB."""
    _C.set_workspace_limit(int(nbytes))


def get_workspace_limit():
    return _C.get_workspace_limit()


def set_tuning(enabled):
    """Measured choice of tile config and split, in the spirit of ``torch.backends.cudnn.benchmark``:
    with tuning on, the first CSG call with a new shape (and dtype and GPU) times its candidate
    configs and splits and keeps the fastest for later calls; off (the default), a rule picks.
    ``torchconv._C.last_choice()`` names the plan the last CSG launch ran."""
    _C.set_tuning(bool(enabled))


def get_tuning():
    return _C.get_tuning()


def variants(algorithm):
    """The variants of `algorithm`, default first. Winograd: 'auto' (picks per call: staged once
    C*K/(C+K) >= 128 per group, fused below), 'fused' (one kernel: input transform, the 16
    element-wise GEMMs and output transform) and 'staged' (seed 003's pipeline: V and M in a
    workspace bounded by the workspace limit). GEMM: 'implicit' (the GEMM gathers the unrolled
    matrix from the input as it loads its tiles) and 'explicit' (an unroll kernel writes it for a
    chunk of columns into a workspace bounded by the workspace limit, then the GEMM reads it).
    The CPU kernels have one variant and ignore this."""
    return _C.variants(algorithm)


def set_variant(algorithm, variant):
    """Process-wide choice of `algorithm`'s variant (see `variants`)."""
    _C.set_variant(algorithm, variant)


def get_variant(algorithm):
    return _C.get_variant(algorithm)
