"""torchconv.conv2d: the signature and semantics of PyTorch's conv2d, computed by one of our algorithms."""
import functools

import torch
import torch.nn.functional as F

from . import tuning as _tuning
from .ops import ALGORITHMS, FORWARD

__all__ = ["conv2d", "select_algorithm", "candidate_algorithms", "unsupported_reason", "available_algorithms",
           "ALGORITHMS"]

_DISPATCH_KEY = {"cpu": "CPU", "cuda": "CUDA"}
_available_cache = {}


def available_algorithms(device_type="cpu"):
    """Algorithms with a kernel for `device_type` ("cpu" or "cuda") in this build."""
    found = _available_cache.get(device_type)
    if found is None:
        key = _DISPATCH_KEY.get(device_type)
        found = tuple(
            a
            for a in ALGORITHMS
            if key is not None and torch._C._dispatch_has_kernel_for_dispatch_key(f"torchconv::conv2d_{a}", key)
        )
        _available_cache[device_type] = found
    return found


def _csg_smem_bytes(input, weight, stride, dilation):
    """Shared memory of one CUDA CSG block of 64 filters x 8x8 pixels with one channel staged (two
    stages; csrc/cuda/csg.cu): large or widely dilated filters can exceed the device's limit."""
    r, s = weight.shape[2], weight.shape[3]
    patch_h = 7 * stride[0] + (r - 1) * dilation[0] + 1
    pitch = -(-(7 * stride[1] + (s - 1) * dilation[1] + 1) // 4) * 4
    return 2 * (patch_h * pitch + r * s * 64) * input.element_size()


@functools.lru_cache(maxsize=None)
def _max_smem(device):
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "shared_memory_per_block_optin", 227 * 1024)


def unsupported_reason(algorithm, input, weight, stride, dilation):
    """Why `algorithm` cannot compute this convolution, or None if it can."""
    if algorithm == "csg" and input.is_cuda and _csg_smem_bytes(input, weight, stride, dilation) > _max_smem(
            input.device):
        return (
            f"CSG stages a filter of {weight.shape[2]}x{weight.shape[3]} taps (dilation {tuple(dilation)}) per channel "
            f"in shared memory, more than the device provides"
        )
    if algorithm == "winograd":
        r, s = weight.shape[2], weight.shape[3]
        if (r, s) != (3, 3) or tuple(stride) != (1, 1) or tuple(dilation) != (1, 1):
            return (
                f"Winograd F(2x2,3x3) needs a 3x3 kernel, stride 1 and dilation 1; "
                f"got kernel ({r}, {s}), stride {tuple(stride)}, dilation {tuple(dilation)}"
            )
    elif algorithm == "csg" and input.is_cuda and torch.are_deterministic_algorithms_enabled():
        return (
            "CSG sums partial results with atomicAdd, whose order varies between runs, and "
            "torch.use_deterministic_algorithms(True) is set"
        )
    return None


def candidate_algorithms(input, weight, stride, dilation):
    """The algorithms with a kernel for the input's device that can compute this convolution (and,
    under torch.use_deterministic_algorithms(True), are deterministic there)."""
    return [a for a in available_algorithms(input.device.type)
            if unsupported_reason(a, input, weight, stride, dilation) is None]


# Forward FLOPs at or below which a layer is small enough that splitting its channel reduction
# across the GPU (CSG) beats the algorithms that need more parallel work: on the committed N = 1
# runs the 0.1-0.25 GFLOP ResNet layers with filters > 1x1 ran 1.1-2.9x cuDNN with CSG against
# 0.8-1.2x with Winograd or the GEMM, while the 2.7 GFLOP YOLO layers ran 1.4-1.8x with Winograd and
# about 1.0x with CSG.
_CSG_MAX_FLOPS = 0.5e9


def select_algorithm(input, weight, stride, dilation, groups):
    """The `algorithm="auto"` rule when benchmark mode is off, from the committed H100 results
    (benchmarks/results/*-h100.json):

    1. csg on CUDA for filters larger than 1x1 with at least 32 channels per group on a small layer
       (at most 0.5 GFLOP: batch-1 inference), unless deterministic algorithms are required;
    2. winograd for 3x3, stride-1, undilated layers with at least 8 input and 8 output channels per
       group (1.41x cuDNN forward at N = 32, 1.24x at N = 1);
    3. gemm when the reduction C/groups*R*S is at least 16 (0.98x / 1.07x cuDNN at N = 32 / 1);
    4. direct otherwise (depthwise and very thin layers).

    Only algorithms with a kernel for the input's device that can do the shape are chosen.
    """
    available = candidate_algorithms(input, weight, stride, dilation)
    k, cg, r, s = weight.shape
    kg = k // groups
    order = []
    if input.is_cuda and r * s > 1 and cg >= 32:
        positions = input.shape[0] * -(-input.shape[2] // stride[0]) * -(-input.shape[3] // stride[1])
        if 2.0 * positions * k * cg * r * s <= _CSG_MAX_FLOPS:
            order.append("csg")
    if (r, s) == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1) and cg >= 8 and kg >= 8:
        order.append("winograd")
    if cg * r * s >= 16:
        order.append("gemm")
    order += ["direct", "gemm", "csg", "winograd"]
    for algo in order:
        if algo in available:
            return algo
    raise NotImplementedError(
        f"torchconv: no algorithm has a kernel for device type '{input.device.type}' in this build that can "
        f"compute this convolution (available: {available_algorithms(input.device.type) or 'none'})"
    )


