"""torchconv: four hand-written convolution algorithms (direct, CSG, unrolled GEMM, Winograd
F(2x2,3x3)) as PyTorch operators with autograd, and a drop-in replacement for nn.Conv2d."""
import torch  # noqa: F401  (loads libtorch before our extension)

from . import _C
from . import tuning as _tuning
from .explain import explain
from .functional import conv2d
from .modules import Conv2d, convert, tune
from .onnx_export import onnx_translation_table
from .ops import ALGORITHMS
from .selection import available_algorithms, candidate_algorithms, select_algorithm, unsupported_reason
from .tuning import clear_cache, get_benchmark, load_cache, save_cache, set_benchmark
from .version import __version__

__all__ = [
    "ALGORITHMS",
    "Conv2d",
    "available_algorithms",
    "candidate_algorithms",
    "clear_cache",
    "clear_weight_cache",
    "configs",
    "conv2d",
    "convert",
    "explain",
    "get_benchmark",
    "get_config",
    "get_variant",
    "get_workspace_limit",
    "last_choice",
    "last_workspace_bytes",
    "load_cache",
    "onnx_translation_table",
    "save_cache",
    "select_algorithm",
    "set_benchmark",
    "set_config",
    "set_variant",
    "set_workspace_limit",
    "tune",
    "unsupported_reason",
    "variants",
    "weight_cache_size",
]


def set_workspace_limit(nbytes):
    """Cap the scratch memory (im2col matrices, Winograd tiles, split-reduction slices) one call may
    allocate; algorithms then process the batch in chunks. Default 256 MiB."""
    _C.set_workspace_limit(int(nbytes))


def get_workspace_limit():
    return _C.get_workspace_limit()


def last_workspace_bytes():
    """Scratch bytes the last operator call in the process allocated (backward operators run on
    autograd's threads, so this is per process, not per thread)."""
    return _C.last_workspace_bytes()


def variants(algorithm):
    """The variants of `algorithm`, default first. Direct: 'auto', 'phases', 'gather' (how a strided
    grad_input runs: the forward kernel once per output phase, or one thread per input pixel; 'auto'
    picks per call). Winograd: 'auto' (F(4x4,3x3) on layers with enough channels and pixels, else
    F(2x2,3x3) fused; float64 always F(2x2); calls on tensor cores (float32 under TF32, bfloat16,
    float16) F(2x2) on them, but on Hopper bfloat16 channels_last calls of at least 256 channels a
    group whose grid fills two thirds of the SMs, or of 64 channels and 128 filters on four waves,
    F(4x4) on them; the rules are in csrc/cuda/winograd/winograd.cu),
    'fused' (F(2x2,3x3) in one kernel: input transform, the 16 element-wise GEMMs, output
    transform), 'staged' (F(2x2,3x3) as
    seed 003's pipeline: V and M in a workspace bounded by the workspace limit) and 'f4x4'
    (F(4x4,3x3): 6x6 input tiles, 36 GEMMs, staged; forward and grad_input, grad_weight stays
    F(2x2)'s). On CUDA, 'staged' and 'f4x4' run their point GEMMs on TF32 tensor cores for float32
    calls while torch.backends.cudnn.allow_tf32 is on and for bfloat16 calls ('f4x4' then with several
    times a direct TF32 convolution's error), and 'staged' runs three bfloat16 products of split
    operands for float16 calls. GEMM: 'implicit' (the GEMM gathers the unrolled matrix from the input as it loads its
    tiles) and 'explicit' (an unroll kernel writes it for a chunk of columns into the workspace
    first). The CPU kernels ignore this, except Winograd's: 'f4x4' runs F(4x4,3x3) on the CPU too,
    'fused' and 'staged' F(2x2,3x3), and 'auto' F(4x4) for float32 calls of enough tiles (the rule
    in csrc/cpu/winograd.cpp), F(2x2) otherwise."""
    return _C.variants(algorithm)


def set_variant(algorithm, variant):
    """Process-wide choice of `algorithm`'s variant (see `variants`)."""
    _C.set_variant(algorithm, variant)
    if algorithm == "winograd":
        _tuning._state["winograd_variant"] = _C.get_variant("winograd")


def get_variant(algorithm):
    return _C.get_variant(algorithm)


def configs(algorithm):
    """The named tile configs of `algorithm`'s CUDA kernels (empty for a build without them).
    A rule picks one per call; `set_config` forces one."""
    return _C.configs(algorithm)


def set_config(algorithm, name):
    """Force `algorithm`'s tile config for every later call in the process ('' returns to the rule),
    e.g. to time each config alone. The environment variable TORCHCONV_<ALGORITHM>_CONFIG=<name>
    does the same from the start. Benchmark mode keeps a forced config."""
    _C.set_config(algorithm, name)


def get_config(algorithm):
    """The config forced for `algorithm`, '' when its rule picks."""
    return _C.get_config(algorithm)


def last_choice():
    """What the last CUDA call ran, per pass: '<pass>:<config>/splits=<n>' joined by spaces, e.g.
    'forward:medium/splits=4 grad_input:medium/splits=1 grad_weight:pixels/splits=64' (a forward
    clears the backward passes' entries). '/tail' after the splits: only the tiles past the grid's
    whole waves split their reduction (the GEMM on Hopper). The GEMM's forward and grad_input add
    where their filter operand came from: '/a=weight' (the weight read in place, for a weight
    trained this call) or '/a=matrix' (a re-laid copy, cached while the weight is unchanged)."""
    return _C.last_choice()


def clear_weight_cache():
    """Drop every cached filter transform. Needed only after writing a frozen weight through
    `weight.data` (a write the version counter does not see)."""
    _C.clear_weight_cache()


def weight_cache_size():
    """Filter transforms currently cached (frozen weights and inference mode)."""
    return _C.weight_cache_size()
