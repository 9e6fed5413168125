"""Which algorithm ``algorithm="auto"`` runs: the algorithms that can compute a call (asked of the
plan registry in C++, the only place that knows their limits), the rule that picks among them,
benchmark mode's measured choice, and the memo that makes a repeated call a dictionary look-up."""
import operator

import torch

from . import _C
from . import tuning as _tuning
from .ops import ALGORITHMS, FORWARD, functorch_active

__all__ = ["available_algorithms", "candidate_algorithms", "select_algorithm", "unsupported_reason"]

# Whether any autocast region is open, in one call: the per-device query needs a device-type string
# (input.device.type builds a device object and a string) on every call.
_any_autocast = torch._C._is_any_autocast_enabled


def _autocast(input, weight, bias):
    """Inside torch.autocast, the tensors as autocast hands them to the operator (the dtype the
    algorithm choice is made for): floating tensors other than float64 in the autocast dtype, as
    aten::conv2d receives them. The operators' Autocast kernels cast the same way when called
    directly (csrc/autograd.cpp)."""
    if not torch.compiler.is_compiling() and not _any_autocast():
        return input, weight, bias  # eager, no autocast region open: one query, not a device-type string
    device_type = input.device.type
    if device_type not in ("cuda", "cpu") or not torch.is_autocast_enabled(device_type):
        return input, weight, bias
    dtype = torch.get_autocast_dtype(device_type)
    cast = lambda t: t.to(dtype) if t is not None and t.is_floating_point() and t.dtype != torch.float64 else t
    return cast(input), cast(weight), cast(bias)

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


for _device_type in _DISPATCH_KEY:  # asked before any trace, which cannot call the dispatcher's query
    available_algorithms(_device_type)
del _device_type


def _constant_when_traced(fn):
    """torch.compiler.assume_constant_result's mark, set without importing torch._dynamo (which would
    add about a second to `import torchconv`): the plan registry's answers are pure functions of
    shapes, dtypes and switches, so a traced call (torch.compile) takes them as constants and
    selecting an algorithm inside a graph needs no break (test_ops: a cold fullgraph compile)."""
    fn._dynamo_marked_constant = True
    return fn


@_constant_when_traced
def _unsupported_reason(*args):
    return _C.unsupported_reason(*args)


@_constant_when_traced
def _small_groups(channels, filters):
    return _C.small_groups(channels, filters)


@_constant_when_traced
def _cpu_grouped(groups, channels, filters, width, channels_last):
    return _C.cpu_grouped(groups, channels, filters, width, channels_last)


