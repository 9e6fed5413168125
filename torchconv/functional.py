"""torchconv.conv2d: the signature and semantics of PyTorch's conv2d, computed by one of our algorithms."""
import contextlib

import torch
import torch.nn.functional as F

from .auto_op import conv2d_auto, has_dynamic_size
from .calls import call_forward
from .ops import ALGORITHMS, FORWARD, functorch_active
from .selection import _autocast, _int, _pair, auto_algorithm, unsupported_reason

__all__ = ["conv2d"]


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


def _raise_not_dense(input, weight, bias):
    """TypeError naming the first of conv2d's tensors that is not a dense (strided) tensor, if any:
    a nested or sparse tensor has no sizes and strides for the operators to read."""
    for name, value in (("input", input), ("weight", weight), ("bias", bias)):
        if value is not None and (value.is_nested or value.layout != torch.strided):
            kind = "a nested" if value.is_nested else f"a {str(value.layout).removeprefix('torch.')}"
            raise TypeError(f"torchconv.conv2d: {name} must be a dense (strided) tensor, got {kind} tensor")


def _raise_not_a_tensor(input, weight, bias):
    """TypeError naming the first of conv2d's tensor arguments that is not a Tensor."""
    for name, value in (("input", input), ("weight", weight), ("bias", bias)):
        if not isinstance(value, torch.Tensor) and (value is not None or name != "bias"):
            raise TypeError(f"torchconv.conv2d: {name} must be a Tensor, got {type(value).__name__}")


def _complex_conv2d(input, weight, bias, stride, padding, dilation, groups, algorithm):
    """A complex convolution as three real ones on the algorithm's kernels, by Gauss's product, as
    PyTorch's complex convolution computes it: with a = conv(xr, wr), b = conv(xi, wi),
    c = conv(xr + xi, wr + wi), the output is (a - b) + i (c - a - b). Autograd differentiates the
    composition (conjugate Wirtinger gradients, as for PyTorch's). The parts run at the complex
    dtype's own precision: autocast casts no complex tensor, inside aten::conv2d neither."""
    name_of = lambda dtype: str(dtype).removeprefix("torch.")  # noqa: E731
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and value.dtype != input.dtype:
            raise TypeError(f"torchconv.conv2d: {name} dtype ({name_of(value.dtype)}) must match input dtype "
                            f"({name_of(input.dtype)})")
    if input.dtype not in (torch.complex64, torch.complex128):
        raise TypeError(f"torchconv.conv2d: a complex convolution takes complex64 or complex128 tensors; input is "
                        f"{name_of(input.dtype)}")
    real = lambda x, w, b: conv2d(x, w, b, stride, padding, dilation, groups, algorithm)  # noqa: E731
    device_type = input.device.type
    # Only the operators' devices have an autocast to leave (torch.autocast("meta") raises).
    no_autocast = (torch.autocast(device_type, enabled=False) if device_type in ("cuda", "cpu")
                   else contextlib.nullcontext())
    with no_autocast:
        a = real(input.real, weight.real, None if bias is None else bias.real)
        b = real(input.imag, weight.imag, None)
        c = real(input.real + input.imag, weight.real + weight.imag, None if bias is None else bias.real + bias.imag)
    return torch.complex(a - b, c - a - b)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, algorithm="auto"):
    """Drop-in for PyTorch's functional conv2d that runs one of torchconv's algorithms.

    algorithm: "auto" (see :func:`torchconv.select_algorithm`), "direct", "csg", "gemm" or
    "winograd". Asking explicitly for an algorithm that cannot do the shape raises ValueError.
    Complex tensors (complex64, complex128) run as three real convolutions of that algorithm.
    """
    if not (isinstance(input, torch.Tensor) and isinstance(weight, torch.Tensor)
            and (bias is None or isinstance(bias, torch.Tensor))):
        proxy = next((t for t in (input, weight, bias) if isinstance(t, torch.fx.Proxy)), None)
        if proxy is not None:
            # torch.fx.symbolic_trace records the call as one node, as it records PyTorch's own
            # functional convolution: tracing into it would meet Python-level choices that a Proxy
            # cannot answer.
            return proxy.tracer.create_proxy(
                "call_function", conv2d, (input, weight, bias, stride, padding, dilation, groups, algorithm), {})
        _raise_not_a_tensor(input, weight, bias)
    _raise_not_dense(input, weight, bias)
    groups = _int(groups, "groups", "an int")
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
    if input.is_complex() or weight.is_complex():
        out = _complex_conv2d(input, weight, bias, stride, padding, dilation, groups, algorithm)
        return out.squeeze(0) if ndim == 3 else out

    if algorithm == "auto":
        if torch.compiler.is_dynamo_compiling() and has_dynamic_size(input):
            # torch.compile with a dynamic size: the operator that chooses when it runs (auto_op).
            out = conv2d_auto(*_autocast(input, weight, bias), stride, padding, dilation, groups)
            return out.squeeze(0) if ndim == 3 else out
        if torch.compiler.is_compiling() or not functorch_active():
            algorithm = auto_algorithm(*_autocast(input, weight, bias), stride, padding, dilation, groups)
        # else: under a torch.func transform call_forward chooses (calls.py says on what, and why).
    else:
        if algorithm not in FORWARD:
            raise ValueError(f"torchconv.conv2d: unknown algorithm {algorithm!r}; choose 'auto' or one of {ALGORITHMS}")
        # The operator checks the algorithm's limits itself (ValueError with the reason), except
        # determinism, which it leaves to PyTorch's own alert; under deterministic mode the front end
        # asks first, so that refusing CSG's atomics is a ValueError that says why.
        if torch.are_deterministic_algorithms_enabled() and not torch.compiler.is_compiling():
            cast_input, cast_weight, cast_bias = _autocast(input, weight, bias)
            reason = unsupported_reason(algorithm, cast_input, cast_weight, stride, dilation, padding, groups, cast_bias)
            if reason is not None:
                raise ValueError(f"torchconv.conv2d: algorithm '{algorithm}' cannot compute this convolution: {reason}")
    # The choice was made for the dtypes autocast runs; the operator gets the tensors uncast, and its
    # Autocast kernel casts them as aten::conv2d's does (a float32 weight's cast cached for the region).
    out = call_forward(algorithm, input, weight, bias, stride, padding, dilation, groups)
    return out.squeeze(0) if ndim == 3 else out