# "auto" choices already made, so a repeated call (every layer of a model, every step) costs one
# dictionary look-up: the key holds everything the choice depends on.
_auto_memo = {}
_AUTO_MEMO_MAX = 4096


def _auto_algorithm(input, weight, bias, stride, padding, dilation, groups):
    benchmark = _tuning.get_benchmark()
    train = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)
    key = (input.shape, weight.shape, stride, padding, dilation, groups, input.dtype, input.device, bias is None,
           train, benchmark, torch.are_deterministic_algorithms_enabled())
    algorithm = _auto_memo.get(key)
    if algorithm is None:
        if benchmark:
            algorithm = _tuning.benchmark_choice(input, weight, bias, stride, padding, dilation, groups,
                                                 candidate_algorithms(input, weight, stride, dilation))
        else:
            algorithm = select_algorithm(input, weight, stride, dilation, groups)
        if len(_auto_memo) >= _AUTO_MEMO_MAX:
            _auto_memo.clear()
        _auto_memo[key] = algorithm
    return algorithm


def _pair(value, name):
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) == 1:
        return (value[0], value[0])
    if len(value) != 2 or not all(isinstance(v, int) for v in value):
        raise ValueError(f"torchconv.conv2d: {name} must be an int or a pair of ints, got {value}")
    return value


def _string_padding(input, weight, padding, stride, dilation):
    """'valid' / 'same' -> symmetric integer padding (and the input, padded on the bottom/right by
    one when 'same' needs an odd total, exactly as PyTorch's conv2d does)."""
    if padding == "valid":
        return input, (0, 0)
    if padding != "same":
        raise ValueError(f"torchconv.conv2d: padding must be an int, a pair, 'same' or 'valid'; got {padding!r}")
    if stride != (1, 1):
        raise ValueError("torchconv.conv2d: padding='same' is not supported for strided convolutions")
    total = [dilation[i] * (weight.shape[2 + i] - 1) for i in range(2)]
    left = tuple(t // 2 for t in total)
    extra = [t - 2 * l for t, l in zip(total, left)]
    if any(extra):
        input = F.pad(input, [0, extra[1], 0, extra[0]])
    return input, left


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, algorithm="auto"):
    """Drop-in for PyTorch's functional conv2d that runs one of torchconv's algorithms.

    algorithm: "auto" (see :func:`select_algorithm`), "direct", "csg", "gemm" or "winograd".
    Asking explicitly for an algorithm that cannot do the shape raises ValueError.
    """
    ndim = input.dim()
    if ndim == 3:
        input = input.unsqueeze(0)
    elif ndim != 4:
        raise ValueError(
            f"torchconv.conv2d: input must be 3-D (C, H, W) or 4-D (N, C, H, W), got {ndim}-D with shape "
            f"{tuple(input.shape)}"
        )
    if weight.dim() != 4:
        raise ValueError(f"torchconv.conv2d: weight must be 4-D (K, C / groups, R, S), got shape {tuple(weight.shape)}")
    stride = _pair(stride, "stride")
    dilation = _pair(dilation, "dilation")
    if isinstance(padding, str):
        input, padding = _string_padding(input, weight, padding, stride, dilation)
    else:
        padding = _pair(padding, "padding")

    if algorithm == "auto":
        algorithm = _auto_algorithm(input, weight, bias, stride, padding, dilation, groups)
    else:
        if algorithm not in FORWARD:
            raise ValueError(f"torchconv.conv2d: unknown algorithm {algorithm!r}; choose 'auto' or one of {ALGORITHMS}")
        reason = unsupported_reason(algorithm, input, weight, stride, dilation)
        if reason is not None:
            raise ValueError(f"torchconv.conv2d: algorithm '{algorithm}' cannot compute this convolution: {reason}")
    out = FORWARD[algorithm](input, weight, bias, stride, padding, dilation, groups)
    return out.squeeze(0) if ndim == 3 else out
