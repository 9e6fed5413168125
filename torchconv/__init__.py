"""torchconv: four hand-written convolution algorithms (direct, CSG, unrolled GEMM, Winograd
F(2x2,3x3)) as PyTorch operators with autograd, and a drop-in replacement for nn.Conv2d."""
import torch  # noqa: F401  (loads libtorch before our extension)

from . import _C
from .functional import ALGORITHMS, available_algorithms, conv2d, select_algorithm, unsupported_reason
from .modules import Conv2d, convert

__version__ = "0.1.0"
__all__ = [
    "ALGORITHMS",
    "Conv2d",
    "available_algorithms",
    "conv2d",
    "convert",
    "get_workspace_limit",
    "select_algorithm",
    "set_workspace_limit",
    "unsupported_reason",
]


def set_workspace_limit(nbytes):
    """Cap the scratch memory (im2col matrices, Winograd tiles) one call may allocate; algorithms
    then process the batch in chunks. Default 256 MiB."""
    _C.set_workspace_limit(int(nbytes))


def get_workspace_limit():
    return _C.get_workspace_limit()