def _int(value, name, what):
    """`value` as an int: anything with __index__ (numpy integers too) but a bool, as PyTorch's
    conv2d takes it; else TypeError naming the argument."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"torchconv.conv2d: {name} must be {what}, got {value!r}")


def _pair(value, name):
    """(a, b) from an int or a sequence of one or two ints."""
    if type(value) is int:
        return (value, value)
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if len(items) not in (1, 2):
        raise ValueError(f"torchconv.conv2d: {name} must be an int or a pair of ints, got {value}")
    items = tuple(_int(v, name, "an int or a pair of ints") for v in items)
    return items * 2 if len(items) == 1 else items


def unsupported_reason(algorithm, input, weight, stride=1, dilation=1, padding=0, groups=None, bias=None):
    """Why `algorithm` cannot compute this convolution on the input's device, or None if it can.
    Bad arguments raise ValueError / TypeError naming the argument, as the operators do.
    `groups` defaults to what the channel counts imply."""
    if groups is None:
        groups = input.shape[1] // weight.shape[1] if input.dim() == 4 and weight.dim() == 4 and weight.shape[1] else 1
    dilation = _pair(dilation, "dilation")
    if padding == "valid":
        padding = 0
    elif padding == "same":  # the larger side of 'same' padding, as torchconv.conv2d applies it
        padding = tuple(-(-d * (k - 1) // 2) for d, k in zip(dilation, weight.shape[2:]))
    return _unsupported_reason(
        algorithm, input.shape, str(input.dtype)[6:], weight.shape, str(weight.dtype)[6:],
        None if bias is None else bias.shape, _pair(stride, "stride"), _pair(padding, "padding"), dilation, int(groups),
        str(input.device), _tuning.memory_format(input) == "channels_last",
        input.is_cuda and torch.are_deterministic_algorithms_enabled())


def winograd_within_bars(precision):
    """Whether Winograd, in the variant in force, keeps a call at `precision` within the error `auto`
    holds its choices to (2x a direct convolution's at that precision): the f4x4 variant's TF32 tiles
    err about 7x a direct TF32 convolution (docs/winograd.md), so under that variant a TF32 call runs
    Winograd only when asked for by name."""
    return not (_tuning._state["winograd_variant"] == "f4x4" and precision in ("tf32", "complex64-tf32"))


def _auto_candidates(input, weight, stride, dilation, padding, groups):
    """The algorithms "auto" may choose from: those that can compute the call, Winograd only within
    the bars."""
    found = candidate_algorithms(input, weight, stride, dilation, padding, groups)
    return found if winograd_within_bars(_tuning.precision(input)) else [a for a in found if a != "winograd"]


def candidate_algorithms(input, weight, stride=1, dilation=1, padding=0, groups=None):
    """The algorithms with a kernel for the input's device that can compute this convolution (and,
    under torch.use_deterministic_algorithms(True), are deterministic there)."""
    return [a for a in available_algorithms(input.device.type)
            if unsupported_reason(a, input, weight, stride, dilation, padding, groups) is None]


# Forward FLOPs at or below which a layer is small enough that splitting its channel reduction
# across the GPU (CSG) beats the algorithms that need more parallel work, given enough channels to
# split: in benchmarks/results/resnet-yolo-h100.json (batch 1, forward) CSG ran the 0.1-0.25 GFLOP
# layers with 256-512 channels at 1.2-2.5x cuDNN, ahead of Winograd and the GEMM, and the strided one
# with 128 channels ahead of the GEMM; with 64-128 channels at stride 1 it fell behind both.
_CSG_MAX_FLOPS = 0.5e9
_CSG_MIN_CHANNELS = 256
_CSG_MIN_CHANNELS_STRIDED = 128

# Channels per group at or below which a 3x3 stride-1 layer of at least 8 filters goes to Winograd at
# every precision: its shallow kernels (one tile per thread, float32 arithmetic, any layout and dtype)
# ran YOLO's RGB stem (3 -> 32 at 544 x 544, batch 32) faster than the GEMM in every pass at TF32,
# bfloat16 and float16, NCHW and channels_last (forward 2.0-3.5x, grad_input 1.4-5.3x, grad_weight
# 1.1-4.7x; benchmarks/results/pass-times-resnet-yolo-h200.json), and forward + backward ahead of
# cuDNN at the same setting (TF32 NCHW 2.3x, bfloat16 channels_last 1.5x, float16 1.06x;
# resnet-yolo-h200.json). The GEMM pads such a layer's reduction to whole chunks, and in float32
# NCHW leaves it on CUDA cores (memory-bound there).
_WINOGRAD_THIN_MAX_CHANNELS = 4

# At TF32 in channels_last, the filters per group and the output positions (N Ho Wo) per channel of a
# group from which a Winograd layer goes to Winograd rather than the GEMM. The GEMM's register tiles
# read channels_last float32 as it is and led Winograd's TF32 tiles on ResNet's and YOLO's 3x3
# stride-1 layers of 64-256 filters in forward and forward + backward, and on all nine at batch 1;
# Winograd kept YOLO's 256 -> 512 and 512 -> 1024 layers at batch 32 (resnet-yolo-h100.json and
# -h200.json, each algorithm by name, cuDNN TF32 channels_last in the same process; docs/auto.md).
# With few positions per channel its forward's chain over the unsplit channels outlasts the GEMM's
# split reduction, as in NCHW (where the line is one position per channel).
_WINOGRAD_TF32_CHANNELS_LAST_MIN_FILTERS = 512
_WINOGRAD_TF32_CHANNELS_LAST_MIN_POSITIONS_PER_CHANNEL = 8


def _winograd_leads_at_tf32(channels, filters, positions, channels_last):
    """Whether a Winograd layer (3x3, stride 1, at least 8 channels and filters per group) of
    `channels` and `filters` per group and `positions` output positions goes to Winograd at TF32."""
    if channels_last:
        return (filters >= _WINOGRAD_TF32_CHANNELS_LAST_MIN_FILTERS
                and positions >= _WINOGRAD_TF32_CHANNELS_LAST_MIN_POSITIONS_PER_CHANNEL * channels)
    return positions >= channels


# Channels per group at or below which a grouped layer goes to direct on the CPU at any width: its
# tiles ran such layers (ResNeXt's 4 channels a group, at 28 and 56 wide, strides 1 and 2) ahead of
# the GEMM the rule chose before in forward + backward, and in the forward on all but one (level there;
# docs/direct.md, "Grouped layers along the channels").
_CPU_DIRECT_MAX_GROUP_CHANNELS = 4


def select_algorithm(input, weight, stride, dilation, groups, padding=0):
    """The `algorithm="auto"` rule when benchmark mode is off, from the committed H100 results
    (benchmarks/results/*-h100.json):

    0. direct on CUDA for small groups (torchconv._C.small_groups: depthwise, channel multipliers,
       ResNeXt-like groups), which its depthwise specialist runs, and on the CPU for grouped layers of
       up to 64 channels and filters a group on planes up to 14 outputs wide, and for channels_last
       ones of 8 to 16 filters and 4 to 16 channels a group at any width
       (torchconv._C.cpu_grouped: ResNeXt's and RegNet's layers), which its kernels along the channels
       run, and for grouped layers of at most 4 channels a group at any width (its tiles);
    0a. winograd on CUDA, at every precision, for RGB-stem-like layers: 3x3, stride 1, undilated, at
       most 4 channels and at least 8 filters per group (its shallow kernels; _WINOGRAD_THIN_MAX_CHANNELS);
    0b. winograd on CUDA at TF32 (float32 while torch.backends.cudnn.allow_tf32 is on) for the layers
       of rule 2 with at least as many output positions (N Ho Wo) as channels per group in NCHW: its
       TF32 tiles outran the GEMM's there, forward and most of all forward + backward. Its forward does
       not split the channel reduction, so on fewer positions (ResNet's 7x7 and YOLO's 17x17 layers of
       512 channels at batch 1) a block's chain of channels outlasts the GEMM, which splits them across
       the GPU (docs/auto.md). In channels_last, where the GEMM reads the float32 tensors as they are,
       only those of at least 512 filters per group and 8 positions per channel of a group;
    0c. gemm on CUDA for every other layer at a tensor-core precision (float16, bfloat16, and float32
       when TF32 is on): the GEMM is the algorithm with tensor-core kernels for all of them and the
       faster one at 16 bits (Winograd runs 16-bit products in TF32 words, float16 with three
       products where they take one; direct and CSG compute them on CUDA cores in float32);
    1. csg on CUDA for filters larger than 1x1 on a small layer (at most 0.5 GFLOP: batch-1
       inference) with at least 256 channels per group (128 when strided), unless deterministic
       algorithms are required;
    2. winograd for 3x3, stride-1, undilated layers with at least 8 input and 8 output channels per
       group;
    3. gemm when the reduction C/groups*R*S is at least 16;
    4. direct otherwise (depthwise and very thin layers).

    Only algorithms with a kernel for the input's device that can do the shape are chosen, and
    Winograd only within the error bars (winograd_within_bars: not at TF32 under the f4x4 variant).
    """
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    available = _auto_candidates(input, weight, stride, dilation, padding, groups)
    k, cg, r, s = weight.shape
    kg = k // groups
    winograd_filters = (r, s) == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1) and kg >= 8
    winograd_shape = winograd_filters and cg >= 8
    width = -(-input.shape[3] // stride[1])  # the output width under padding that keeps the size ("same")
    channels_last = _tuning.memory_format(input) == "channels_last"
    if input.is_cuda:
        order = ["direct"] if _small_groups(cg, kg) else []
    else:
        thin_groups = groups > 1 and cg <= _CPU_DIRECT_MAX_GROUP_CHANNELS
        order = ["direct"] if thin_groups or _cpu_grouped(groups, cg, kg, width, channels_last) else []
    if input.is_cuda and winograd_filters and cg <= _WINOGRAD_THIN_MAX_CHANNELS:
        order.append("winograd")
    precision = _tuning.precision(input) if input.is_cuda else None
    positions = input.shape[0] * -(-input.shape[2] // stride[0]) * -(-input.shape[3] // stride[1])
    if precision == "tf32" and winograd_shape and _winograd_leads_at_tf32(cg, kg, positions, channels_last):
        order.append("winograd")
    if precision in ("tf32", "fp16", "bf16"):
        order.append("gemm")
    min_channels = _CSG_MIN_CHANNELS_STRIDED if max(stride) > 1 else _CSG_MIN_CHANNELS
    if input.is_cuda and r * s > 1 and cg >= min_channels:
        if 2.0 * positions * k * cg * r * s <= _CSG_MAX_FLOPS:
            order.append("csg")
    if winograd_shape:
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


class _AtExampleSizes:
    """A tensor of symbolic sizes (a trace's dynamic dimensions, as torch.export makes them) as the
    rule sees it: its sizes at the example the trace runs on, its dtype, device and layout. The choice
    is made once for the traced program, by the rule (benchmark mode needs real tensors to time),
    without a guard on those sizes (a guard on a dimension declared dynamic fails the export). The
    program runs the example's choice at every size; the operator checks its algorithm's limits when
    it runs, so a size the choice cannot take raises ValueError naming the limit."""

    def __init__(self, tensor, shape=None, channels_last=None):
        self.shape = torch.Size(_example_size(d) for d in tensor.shape) if shape is None else shape
        self.dtype, self.device, self.is_cuda = tensor.dtype, tensor.device, tensor.is_cuda
        if channels_last is None:
            channels_last = _tuning.memory_format(tensor) == "channels_last"
        self._channels_last = channels_last

    def dim(self):
        return len(self.shape)

    def is_contiguous(self, memory_format=torch.contiguous_format):
        return (memory_format == torch.channels_last) == self._channels_last


def _example_size(size):
    """A size as an int: a symbolic one's value in the example the trace runs on (its hint), asked
    without adding a guard; a size with no hint (data-dependent) is specialized."""
    hint = getattr(getattr(size, "node", None), "hint", None)
    return hint if hint is not None else int(size)


# "auto" choices already made, so a repeated call (every layer of a model, every step) costs one
# dictionary look-up: the key holds everything the choice depends on.
_auto_memo = {}
_AUTO_MEMO_MAX = 4096
_tuning._on_change.append(_auto_memo.clear)


def auto_algorithm(input, weight, bias, stride, padding, dilation, groups, measure=True):
    """What ``algorithm="auto"`` runs for this call: benchmark mode's measured choice (`measure` and
    benchmark mode on), else the rule.
    On the meta device (a model built there, shapes only) every algorithm's meta kernel gives the
    same output, and direct's takes every shape."""
    if input.is_meta:  # not input.device.type: a device object and a string every call
        return "direct"
    benchmark = measure and _tuning.get_benchmark()
    train = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)
    key = (input.shape, weight.shape, stride, padding, dilation, groups, _tuning.precision(input), input.device,
           _tuning.memory_format(input), bias is None, train, benchmark, torch.are_deterministic_algorithms_enabled(),
           _tuning._state["winograd_variant"])
    try:
        algorithm = _auto_memo.get(key)
    except TypeError:  # a symbolic size (torch.export's dynamic dimensions) does not hash
        return select_algorithm(_AtExampleSizes(input), weight, stride, dilation, groups, padding)
    if algorithm is None:
        if benchmark and functorch_active():
            # Benchmark mode times the operators on the call's tensors, which a torch.func transform
            # wraps: the rule chooses, and the choice is not kept for calls outside the transform.
            return select_algorithm(input, weight, stride, dilation, groups, padding)
        candidates = _auto_candidates(input, weight, stride, dilation, padding, groups) if benchmark else None
        if candidates:
            algorithm = _tuning.benchmark_choice(input, weight, bias, stride, padding, dilation, groups,
                                                 {a: FORWARD[a] for a in candidates})
        else:
            algorithm = select_algorithm(input, weight, stride, dilation, groups, padding)
        if len(_auto_memo) >= _AUTO_MEMO_MAX:
            _auto_memo.clear()
        _auto_memo[key] = algorithm
    return algorithm
