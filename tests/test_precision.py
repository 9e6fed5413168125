"""Precisions and memory formats, as PyTorch users run convolutions.

- float16 and bfloat16 inputs (weight and bias the same dtype) run on every algorithm and device
  with FP32 accumulation; the output is in the input's dtype. On CUDA the GEMM runs them on tensor
  cores (csrc/cuda/gemm/tc_kernels.cuh, tc_weight_grad_kernels.cuh) where channels per group
  (filters per group, for grad_input and grad_weight) are a multiple of 8, or the layer is ungrouped
  (an RGB stem runs on zero-padded channels); every other kernel computes them in float32.
- float32 follows torch.backends.cudnn.allow_tf32: on, the CUDA GEMM runs TF32 tensor cores (channels
  per group a multiple of 4, or ungrouped) for forward and grad_input -- on Hopper the wgmma kernel,
  which reads NCHW float32 as it is -- and for grad_weight (filters per group a multiple of 4 as
  well; mma.sync on every GPU); off, IEEE FP32 (every other test in this suite runs with it off).
- Outputs and gradients come back in the memory format PyTorch's convolution returns: channels_last
  when the input or the weight is, except float64 on CUDA, which PyTorch returns in NCHW.
- torch.autocast casts the operators' inputs as it casts aten::conv2d's.

Accuracy bar: relative error against a float64 reference computed from the same rounded inputs,
within 2x of PyTorch's own error at the same precision (cuDNN on CUDA), with a floor of one ulp of
the dtype at 1.0 (rounding the output alone costs about a third of that).
"""
import contextlib
import re

import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import (ALGORITHMS, DEVICES, WGMMA_CONFIGS, WGMMA_WS_CONFIG, cuda_kernel_launches, cuda_kernel_names,
                      rel_err, skip_if_no_kernel, using_config)

CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))
REDUCED = [torch.float16, torch.bfloat16]
# last_choice() of a tensor-core launch: mma.sync ("tc-*") or, on Hopper, wgmma ("wgmma-*") configs.
TENSOR_CORE_PLAN = re.compile(r":(tc|wgmma)-")
# The spacing of the dtype's values at 1.0 (float32 row: TF32's 10-bit mantissa).
ULP = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -10}

# (N, C, K, H, W, R, S, stride, padding, dilation, groups): odd sizes, H != W, batch 1 and > 1.
SHAPES = [
    (2, 16, 24, 9, 7, 3, 3, 1, 1, 1, 1),
    (1, 32, 40, 12, 13, 3, 3, 2, 1, 1, 1),
    (3, 8, 8, 11, 10, 1, 1, 1, 0, 1, 1),
    (2, 24, 16, 10, 9, 5, 3, (2, 1), (2, 1), 1, 1),
    (1, 16, 32, 13, 11, 3, 3, 1, 2, 2, 2),
    (2, 7, 5, 8, 9, 3, 3, 1, 1, 1, 1),  # channels and filters not multiples of 8
    (2, 3, 16, 15, 14, 7, 7, 2, 3, 1, 1),  # an RGB stem: channels padded to a word, taps packed
    (2, 12, 8, 8, 9, 3, 3, 1, 1, 1, 2),  # 6 channels per group: the GEMM computes it on CUDA cores
    (2, 64, 136, 6, 5, 1, 1, 1, 0, 1, 1),  # two tiles of filters, the wide config
    (1, 8, 8, 7, 9, 3, 3, 1, 1, 1, 8),  # depthwise
]


def at_precision(precision):
    """The dtype of a precision name (fp16, bf16, tf32), with PyTorch's TF32 switch set for it
    (conftest's ieee_fp32 restores the switch)."""
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}[precision]


def shape_id(s):
    return "N{}C{}K{}H{}W{}R{}S{}st{}p{}d{}g{}".format(*s).replace(" ", "")


def make_case(shape, device, dtype, channels_last=False):
    n, c, k, h, w, r, s, stride, padding, dilation, groups = shape
    x = torch.randn(n, c, h, w, dtype=torch.float64, device=device).to(dtype)
    wt = (torch.randn(k, c // groups, r, s, dtype=torch.float64, device=device) / (c // groups * r * s) ** 0.5).to(dtype)
    b = torch.randn(k, dtype=torch.float64, device=device).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, wt, b, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def allowed_error(reference_err, dtype):
    return max(2 * reference_err, ULP[dtype])


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("device", DEVICES)
def test_reduced_precision_forward_and_gradients(device, algorithm, shape, dtype, channels_last):
    x, w, b, kw = make_case(shape, device, dtype, channels_last)
    if algorithm == "winograd" and torchconv.unsupported_reason("winograd", x, w, kw["stride"], kw["dilation"],
                                                                kw["padding"], kw["groups"]) is not None:
        pytest.skip("winograd: 3x3 stride-1 undilated only")
    with skip_if_no_kernel(algorithm, device):
        torchconv.conv2d(x, w, b, algorithm=algorithm, **kw)
    x.requires_grad_(True), w.requires_grad_(True), b.requires_grad_(True)
    y = torchconv.conv2d(x, w, b, algorithm=algorithm, **kw)
    assert y.dtype == dtype
    assert y.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    gy = torch.randn_like(y)
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), gy)
    assert gx.dtype == gw.dtype == gb.dtype == dtype
    # An NCHW filter gradient stays NCHW (the GEMM writes one of several taps channels_last and copies it)
    assert channels_last or gw.is_contiguous()

    x64, w64, b64 = (t.detach().double().requires_grad_(True) for t in (x, w, b))
    y64 = F.conv2d(x64, w64, b64, **kw)
    refs = (y64,) + torch.autograd.grad(y64, (x64, w64, b64), gy.double())
    xr, wr, br = (t.detach().requires_grad_(True) for t in (x, w, b))
    try:  # PyTorch's own result at this precision (cuDNN on CUDA)
        yr = F.conv2d(xr, wr, br, **kw)
        theirs = (yr,) + torch.autograd.grad(yr, (xr, wr, br), gy)
    except RuntimeError:  # no kernel for the dtype on this device: the floor applies
        theirs = refs
    for name, ours, ref, pt in zip(("output", "grad_input", "grad_weight", "grad_bias"), (y, gx, gw, gb), refs, theirs):
        err, pt_err = rel_err(ours, ref), rel_err(pt, ref)
        assert err <= allowed_error(pt_err, dtype), f"{name}: error {err:.2e}, PyTorch's {pt_err:.2e}"


@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_widened_frozen_weight_is_cast_once(algorithm, dtype):
    """A float16 / bfloat16 call that a kernel computes in float32 (every CPU kernel) keeps the float32
    copies of a frozen weight and bias in the weight cache (one entry each), so later calls neither
    cast them nor re-transform the weight (the kernels' own caches key on the same copy: the CPU
    Winograd's transformed filters and the CPU GEMM's packed filters, a third entry); an in-place
    write to the weight is seen. A
    trainable weight is cast every call, and neither its copy nor a transform of it is cached. A freed
    weight's entry goes at the next insert."""
    torchconv.clear_weight_cache()
    x, w, b, kw = make_case(SHAPES[0], "cpu", dtype)
    conv = lambda w: torchconv.conv2d(x, w, b, algorithm=algorithm, **kw)
    entries = 3 if algorithm in ("winograd", "gemm") else 2
    conv(w)
    assert torchconv.weight_cache_size() == entries
    conv(w)
    assert torchconv.weight_cache_size() == entries
    with torch.no_grad():
        w.mul_(-1)  # in place: bumps the version counter
    ref = F.conv2d(x.double(), w.double(), b.double(), **kw)
    assert rel_err(conv(w), ref) <= ULP[dtype]
    assert torchconv.weight_cache_size() == entries
    other = make_case(SHAPES[0], "cpu", dtype)[1]  # allocated while w lives: another TensorImpl
    del w
    conv(other)
    assert torchconv.weight_cache_size() == entries  # w's entries dropped when other's went in; b's stays
    trainable = other.clone().requires_grad_(True)
    for _ in range(3):
        conv(trainable)
        assert torchconv.weight_cache_size() == entries


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=["fp32", "fp16", "fp64"])
@pytest.mark.parametrize("which", ["input", "weight", "both"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_in_channels_last_out(device, algorithm, which, dtype):
    """channels_last in, channels_last out -- but float64 on CUDA comes back NCHW, as PyTorch's CUDA
    convolution returns it (cuDNN's rule), output and gradients alike."""
    x, w, b, kw = make_case((2, 8, 16, 7, 6, 3, 3, 1, 1, 1, 1), device, dtype)
    if which in ("input", "both"):
        x = x.contiguous(memory_format=torch.channels_last)
    if which in ("weight", "both"):
        w = w.contiguous(memory_format=torch.channels_last)
    with skip_if_no_kernel(algorithm, device):
        torchconv.conv2d(x, w, b, algorithm=algorithm, **kw)
    x.requires_grad_(True), w.requires_grad_(True)
    y = torchconv.conv2d(x, w, b, algorithm=algorithm, **kw)
    gx, gw = torch.autograd.grad(y, (x, w), torch.randn_like(y))
    theirs = F.conv2d(x.detach(), w.detach(), b, **kw)
    nchw = dtype == torch.float64 and device == "cuda"
    assert theirs.is_contiguous() == nchw  # PyTorch's own rule, which ours follows
    for t in (y, gx, gw):
        assert t.is_contiguous() if nchw else t.is_contiguous(memory_format=torch.channels_last)
    assert nchw or not y.is_contiguous()
    ref = F.conv2d(x.detach().double(), w.detach().double(), b.double(), **kw)
    assert rel_err(y, ref) <= (1e-12 if dtype == torch.float64 else 1e-5 if dtype == torch.float32 else ULP[dtype])


# float64 layers whose groups hold one channel each, from an input with channels_last strides even
# where its 1 x 1 planes make them ambiguous: on a CPU PyTorch's slow backend (float64's) convolves a
# group at a time from channels_last copies of the group's input and filters (the slice itself where
# it is contiguous so already), and a dense copy of one channel on a 1 x 1 plane (or of 1 x 1 filters
# of one channel) reads as NCHW; on CUDA float64 comes back NCHW anyway. As (batch, plane, filter
# size, padding, channels_last weight, channels_last on a CPU): 1 x 1 planes (NCHW), with channels_last
# 3 x 3 filters (channels_last) or channels_last 1 x 1 filters (NCHW); batch 1, whose slice needs no
# copy and keeps the input's strides (channels_last); a 2 x 2 plane (channels_last).
ONE_CHANNEL_GROUP_CASES = [
    (2, (1, 1), 3, 2, False, False),
    (2, (1, 1), 3, 2, True, True),
    (2, (1, 1), 1, 1, True, False),
    (1, (1, 1), 1, 1, False, True),
    (2, (2, 2), 1, 1, False, True),
]


def with_channels_last_strides(t):
    """`t` laid out channels_last, with channels_last strides even in dimensions of size 1."""
    n, c, h, w = t.shape
    return t.new_empty(t.numel()).view(n, h, w, c).permute(0, 3, 1, 2).copy_(t)


@pytest.mark.parametrize("case", ONE_CHANNEL_GROUP_CASES, ids=[
    "plane-1x1", "plane-1x1-weight-3x3-cl", "plane-1x1-weight-1x1-cl", "batch-1", "plane-2x2"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("device", DEVICES)
def test_float64_one_channel_groups_come_back_in_pytorchs_layout(device, algorithm, case):
    n, (h, w_), r, padding, weight_channels_last, channels_last = case
    x = with_channels_last_strides(torch.randn(n, 4, h, w_, dtype=torch.float64, device=device))
    w = torch.randn(4, 1, r, r, dtype=torch.float64, device=device)
    w = with_channels_last_strides(w) if weight_channels_last else w
    kw = dict(stride=1, padding=padding, dilation=1, groups=4)
    reason = torchconv.unsupported_reason(algorithm, x, w, 1, 1, padding, 4)
    if reason is not None:
        pytest.skip(reason)
    x.requires_grad_(True), w.requires_grad_(True)
    y = torchconv.conv2d(x, w, algorithm=algorithm, **kw)
    theirs = F.conv2d(x.detach(), w.detach(), **kw)
    assert theirs.is_contiguous() == (device == "cuda" or not channels_last)  # PyTorch's rule
    for layout in (torch.contiguous_format, torch.channels_last):
        assert y.is_contiguous(memory_format=layout) == theirs.is_contiguous(memory_format=layout)
    assert rel_err(y, theirs) <= 1e-12
    op = getattr(torch.ops.torchconv, f"conv2d_{algorithm}").default  # the fake kernel's layout too
    torch.library.opcheck(op, (x, w, None, [1, 1], [padding, padding], [1, 1], 4))


# Sources contiguous in both layouts (1 x 1 planes) read through a filter of several taps:
# (input shape, padding) -- a 1 x 1 input padded to 3 x 3, and a 3 x 3 input whose output (the
# backward's grad_output) is 1 x 1.
BOTH_LAYOUTS_CASES = [((2, 64, 1, 1), 1), ((2, 64, 3, 3), 0)]


@pytest.mark.parametrize("precision", ["tf32", "fp16", "bf16"])
@pytest.mark.parametrize("case", BOTH_LAYOUTS_CASES, ids=["input-1x1", "grad_output-1x1"])
@pytest.mark.parametrize("device", [CUDA])
def test_gemm_sources_contiguous_in_both_layouts(device, case, precision):
    """A channels_last layer whose input or grad_output is also contiguous (a 1 x 1 plane), through a
    3x3 filter on tensor cores: forward and both gradients within the bar (the channels_last kernels
    read such a source; reading it as an NCHW one of several taps was an internal error)."""
    dtype = at_precision(precision)
    shape, padding = case
    x = torch.randn(*shape, device=device, dtype=torch.float64).to(dtype).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(32, shape[1], 3, 3, device=device, dtype=torch.float64) / 24).to(dtype)
    w = w.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True), w.requires_grad_(True)
    y = torchconv.conv2d(x, w, None, 1, padding, algorithm="gemm")
    assert y.shape[2:] == (1, 1) and y.is_contiguous() and y.is_contiguous(memory_format=torch.channels_last)
    gy = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w), gy)
    assert TENSOR_CORE_PLAN.search(torchconv.last_choice()), torchconv.last_choice()
    x64, w64 = (t.detach().double().requires_grad_(True) for t in (x, w))
    y64 = F.conv2d(x64, w64, None, 1, padding)
    xr, wr = (t.detach().requires_grad_(True) for t in (x, w))
    yr = F.conv2d(xr, wr, None, 1, padding)
    refs = (y64,) + torch.autograd.grad(y64, (x64, w64), gy.double())
    theirs = (yr,) + torch.autograd.grad(yr, (xr, wr), gy)
    for name, ours, ref, pt in zip(("output", "grad_input", "grad_weight"), (y,) + grads, refs, theirs):
        err, pt_err = rel_err(ours, ref), rel_err(pt, ref)
        assert err <= allowed_error(pt_err, dtype), f"{name}: error {err:.2e}, PyTorch's {pt_err:.2e}"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("device", DEVICES)
def test_mismatched_dtypes_raise(device, algorithm):
    x = torch.randn(1, 4, 6, 6, device=device, dtype=torch.float16)
    w = torch.randn(4, 4, 3, 3, device=device)
    with skip_if_no_kernel(algorithm, device):
        with pytest.raises(TypeError, match="weight dtype"):
            torchconv.conv2d(x, w, algorithm=algorithm)
    with pytest.raises(TypeError, match="bias dtype"):
        torchconv.conv2d(x, w.half(), torch.randn(4, device=device), algorithm=algorithm)


@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("device", DEVICES)
def test_autocast_casts_like_aten_conv2d(device, algorithm, dtype):
    if device == "cpu" and dtype == torch.float16 and not torch.amp.is_autocast_available("cpu"):
        pytest.skip("no CPU autocast")
    conv = torchconv.Conv2d(8, 16, 3, padding=1, algorithm=algorithm).to(device)
    ref_conv = torch.nn.Conv2d(8, 16, 3, padding=1).to(device)
    ref_conv.load_state_dict(conv.state_dict())
    x = torch.randn(2, 8, 9, 7, device=device)
    with skip_if_no_kernel(algorithm, device):
        conv(x)
    with torch.autocast(device, dtype=dtype):
        y = conv(x)
        y_ref = ref_conv(x)
    assert y.dtype == y_ref.dtype == dtype
    y.float().sum().backward()
    assert conv.weight.grad.dtype == torch.float32  # gradients flow back through the cast
    ref = F.conv2d(x.to(dtype).double(), conv.weight.detach().to(dtype).double(),
                   conv.bias.detach().to(dtype).double(), padding=1)
    assert rel_err(y, ref) <= allowed_error(rel_err(y_ref, ref), dtype)
    with torch.autocast(device, dtype=dtype):  # float64 stays float64, as for aten::conv2d
        assert conv.double()(x.double()).dtype == torch.float64


@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("device", DEVICES)
def test_autocast_model_with_float32_weights(device, dtype):
    """Inside autocast a layer receives the previous layer's reduced-precision output while its own
    weights stay float32: the algorithm choice sees the dtypes autocast hands the operator."""
    model = torch.nn.Sequential(torchconv.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                torchconv.Conv2d(16, 8, 3, padding=1, stride=2)).to(device)
    reference = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.Conv2d(16, 8, 3, padding=1, stride=2)).to(device)
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 12, 11, device=device)
    with torch.autocast(device, dtype=dtype):
        y, y_ref = model(x), reference(x)
    assert y.dtype == y_ref.dtype == dtype
    y.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
    exact = reference.double()(x.double())
    assert rel_err(y, exact) <= allowed_error(rel_err(y_ref, exact), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_casts_weight_and_bias_once_per_region(device):
    """Inside autocast, Conv2d (its choice remembered) and torchconv.conv2d with a named algorithm
    hand the operator their float32 weight and bias, whose casts autocast caches for the region as it
    does for aten::conv2d: past the first call only the float32 input is cast again, and every call
    gives the same bits."""
    dtype = torch.bfloat16
    if device == "cpu" and not torch.amp.is_autocast_available("cpu"):
        pytest.skip("no CPU autocast")
    conv = torchconv.Conv2d(8, 8, 3, padding=1).to(device)
    x = torch.randn(1, 8, 6, 5, device=device)

    def casts(fn):  # aten::_to_copy calls in three calls of fn
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = [fn() for _ in range(3)]
        return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy"), out

    with torch.autocast(device, dtype=dtype):
        first = conv(x)
        cast = [t.to(dtype) for t in (x, conv.weight, conv.bias)]
        algorithm = torchconv.select_algorithm(cast[0], cast[1], 1, 1, 1, padding=1)
        # The kernel's own casts (a CUDA-core kernel widens half precision to float32).
        kernel_casts, _ = casts(lambda: torchconv.conv2d(*cast, padding=1, algorithm=algorithm))
        module_casts, later = casts(lambda: conv(x))
        functional_casts, functional = casts(
            lambda: torchconv.conv2d(x, conv.weight, conv.bias, padding=1, algorithm=algorithm))
    assert module_casts == functional_casts == kernel_casts + 3, (module_casts, functional_casts, kernel_casts)
    assert first.dtype == dtype and all(torch.equal(y, first) for y in later + functional)
    assert conv(x).dtype == torch.float32  # outside the region: the choice for float32 again


@pytest.mark.parametrize("frozen", [False, True], ids=["inference_mode", "frozen_no_grad"])
@pytest.mark.parametrize("device", DEVICES)
def test_autocast_inference_casts_weights_once_across_regions(device, frozen):
    """An inference forward under autocast (inside torch.inference_mode, or with weights that do not
    require grad) casts a layer's float32 weight and bias once and keeps the copies across autocast
    regions, as the kernels keep their re-laid filters: later regions cast only the input. An
    in-place write to the weight reaches the next call. (Training keeps autocast's cast per region:
    the test above.)"""
    dtype = torch.bfloat16
    if device == "cpu" and not torch.amp.is_autocast_available("cpu"):
        pytest.skip("no CPU autocast")
    conv = torchconv.Conv2d(8, 8, 3, padding=1).to(device).requires_grad_(not frozen)
    x = torch.randn(1, 8, 6, 5, device=device)
    mode = torch.no_grad if frozen else torch.inference_mode

    def region():
        with mode(), torch.autocast(device, dtype=dtype):
            return conv(x)

    def casts(fn):  # aten::_to_copy calls in three calls of fn
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = [fn() for _ in range(3)]
        return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy"), out

    first = region()
    with torch.no_grad():  # plain (not inference) tensors, which the weight cache keeps, as the layer's copies
        cast = [t.to(dtype) for t in (x, conv.weight, conv.bias)]
    with mode(), torch.autocast(device, dtype=dtype):
        algorithm = torchconv.select_algorithm(cast[0], cast[1], 1, 1, 1, padding=1)
        # The kernel's own casts with a kept weight (a CUDA-core kernel widens half precision to
        # float32, and keeps a frozen weight's float32 copy from its first call on).
        torchconv.conv2d(*cast, padding=1, algorithm=algorithm)
        kernel_casts, _ = casts(lambda: torchconv.conv2d(*cast, padding=1, algorithm=algorithm))
    module_casts, later = casts(region)
    assert module_casts == kernel_casts + 3, (module_casts, kernel_casts)
    assert first.dtype == dtype and all(torch.equal(y, first) for y in later)
    with torch.no_grad():
        conv.weight.mul_(2)
    with mode():
        expected = torchconv.conv2d(x.to(dtype), conv.weight.to(dtype), conv.bias.to(dtype), padding=1,
                                    algorithm=algorithm)
    assert torch.equal(region(), expected)


# Two chunks of 32 float32 channels per tap (the second partial) and two tiles of filters.
TF32_SHAPES = SHAPES + [(2, 40, 136, 9, 11, 3, 3, 1, 1, 1, 1)]


def check_gemm_forward_and_grad_input(x, w, b, kw):
    """The GEMM's output and grad_input against float64, within 2x of PyTorch's (cuDNN's) error at the
    same precision (TF32 as the switch is set); returns the output and the forward and backward plans."""
    x = x.detach().requires_grad_(True)
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    forward_plan = torchconv.last_choice()
    gy = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, (x,), gy)
    backward_plan = torchconv.last_choice()
    xr = x.detach().requires_grad_(True)
    yr = F.conv2d(xr, w, b, **kw)
    (gxr,) = torch.autograd.grad(yr, (xr,), gy)
    x64 = x.detach().double().requires_grad_(True)
    y64 = F.conv2d(x64, w.double(), b.double(), **kw)
    (gx64,) = torch.autograd.grad(y64, (x64,), gy.double())
    for name, ours, theirs, ref in (("output", y, yr, y64), ("grad_input", gx, gxr, gx64)):
        err, their_err = rel_err(ours, ref), rel_err(theirs, ref)
        assert err <= allowed_error(their_err, x.dtype), f"{name}: error {err:.2e}, PyTorch's {their_err:.2e}"
    return y, forward_plan, backward_plan


def hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def tf32_pays(shape, channels_last=False):
    """With TF32 allowed, an NCHW float32 layer runs on tensor cores only where it has more than 7
    multiply-adds that read its input per byte of input and output: with fewer it is memory-bound on CUDA cores already
    (the FP32 ridge is about 10.8), so it runs in IEEE FP32, whatever the batch size. Channels_last
    calls run TF32 (the CUDA-core kernels would need NCHW copies)."""
    if channels_last:
        return True
    return macs_per_byte(shape) > 7


def taps_within_input(size, out, taps, stride, pad, dilation):
    """The (output, tap) pairs along one axis whose tap reads the input, not its padding."""
    return sum(0 <= o * stride + t * dilation - pad < size for o in range(out) for t in range(taps))


def macs_per_byte(shape):
    """A float32 layer's multiply-adds that read its input (a padding tap adds a zero), per byte of its
    input and output, each moved once."""
    n, c, k, h, w, r, s, stride, padding, dilation, groups = shape
    (sh, sw), (ph, pw), (dh, dw) = (v if isinstance(v, tuple) else (v, v) for v in (stride, padding, dilation))
    ho, wo = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1, (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
    pairs = taps_within_input(h, ho, r, sh, ph, dh) * taps_within_input(w, wo, s, sw, pw, dw)
    return n * k * (c // groups) * pairs / (4 * (n * c * h * w + n * k * ho * wo))


def tf32_grad_input(shape, channels_last=False):
    """grad_input's TF32 follows tf32_pays, except that an NCHW layer of fewer than 4 channels per
    group (an RGB stem) computes it in IEEE FP32, as cuDNN does with TF32 allowed."""
    n, c, k, h, w, r, s, stride, padding, dilation, groups = shape
    return tf32_pays(shape, channels_last) and (channels_last or c // groups >= 4)


# The wgmma config rule at its edges (Hopper), as (shape, forward config per precision):
# - grids too small for the GPU even with small tiles, long reductions: the reduction splits across
#   blocks of large (medium) tiles, FP32 sums added in a fixed order. Two filter tiles, the second
#   partial; groups; stride 2 with 64 filters (medium); one tile of 70 filters (the last four
#   channels partial) and 70 positions split 8 ways, where some splits have no rows to finish;
# - such a grid with a reduction too short to split (1x1, 64 channels): the tiny tile;
# - more than 128 filters and at least two waves of 128 x 256 tiles: the wide tile (one partial);
# - more than 64 filters: the splits of the large or wide tile as clusters where the launch-time
#   estimate says they pay (cluster_split_estimate): a few tiles of 512 filters (7 x 7 outputs, batch
#   32); and not where the splits would be short (R7: 256 filters, stride 2, 18 chunks in 16-bit),
#   nor, in 16-bit, where the large tile's blocks each have an SM to themselves and the splits would
#   leave the busiest SM's multiply-adds as they are (R9: 98 large tiles of 256 filters; TF32 still
#   splits it as wide clusters). Those take the large tile unsplit where small tiles would fill a
#   wave (small is forced only). Where the splits' blocks too each keep an SM to themselves, they
#   split down to 3 chunks, and in TF32 such splits of the large tile are taken over any wide launch
#   (R9 at batch 1: 4 large tiles of 36 chunks in 16-bit, 72 in TF32, 8 splits; R7 at batch 1: 4 large
#   tiles of 18 chunks in 16-bit, 6 splits of 3, 36 in TF32, 8 splits);
# - a grid of wide tiles just over a wave (17 x 17, 512 filters, 9216 long reductions): whole tiles
#   for the full wave, clusters of splits for the rest ("/tail", test_wgmma_tail_splits).
SPLIT = {p: r"wgmma-(large|medium|wide)/splits=([2-9]|\d\d+)$" for p in ("tf32", "fp16", "bf16")}
TINY = {p: r"wgmma-tiny/splits=1$" for p in ("tf32", "fp16", "bf16")}
WIDE = {p: r"wgmma-wide/splits=1$" for p in ("tf32", "fp16", "bf16")}
WIDE_SPLIT = {p: r"wgmma-wide/splits=[2-8]$" for p in ("tf32", "fp16", "bf16")}
WIDE_TAIL = {p: r"wgmma-wide/splits=[2-8]/tail$" for p in ("tf32", "fp16", "bf16")}
SHORT_UNSPLIT_16 = {"tf32": r"wgmma-\w+/splits=\d+$"} | {p: r"wgmma-large/splits=1$" for p in ("fp16", "bf16")}
LONE_LARGE_16 = {"tf32": r"wgmma-wide/splits=[2-8]$"} | {p: r"wgmma-large/splits=1$" for p in ("fp16", "bf16")}
LONE_SPLITS = {p: r"wgmma-large/splits=8$" for p in ("tf32", "fp16", "bf16")}
LONE_SHORT_SPLITS = {"tf32": r"wgmma-large/splits=8$"} | {p: r"wgmma-large/splits=6$" for p in ("fp16", "bf16")}
GRID_CASES = [
    ((2, 512, 136, 7, 5, 3, 3, 1, 1, 1, 1), SPLIT),
    ((2, 256, 256, 5, 6, 3, 3, 1, 1, 1, 2), SPLIT),
    ((1, 256, 64, 9, 8, 3, 3, 2, 1, 1, 1), SPLIT),
    ((2, 512, 70, 7, 5, 3, 3, 1, 1, 1, 1), SPLIT),
    ((2, 64, 136, 7, 5, 1, 1, 1, 0, 1, 1), TINY),
    ((2, 16, 136, 136, 136, 3, 3, 1, 1, 1, 1), WIDE),
    ((32, 512, 512, 7, 7, 3, 3, 1, 1, 1, 1), WIDE_SPLIT),
    ((32, 1024, 512, 17, 17, 3, 3, 1, 1, 1, 1), WIDE_TAIL),
    ((32, 128, 256, 28, 28, 3, 3, 2, 1, 1, 1), SHORT_UNSPLIT_16),
    ((32, 256, 256, 14, 14, 3, 3, 1, 1, 1, 1), LONE_LARGE_16),
    ((1, 256, 256, 14, 14, 3, 3, 1, 1, 1, 1), LONE_SPLITS),
    ((1, 128, 256, 28, 28, 3, 3, 2, 1, 1, 1), LONE_SHORT_SPLITS),
]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("case", GRID_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_config_rule(device, case, precision, channels_last):
    shape, expected = case
    dtype = at_precision(precision)
    x, w, b, kw = make_case(shape, device, dtype, channels_last)
    y, forward_plan, _ = check_gemm_forward_and_grad_input(x, w, b, kw)
    if hopper():
        assert re.match("forward:" + expected[precision], forward_plan), forward_plan
    # The same bits every call: split sums are added in a fixed order.
    assert torch.equal(torchconv.conv2d(x.detach(), w, b, algorithm="gemm", **kw), y.detach())
    if hopper() and re.search("splits=[2-9]", forward_plan):
        # The splits of a tile run as one thread-block cluster and add their sums through distributed
        # shared memory: no workspace (grids of a few tiles, whose clusters take one wave; the
        # estimate counts splits only as clusters).
        assert torchconv.last_workspace_bytes() == 0


# The threads' gather of A (TcLoader: TF32 channels_last 1x1 layers; 16-bit layers whose taps pack
# several to a chunk) in every wgmma config, forced, over reductions of 1 to 7 chunks: each config
# loads a block's chunks all at once up to its own stage count (3 to 6) and kStages - 2 ahead past
# it. The grid (3 images of 7 x 9 outputs, 72 filters: a partial filter tile) puts a thread's rows,
# a pass of the block's threads apart, across column-grid rows and images.
GATHERED_CASES = [("tf32", (3, 32 * k, 72, 7, 9, 1, 1, 1, 0, 1, 1)) for k in range(1, 8)] + [
    ("bf16", (3, c, 72, 7, 9, 3, 3, 1, 1, 1, 1)) for c in (8, 16, 32)]  # 2, 3 and 5 chunks of packed taps


@pytest.mark.parametrize("config", WGMMA_CONFIGS)
@pytest.mark.parametrize("case", GATHERED_CASES, ids=lambda c: c[0] + "-" + shape_id(c[1]))
@pytest.mark.parametrize("device", [CUDA])
def test_gathered_reductions_of_every_length_in_every_wgmma_config(device, case, config):
    if not hopper():
        pytest.skip("wgmma configs run on sm_90a")
    precision, shape = case
    dtype = at_precision(precision)
    x, w, b, kw = make_case(shape, device, dtype, channels_last=True)
    with using_config("gemm", config):
        _, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
    assert f"forward:{config}/" in forward_plan, forward_plan
    assert f"grad_input:{config}/" in backward_plan, backward_plan


# The warp-specialized persistent tile (wgmma-ws), forced: a producer warpgroup gathers A (16-bit
# packed taps: 3 to 32 channels) or issues its im2col tensor copies (64 channels or more; TF32, whose
# 3x3 sources are rounded copies), consumer warpgroups run the MMAs and the epilogue, and each block
# walks tiles through one ring of stages -- several tiles a block where the grid has more tiles than
# block slots (the 64 x 64 and 66 x 62 outputs at batch 8: 512 and 508 position tiles). Partial
# position and filter tiles, batch 1, H != W, groups of 64 channels, stride 2 (its grad_input's
# phases a launch each), a 1x1 layer.
WS_CASES = [
    ("bf16", (3, 8, 72, 7, 9, 3, 3, 1, 1, 1, 1)),
    ("fp16", (2, 32, 48, 20, 18, 3, 3, 1, 1, 1, 1)),
    ("bf16", (1, 3, 32, 61, 67, 3, 3, 1, 1, 1, 1)),
    ("bf16", (8, 64, 72, 64, 64, 3, 3, 1, 1, 1, 1)),
    ("fp16", (8, 16, 64, 66, 62, 3, 3, 1, 1, 1, 1)),
    ("bf16", (2, 128, 128, 13, 11, 3, 3, 2, 1, 1, 2)),
    ("fp16", (4, 256, 96, 9, 9, 1, 1, 1, 0, 1, 1)),
    ("tf32", (2, 64, 40, 15, 17, 3, 3, 1, 1, 1, 1)),
]


@pytest.mark.parametrize("case", WS_CASES, ids=lambda c: c[0] + "-" + shape_id(c[1]))
@pytest.mark.parametrize("device", [CUDA])
def test_warp_specialized_wgmma_tile(device, case):
    if not hopper():
        pytest.skip("wgmma configs run on sm_90a")
    precision, shape = case
    x, w, b, kw = make_case(shape, device, at_precision(precision), channels_last=True)
    with using_config("gemm", WGMMA_WS_CONFIG):
        y, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
        # Every tile written by the block that walked to it, the same bits every call.
        assert torch.equal(torchconv.conv2d(x, w, b, algorithm="gemm", **kw), y.detach())
    assert f"forward:{WGMMA_WS_CONFIG}/" in forward_plan, forward_plan
    assert f"grad_input:{WGMMA_WS_CONFIG}/" in backward_plan, backward_plan


# The GEMM's forward on Hopper reads a 16-bit weight as it is -- no re-laid copy, none cached -- where
# the weight is [filters][taps][channels] contiguous (channels_last, or any layout of a 1x1 filter)
# and a group's channels are whole 64-channel chunks; otherwise it re-lays the weight (one cache
# entry for a frozen weight). (precision, shape, weight's memory format, read as it is): filters not
# a multiple of the tile (a group's last tile takes the next group's rows, never stored), groups,
# stride, dilation, a 1x1 filter in NCHW; an NCHW 3x3 weight and 40 channels a group re-laid.
DIRECT_WEIGHT_CASES = [
    ("bf16", (2, 64, 72, 9, 11, 3, 3, 1, 1, 1, 1), torch.channels_last, True),
    ("fp16", (2, 128, 80, 8, 7, 3, 3, 2, 1, 1, 2), torch.channels_last, True),
    ("bf16", (2, 64, 64, 10, 10, 3, 3, 1, 2, 2, 1), torch.channels_last, True),
    ("bf16", (1, 64, 96, 13, 12, 1, 1, 1, 0, 1, 1), torch.contiguous_format, True),
    ("fp16", (2, 256, 264, 6, 5, 3, 3, 1, 1, 1, 1), torch.channels_last, True),
    ("fp16", (2, 64, 48, 9, 9, 3, 3, 1, 1, 1, 1), torch.contiguous_format, False),
    ("bf16", (2, 40, 48, 9, 9, 3, 3, 1, 1, 1, 1), torch.channels_last, False),
]


def check_direct_weight_forward(x, w, kw, direct):
    """The forward against float64 (within twice PyTorch's error at the precision), twice: the second
    time after an in-place write to the weight; the weight cache holds no entry where the weight is
    read as it is, else one."""
    torchconv.clear_weight_cache()
    for _ in range(2):
        y = torchconv.conv2d(x, w, None, algorithm="gemm", **kw)
        ref = F.conv2d(x.double(), w.double(), None, **kw)
        theirs = F.conv2d(x, w, None, **kw)
        assert rel_err(y, ref) <= allowed_error(rel_err(theirs, ref), x.dtype)
        assert torchconv.weight_cache_size() == (0 if direct else 1)
        with torch.no_grad():
            w.mul_(-1)  # in place: the next call must see it


# The GEMM's grad_input on Hopper reads a 16-bit weight as it is too -- its columns: a tap's channels
# are the destination channels, contiguous in a channels_last weight -- where a group's filters are
# whole 64-filter chunks, its channels whole 16-byte words and grad_output comes by im2col tensor
# copies (channels_last) and a group has at least 64 channels; otherwise it re-lays the weight (one
# cache entry for a frozen weight). (precision, shape, weight's memory format, read as it is):
# channels not a multiple of the tile (the channels past the weight's are zero), groups, dilation,
# stride 2 (four phases in one launch, each at its own taps), a 1x1 filter in NCHW, 264 channels (wide
# tiles); an NCHW 3x3 weight, 40 filters, groups of 40 channels and 20 channels (not whole words)
# re-laid.
GRAD_INPUT_DIRECT_WEIGHT_CASES = [
    ("bf16", (2, 72, 64, 9, 11, 3, 3, 1, 1, 1, 1), torch.channels_last, True),
    ("fp16", (2, 128, 128, 8, 7, 3, 3, 1, 1, 1, 2), torch.channels_last, True),
    ("fp16", (2, 80, 128, 8, 7, 3, 3, 1, 1, 1, 2), torch.channels_last, False),
    ("bf16", (2, 64, 64, 10, 10, 3, 3, 1, 2, 2, 1), torch.channels_last, True),
    ("bf16", (2, 64, 128, 12, 10, 3, 3, 2, 1, 1, 1), torch.channels_last, True),
    ("bf16", (1, 96, 64, 13, 12, 1, 1, 1, 0, 1, 1), torch.contiguous_format, True),
    ("fp16", (2, 264, 256, 6, 5, 3, 3, 1, 1, 1, 1), torch.channels_last, True),
    ("fp16", (2, 48, 64, 9, 9, 3, 3, 1, 1, 1, 1), torch.contiguous_format, False),
    ("bf16", (2, 48, 40, 9, 9, 3, 3, 1, 1, 1, 1), torch.channels_last, False),
    ("bf16", (2, 20, 64, 9, 9, 3, 3, 1, 1, 1, 1), torch.channels_last, False),
]


def check_direct_weight_grad_input(x, w, kw, direct):
    """grad_input alone (the backward operator) against float64, within twice PyTorch's error at the
    precision, twice: the second time after an in-place write to the weight; the weight cache holds no
    entry where the weight is read as it is, else one."""
    conv = ([kw["stride"]] * 2, [kw["padding"]] * 2, [kw["dilation"]] * 2, kw["groups"])
    torchconv.clear_weight_cache()
    for _ in range(2):
        y_shape = [(size + 2 * kw["padding"] - kw["dilation"] * (taps - 1) - 1) // kw["stride"] + 1
                   for size, taps in zip(x.shape[2:], w.shape[2:])]
        gy = torch.randn(x.shape[0], w.shape[0], *y_shape, dtype=torch.float64, device=x.device).to(x.dtype)
        gy = gy.contiguous(memory_format=torch.channels_last)
        gx, _, _ = torch.ops.torchconv.conv2d_gemm_backward(gy, x, w, *conv, [True, False, False])
        ref = torch.nn.grad.conv2d_input(x.shape, w.double(), gy.double(), **kw)
        theirs = torch.nn.grad.conv2d_input(x.shape, w, gy, **kw)
        assert rel_err(gx, ref) <= allowed_error(rel_err(theirs, ref), x.dtype)
        assert torchconv.weight_cache_size() == (0 if direct else 1)
        with torch.no_grad():
            w.mul_(-1)  # in place: the next call must see it


# Each pass's checks and its cases of the weight read as it is (or re-laid), and the shape on which
# every forced wgmma config reads it: 72 filters (forward) or 72 channels (grad_input), so that a
# tile of 64 to 256 is partial.
DIRECT_WEIGHT_PASSES = {
    "forward": (check_direct_weight_forward, DIRECT_WEIGHT_CASES, (2, 64, 72, 20, 18, 3, 3, 1, 1, 1, 1)),
    "grad_input": (check_direct_weight_grad_input, GRAD_INPUT_DIRECT_WEIGHT_CASES, (2, 72, 64, 20, 18, 3, 3, 1, 1, 1, 1)),
}


@pytest.mark.parametrize("pass_, case", [(p, c) for p, (_, cases, _) in DIRECT_WEIGHT_PASSES.items() for c in cases],
                         ids=lambda c: c if isinstance(c, str) else
                         c[0] + "-" + shape_id(c[1]) + ("-direct" if c[3] else "-relaid"))
@pytest.mark.parametrize("device", [CUDA])
def test_gemm_reads_a_16_bit_weight_as_it_is(device, pass_, case):
    if not hopper():
        pytest.skip("the wgmma kernels run on sm_90a")
    check = DIRECT_WEIGHT_PASSES[pass_][0]
    precision, shape, weight_format, direct = case
    x, w, _, kw = make_case(shape, device, at_precision(precision), channels_last=True)
    check(x, w.contiguous(memory_format=weight_format), kw, direct)
    assert f"{pass_}:wgmma-" in torchconv.last_choice(), torchconv.last_choice()


@pytest.mark.parametrize("pass_", DIRECT_WEIGHT_PASSES)
@pytest.mark.parametrize("config", WGMMA_CONFIGS + (WGMMA_WS_CONFIG,))
@pytest.mark.parametrize("device", [CUDA])
def test_forced_wgmma_configs_read_a_16_bit_weight_as_it_is(device, config, pass_):
    """Every wgmma tile's B copies from the weight itself: its rows (forward, K-major) or its columns
    (grad_input, MN-major)."""
    if not hopper():
        pytest.skip("wgmma configs run on sm_90a")
    check, _, shape = DIRECT_WEIGHT_PASSES[pass_]
    x, w, _, kw = make_case(shape, device, torch.bfloat16, channels_last=True)
    with using_config("gemm", config):
        check(x, w.contiguous(memory_format=torch.channels_last), kw, True)
        assert f"{pass_}:{config}/" in torchconv.last_choice(), torchconv.last_choice()


@pytest.mark.parametrize("device", [CUDA])
def test_strided_grad_input_phases_read_the_weight_by_columns_under_a_forced_config(device):
    """A stride-2 grad_input under a forced config runs a launch a phase, each over its own taps of
    the filter (the phases' launch takes the rule's configs and re-laid Wt): each reads the weight's
    columns at its taps."""
    if not hopper():
        pytest.skip("wgmma configs run on sm_90a")
    x, w, _, kw = make_case((2, 64, 64, 13, 10, 3, 3, 2, 1, 1, 1), device, torch.float16, channels_last=True)
    with using_config("gemm", "wgmma-large"):
        check_direct_weight_grad_input(x, w.contiguous(memory_format=torch.channels_last), kw, True)


# The rule's use of the warp-specialized tile: ungrouped 16-bit launches of at most two chunks (128 channels)
# to at most 256 destination channels, or of four chunks to at most 64, on grids of at least two tiles per
# block slot (the grid walks tiles; 8 x 128 x 128, 8 x 112 x 112 and 8 x 96 x 96 positions: 1024, 784 and 576
# tiles of 128) -- 1x1 layers of 64 and 128 channels to 64, 128 and 256 filters, of 192 and 256 channels to
# 64, an RGB stem's forward (3 channels padded to a word, 9 taps: 2 chunks), the grad_input of 64 filters to
# 192 and 256 channels, 16-bit NCHW planes read as they are to at most 128 destination channels (128 channels
# to 256 filters from planes keep the rule's tile) -- and not longer reductions (320 channels, four chunks to
# 128 outputs, the 256-filter layer's and the stem's grad_input: 256 and 32 x 9), wider outputs (384 filters;
# the 320-channel layer's grad_input), grids of fewer tiles (20 x 20 positions), or TF32 (the threads would
# gather float32).
WS_RULE_CASES = [
    ((8, 64, 64, 128, 128, 1, 1, 1, 0, 1, 1), "bf16", True, ("ws", "ws")),
    ((8, 128, 64, 112, 112, 1, 1, 1, 0, 1, 1), "fp16", True, ("ws", "ws")),
    ((8, 128, 256, 64, 64, 1, 1, 1, 0, 1, 1), "bf16", True, ("ws", "rule")),
    ((8, 3, 32, 128, 128, 3, 3, 1, 1, 1, 1), "bf16", True, ("ws", "rule")),
    ((8, 192, 64, 128, 128, 1, 1, 1, 0, 1, 1), "bf16", True, ("ws", "ws")),
    ((8, 256, 64, 112, 112, 1, 1, 1, 0, 1, 1), "fp16", True, ("ws", "ws")),
    ((8, 320, 64, 112, 112, 1, 1, 1, 0, 1, 1), "bf16", True, ("rule", "rule")),
    ((8, 256, 128, 112, 112, 1, 1, 1, 0, 1, 1), "bf16", True, ("rule", "ws")),
    ((8, 64, 384, 64, 64, 1, 1, 1, 0, 1, 1), "fp16", True, ("rule", "rule")),
    ((4, 64, 128, 20, 20, 1, 1, 1, 0, 1, 1), "bf16", True, ("rule", "rule")),
    ((8, 64, 64, 128, 128, 1, 1, 1, 0, 1, 1), "bf16", False, ("ws", "ws")),
    ((8, 128, 256, 64, 64, 1, 1, 1, 0, 1, 1), "fp16", False, ("rule", "rule")),
    ((8, 128, 128, 96, 96, 1, 1, 1, 0, 1, 1), "fp16", False, ("ws", "ws")),
    ((8, 64, 64, 128, 128, 1, 1, 1, 0, 1, 1), "tf32", True, ("rule", "rule")),
]


@pytest.mark.parametrize("case", WS_RULE_CASES, ids=lambda c: f"{c[1]}-{'nhwc' if c[2] else 'nchw'}-" + shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_rule_takes_the_warp_specialized_tile_for_short_16_bit_reductions(device, case):
    shape, precision, channels_last, expected = case
    x, w, b, kw = make_case(shape, device, at_precision(precision), channels_last=channels_last)
    y, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
    if hopper():
        for pass_, plan, want in zip(("forward", "grad_input"), (forward_plan, backward_plan), expected):
            assert (f"{pass_}:{WGMMA_WS_CONFIG}/" in plan) == (want == "ws"), plan


# The rule's 192 x 256 tile (wgmma-wide192) in wide's place: 16-bit channels_last layers of several
# taps whose A comes by tensor copies, more than 128 filters, at least two waves of its tiles (8 x 96 x
# 96 positions: 384 tiles) -- not fewer tiles (8 x 40 x 40: 67), 1x1 layers, NCHW planes read as they
# are, TF32 or 128 filters (the grad_input of the first).
WIDE192_RULE_CASES = [
    ((8, 128, 256, 96, 96, 3, 3, 1, 1, 1, 1), "bf16", True, True),
    ((8, 128, 264, 96, 96, 3, 3, 1, 1, 1, 1), "fp16", True, True),
    ((8, 128, 256, 40, 40, 3, 3, 1, 1, 1, 1), "bf16", True, False),
    ((8, 1024, 256, 96, 96, 1, 1, 1, 0, 1, 1), "bf16", True, False),
    ((8, 1024, 256, 96, 96, 1, 1, 1, 0, 1, 1), "bf16", False, False),
    ((8, 128, 256, 96, 96, 3, 3, 1, 1, 1, 1), "tf32", True, False),
]


@pytest.mark.parametrize("case", WIDE192_RULE_CASES,
                         ids=lambda c: f"{c[1]}-{'nhwc' if c[2] else 'nchw'}-" + shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_rule_takes_the_192_row_tile_for_long_16_bit_grids(device, case):
    shape, precision, channels_last, expected = case
    x, w, b, kw = make_case(shape, device, at_precision(precision), channels_last=channels_last)
    y, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
    if hopper():
        assert ("forward:wgmma-wide192/" in forward_plan) == expected, forward_plan
        assert "grad_input:wgmma-wide192/" not in backward_plan, backward_plan


# The warp-specialized tile, forced, on 16-bit NCHW 1x1 layers read as planes (the producers copy A
# in the planes' order, the MMAs read it transposed): planes of whole words (96 positions), of
# half-words (36 and 196 positions: a word crosses images), tiles past the last position, channels
# that are not whole chunks (100), partial filter tiles (72), groups, a grid walking several tiles a
# block (16 x 32 x 32 positions: 384 tiles over two blocks an SM), and a source 8 bytes past a 16-byte
# boundary; forward and grad_input, with no channels_last copy of the source.
WS_PLANES_CASES = [
    ("bf16", (2, 100, 72, 8, 12, 1, 1, 1, 0, 1, 1), 0),
    ("fp16", (3, 64, 72, 6, 6, 1, 1, 1, 0, 1, 1), 0),
    ("bf16", (4, 96, 80, 14, 14, 1, 1, 1, 0, 1, 1), 0),
    ("fp16", (2, 128, 144, 10, 10, 1, 1, 1, 0, 1, 2), 0),
    ("bf16", (16, 128, 192, 32, 32, 1, 1, 1, 0, 1, 1), 0),
    ("bf16", (3, 64, 72, 8, 8, 1, 1, 1, 0, 1, 1), 8),
]


@pytest.mark.parametrize("case", WS_PLANES_CASES, ids=lambda c: f"{c[0]}-{shape_id(c[1])}-offset{c[2]}")
@pytest.mark.parametrize("device", [CUDA])
def test_warp_specialized_wgmma_tile_reads_16bit_nchw_planes(device, case):
    if not hopper():
        pytest.skip("wgmma configs run on sm_90a")
    precision, shape, offset = case
    x0, w, b, kw = make_case(shape, device, at_precision(precision))
    x = x0
    if offset:  # a view 8 bytes past a 16-byte boundary
        x = misaligned_copy(x0, offset // x0.element_size())
        assert x.is_contiguous() and x.data_ptr() % 16 == offset
    with using_config("gemm", WGMMA_WS_CONFIG):
        y, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
        assert torch.equal(torchconv.conv2d(x, w, b, algorithm="gemm", **kw), y.detach())
        assert forward_extra_bytes(x, w.detach(), b, kw) < x.numel() * x.element_size() // 2
    assert f"forward:{WGMMA_WS_CONFIG}/" in forward_plan, forward_plan
    assert f"grad_input:{WGMMA_WS_CONFIG}/" in backward_plan, backward_plan


@pytest.mark.parametrize("device", [CUDA])
def test_warp_specialized_wgmma_tile_refuses_a_gathered_float32_source(device):
    """A float32 source the threads would gather (a TF32 channels_last 1x1 layer: no rounded copy) is an
    error naming the config when wgmma-ws is forced, not a tile of unrounded TF32 operands."""
    if not hopper():
        pytest.skip("wgmma configs run on sm_90a")
    x, w, b, kw = make_case((2, 64, 40, 7, 9, 1, 1, 1, 0, 1, 1), device, at_precision("tf32"), channels_last=True)
    with using_config("gemm", WGMMA_WS_CONFIG), pytest.raises(ValueError, match="wgmma-ws config takes"):
        torchconv.conv2d(x, w, b, algorithm="gemm", **kw)


# Grids just over whole waves of tiles (17 x 17 outputs, batch 32: 146 tiles of 128 x 256, 292 of
# 128 x 128) with at least 8 chunks of reduction: the tiles of the full wave run whole, two or more to
# a cluster, and each of the rest splits its reduction across a cluster (cluster_split_estimate's
# splits of the last wave), so that the last wave is short instead of as long as a full one. The
# split tiles include the partial last row tile (9248 rows) and, with 500 filters, a partial filter
# tile. TF32 takes the wide tile, from NCHW planes as from channels_last (one estimate for both, so
# that they give the same bits); 16-bit 1x1 launches the large one (the wide tile only from two waves).
TAIL_16 = r"wgmma-large/splits=[2-8]/tail"
TAIL_CASES = [
    ((32, 1024, 512, 17, 17, 1, 1, 1, 0, 1, 1),
     {"tf32-nchw": r"wgmma-wide/splits=[2-8]/tail", "tf32-nhwc": r"wgmma-wide/splits=[2-8]/tail", "fp16-nchw": TAIL_16,
      "bf16-nhwc": TAIL_16}),
    ((32, 1000, 500, 17, 17, 1, 1, 1, 0, 1, 1),
     {"tf32-nchw": r"wgmma-\w+/splits=\d+(/tail)?", "tf32-nhwc": r"wgmma-wide/splits=[2-8]/tail",
      "fp16-nchw": TAIL_16, "bf16-nhwc": TAIL_16}),
]


# The precisions and layouts of the 1x1 rule's cases, '<precision>-<layout>'.
SETTINGS_1X1 = ["tf32-nchw", "tf32-nhwc", "fp16-nchw", "bf16-nhwc"]


def setting_case(shape, device, setting):
    """make_case at a setting of SETTINGS_1X1 (PyTorch's TF32 switch set for its precision)."""
    precision, layout = setting.split("-")
    return make_case(shape, device, at_precision(precision), channels_last=layout == "nhwc")


def split_tiles_case(shape, device, setting):
    """The GEMM's forward and grad_input of setting_case's tensors, checked against float64
    (check_gemm_forward_and_grad_input), and the same forward bits on a second call: a split tile adds
    its splits' sums in split order. Returns the forward's and the backward's plans."""
    x, w, b, kw = setting_case(shape, device, setting)
    y, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
    assert torch.equal(torchconv.conv2d(x.detach(), w, b, algorithm="gemm", **kw), y.detach())
    return forward_plan, backward_plan


@pytest.mark.parametrize("setting", SETTINGS_1X1)
@pytest.mark.parametrize("case", TAIL_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_tail_splits(device, case, setting):
    shape, expected = case
    forward_plan, _ = split_tiles_case(shape, device, setting)
    if hopper():
        assert re.fullmatch("forward:" + expected[setting] + r"(/a=\w+)?", forward_plan), forward_plan
        if "/tail" in forward_plan:  # the split tiles' sums meet in distributed shared memory
            assert torchconv.last_workspace_bytes() == 0


# Split reductions summed through the workspace by tc_split_finish_kernel, the path of a GPU (or a
# partition of one) that cannot hold the splits' clusters, forced by the testing aid on a whole GPU:
# the rule's splits of the grid cases above (two filter tiles, groups, stride 2 with 64 filters, a
# tile of 70 filters whose splits partly have no rows, the wide tile's splits) and of a tail grid,
# which splits every tile there. The workspace starts as NaN (poisoning), so a sum the splits do not
# write fails the float64 check; the finish adds the splits in split order, as the clusters do, so
# the bits are the clusters' wherever every tile splits.
WORKSPACE_SPLIT_CASES = [c[0] for c in GRID_CASES if c[1] in (SPLIT, WIDE_SPLIT)] + [TAIL_CASES[0][0]]


@contextlib.contextmanager
def aid_set(name, value=True):
    """A testing aid of torchconv._C (set_<name> / get_<name>) set to `value` for the block, then as it was."""
    was = getattr(torchconv._C, f"get_{name}")()
    getattr(torchconv._C, f"set_{name}")(value)
    try:
        yield
    finally:
        getattr(torchconv._C, f"set_{name}")(was)


@pytest.mark.parametrize("setting", SETTINGS_1X1)
@pytest.mark.parametrize("shape", WORKSPACE_SPLIT_CASES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_split_sums_through_the_workspace(device, shape, setting):
    if not hopper():
        pytest.skip("split reductions run on wgmma (sm_90a)")
    x, w, b, kw = setting_case(shape, device, setting)
    clustered = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    clustered_plan = torchconv.last_choice()
    assert re.search(r"/splits=([2-9]|\d\d+)", clustered_plan) and torchconv.last_workspace_bytes() == 0
    with aid_set("split_sums_through_workspace"):
        y, forward_plan, _ = check_gemm_forward_and_grad_input(x, w, b, kw)
        assert re.fullmatch(r"forward:wgmma-\w+/splits=([2-9]|\d\d+)(/a=\w+)?", forward_plan), forward_plan
        again = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
        assert torchconv.last_workspace_bytes() > 0
    assert not torchconv._C.get_split_sums_through_workspace()
    assert torch.equal(again, y.detach())
    if "/tail" not in clustered_plan:
        assert torch.equal(y.detach(), clustered)


# 16-bit NCHW 1x1 layers of stride 1 without padding whose planes are whole 8-byte half-words (H x W
# a multiple of 4), on Hopper: the wgmma kernels read the NCHW tensors as they are -- the forward's and
# grad_input's A tiles keep the planes' order, read by the MMAs transposed; grad_weight's operands
# both run along the positions (K-major) -- so no call makes a channels_last copy, nor a backward of
# both gradients one of grad_output. Tiles across images (96 and 1024 positions a plane), channels
# that are not whole chunks (100, 96), partial filter tiles (72, 72 a group, 68, 192), groups, a
# plane of 8 positions (a tile mostly past the last position), tiny, medium and large tiles and split
# reductions; grad_weight takes filters that are not whole words (68; grad_input, which needs whole
# words, widens to float32 there). Planes of 36, 100 and 196 positions are half-words short of whole
# words: a word of 8 positions crosses images there, copied as two halves. Planes of 7 x 9
# positions, and strided 1x1 layers, read channels_last copies.
PLANES_CASES = [
    ((2, 100, 72, 8, 12, 1, 1, 1, 0, 1, 1), True),
    ((3, 64, 72, 6, 6, 1, 1, 1, 0, 1, 1), True),
    ((2, 128, 144, 10, 10, 1, 1, 1, 0, 1, 2), True),
    ((4, 96, 80, 14, 14, 1, 1, 1, 0, 1, 1), True),
    ((3, 128, 144, 16, 16, 1, 1, 1, 0, 1, 2), True),
    ((2, 64, 68, 8, 8, 1, 1, 1, 0, 1, 1), True),
    ((1, 64, 64, 4, 2, 1, 1, 1, 0, 1, 1), True),
    ((20, 96, 64, 32, 32, 1, 1, 1, 0, 1, 1), True),
    ((16, 128, 192, 32, 32, 1, 1, 1, 0, 1, 1), True),
    ((32, 512, 256, 8, 8, 1, 1, 1, 0, 1, 1), True),
    ((2, 100, 72, 7, 9, 1, 1, 1, 0, 1, 1), False),
    ((2, 64, 72, 16, 16, 1, 1, 2, 0, 1, 1), False),
]


def allocated_blocks(*tensors):
    """The caching allocator's bytes for `tensors` (512-byte blocks)."""
    return sum((t.numel() * t.element_size() + 511) // 512 * 512 for t in tensors)


def backward_extra_bytes(x, w, kw, gy):
    """The bytes a backward call of both gradients allocates beyond them."""
    conv = ([kw["stride"]] * 2, [kw["padding"]] * 2, [kw["dilation"]] * 2, kw["groups"])
    with torch.no_grad():
        torch.ops.torchconv.conv2d_gemm_backward(gy, x, w, *conv, [True, True, False])
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        gx, gw, _ = torch.ops.torchconv.conv2d_gemm_backward(gy, x, w, *conv, [True, True, False])
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before - allocated_blocks(gx, gw)


def gemm_passes(x, w, b, kw, gy):
    """The GEMM's output of x and its grad_input for grad_output gy, and the two passes' plans."""
    xg = x.detach().requires_grad_(True)
    out = torchconv.conv2d(xg, w, b, algorithm="gemm", **kw)
    plan = torchconv.last_choice()
    (gx,) = torch.autograd.grad(out, (xg,), gy)
    return out, gx, plan + " " + torchconv.last_choice()


def forward_extra_bytes(x, w, b, kw):
    """The bytes a forward call allocates beyond its output (the caching allocator's 512-byte blocks),
    its weight's re-laid copy already cached."""
    with torch.no_grad():
        torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before - allocated_blocks(y)


# TF32 channels_last sources on the wgmma kernel, read as they are: the tensor copies' float32 tiles
# are rounded to TF32 in the registers the MMAs take them from (no copy of the source) -- 1x1 layers,
# strided ones, small grids, odd chunk counts (32 channels x 9 taps: the register loop takes two
# chunks a trip) and layers heavy enough for the descriptor loop to have been worth a rounded copy
# once (512 filters x 9 taps over 8192 pixels). Within 2x of cuDNN's TF32 error, forward and
# grad_input: tiles fed to the MMAs unrounded would err about 2.6x.
RAW_TF32_SHAPES = [
    (2, 64, 72, 13, 11, 3, 3, 1, 1, 1, 1),
    (3, 32, 40, 11, 9, 3, 3, 1, 1, 1, 1),
    (2, 96, 40, 9, 7, 1, 1, 1, 0, 1, 1),
    (2, 128, 96, 14, 12, 3, 3, 2, 1, 1, 1),
    (8, 64, 512, 32, 32, 3, 3, 1, 1, 1, 1),
    (2, 64, 512, 12, 12, 3, 3, 1, 1, 1, 1),
]


@pytest.mark.parametrize("shape", RAW_TF32_SHAPES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_channels_last_sources_read_as_they_are(device, shape):
    if not hopper():
        pytest.skip("the wgmma kernel runs on sm_90a")
    x, w, b, kw = make_case(shape, device, at_precision("tf32"), channels_last=True)
    y, _, _ = check_gemm_forward_and_grad_input(x, w, b, kw)
    extra, source = forward_extra_bytes(x, w.detach(), b, kw), x.numel() * x.element_size()
    assert extra < source, (extra, source)
    if shape[5] * shape[6] == 1:
        return
    # A layer of several taps: the tiles rounded in registers give the bits of the rounded copy's
    # descriptor loop (the testing aid's "rounded_copies") -- the same operands rounded to nearest, the
    # same config and splits, the same products summed in the same order.
    gy = torch.randn_like(y)
    with aid_set("tf32_source_reads", "rounded_copies"):
        y_copied, gx_copied, _ = gemm_passes(x, w, b, kw, gy)
        assert forward_extra_bytes(x, w.detach(), b, kw) >= source
    y_raw, gx_raw, _ = gemm_passes(x, w, b, kw, gy)
    assert torch.equal(y_raw, y_copied) and torch.equal(gx_raw, gx_copied)


def test_tf32_source_reads_aid_takes_two_names():
    """The testing aid's settings by name, "rule" by default; another name is a ValueError naming them."""
    assert torchconv._C.get_tf32_source_reads() == "rule"
    for name in ("rounded_copies", "rule"):
        with aid_set("tf32_source_reads", name):
            assert torchconv._C.get_tf32_source_reads() == name
    message = "tf32_source_reads must be one of 'rule', 'rounded_copies', got 'as_they_are'"
    with pytest.raises(ValueError, match=message):
        torchconv._C.set_tf32_source_reads("as_they_are")
    assert torchconv._C.get_tf32_source_reads() == "rule"


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("case", PLANES_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_reads_16bit_nchw_planes(device, case, precision):
    shape, reads_planes = case
    x, w, b, kw = make_case(shape, device, at_precision(precision))
    check_gemm_forward_and_grad_input(x, w, b, kw)
    gw, gy, _, ref = gemm_grad_weight(x, w, b, kw)
    assert rel_err(gw, ref) <= allowed_error(pytorch_grad_weight_error(x, w, b, kw, gy, ref), x.dtype)
    if hopper() and shape[0] * shape[3] * shape[4] <= 1024:  # no split reduction's workspace
        # (grad_input takes whole words of filters per group only: 68 widens it to float32, copies.)
        whole_words = shape[2] // shape[10] % 8 == 0
        extra = forward_extra_bytes(x, w.detach(), b, kw)
        backward_extra = backward_extra_bytes(x, w.detach(), kw, gy) if whole_words else None
        x_bytes, gy_bytes = x.numel() * x.element_size(), gy.numel() * gy.element_size()
        if reads_planes:
            assert extra < x_bytes // 2, extra
            assert not whole_words or backward_extra < min(x_bytes, gy_bytes) // 2, backward_extra
        else:
            assert extra >= x_bytes // 4 and backward_extra >= gy_bytes // 4, (extra, backward_extra)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("device", [CUDA])
def test_16bit_channels_last_source_off_a_word_is_copied_by_our_kernel(device, precision):
    """A 16-bit channels_last source 8 bytes past a 16-byte boundary (a view), which the tensor-core
    kernels cannot read by 16-byte words, is copied by our padding kernel in forward, grad_input and
    grad_weight alike -- no ATen kernel in the passes -- and the three match the reference."""
    shape = (2, 64, 72, 9, 7, 3, 3, 1, 1, 1, 1)
    x0, w, b, kw = make_case(shape, device, at_precision(precision), channels_last=True)
    x = misaligned_copy(x0, 4)
    assert x.is_contiguous(memory_format=torch.channels_last) and x.data_ptr() % 16 == 8
    torchconv._C.set_poison_outputs(False)  # no poisoning fills among the launches counted
    xi, wi = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    launches = kernel_launches(lambda: torchconv.conv2d(xi, wi, None, algorithm="gemm", **kw))
    y = torchconv.conv2d(xi, wi, None, algorithm="gemm", **kw)
    gy = torch.randn(y.shape, device=device).to(x.dtype).contiguous(memory_format=torch.channels_last)
    launches += kernel_launches(lambda: torch.autograd.grad(y, (xi, wi), gy))
    assert not [n for n in launches if "at::native::" in n], launches
    assert any("tc_pad_channels_kernel" in n for n in launches), launches
    torchconv._C.set_poison_outputs(True)
    check_gemm_forward_and_grad_input(x, w, b, kw)
    gw, gy, _, ref = gemm_grad_weight(x, w, b, kw)
    assert rel_err(gw, ref) <= allowed_error(pytorch_grad_weight_error(x, w, b, kw, gy, ref), x.dtype)


@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_reads_16bit_nchw_planes_8_bytes_past_a_word(device):
    """A source 8 bytes past a 16-byte boundary (a view) is read as planes in half-words, its planes
    whole words or not: forward, grad_input and grad_weight match the reference, with no copy."""
    shape = (3, 64, 72, 8, 8, 1, 1, 1, 0, 1, 1)
    x0, w, b, kw = make_case(shape, device, torch.bfloat16)
    x = misaligned_copy(x0, 4)
    assert x.is_contiguous() and x.data_ptr() % 16 == 8
    check_gemm_forward_and_grad_input(x, w, b, kw)
    gw, gy, _, ref = gemm_grad_weight(x, w, b, kw)
    assert rel_err(gw, ref) <= allowed_error(pytorch_grad_weight_error(x, w, b, kw, gy, ref), x.dtype)
    if hopper():
        assert forward_extra_bytes(x, w.detach(), b, kw) < x.numel() * x.element_size() // 2


# The rule for 1x1 layers with more than 128 filters: from NCHW planes (TF32, read into registers)
# the wide tile from one full wave of 128 x 256 tiles over at least 8 chunks of channels, the large
# one with shorter reductions (128 channels); gathered from channels_last (TF32) the wide tile there
# and from two waves on -- but where the TF32 split estimate splits the last wave's tiles (256
# channels, 288 large tiles just over a wave of two an SM: the large tile, in either layout); at 16
# bits the general rule (fewer than two waves: large; from two waves the wide tile) but for
# reductions of fewer than 16 chunks, which keep the large one, and channels_last reductions of at
# most two chunks (128 channels: 576 tiles of 128 x 64, two a block slot) to at most 256 filters,
# which take ws.
NCHW_1X1_RULE_CASES = [
    ((32, 256, 256, 24, 24, 1, 1, 1, 0, 1, 1),
     {"tf32-nchw": "large", "tf32-nhwc": "large", "fp16-nchw": "large", "bf16-nhwc": "large"}),
    ((32, 128, 256, 24, 24, 1, 1, 1, 0, 1, 1),
     {"tf32-nchw": "large", "tf32-nhwc": "large", "fp16-nchw": "large", "bf16-nhwc": "ws"}),
    # Two waves of 128 x 256 tiles (289): 512 channels are 16 chunks in float32 and 8 at 16 bits.
    ((32, 512, 256, 34, 34, 1, 1, 1, 0, 1, 1),
     {"tf32-nchw": "wide", "tf32-nhwc": "wide", "fp16-nchw": "large", "bf16-nhwc": "large"}),
    ((32, 1024, 256, 34, 34, 1, 1, 1, 0, 1, 1),
     {"tf32-nchw": "wide", "tf32-nhwc": "wide", "fp16-nchw": "wide", "bf16-nhwc": "wide"}),
]


@pytest.mark.parametrize("setting", SETTINGS_1X1)
@pytest.mark.parametrize("case", NCHW_1X1_RULE_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_config_rule_of_1x1_layers(device, case, setting):
    shape, expected = case
    x, w, b, kw = setting_case(shape, device, setting)
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    if hopper():
        # Whole, or with the tiles past whole waves split (test_wgmma_tail_splits).
        assert re.fullmatch(f"forward:wgmma-{expected[setting]}/splits=(1|[2-8]/tail)", torchconv.last_choice())
    ref = F.conv2d(x.double(), w.double(), b.double(), **kw)
    assert rel_err(y, ref) <= allowed_error(rel_err(F.conv2d(x, w, b, **kw), ref), x.dtype)


# TF32 1x1 launches of a few tiles (batch 1), from NCHW planes and channels_last alike: the large
# tile's blocks, each with an SM to itself, split their reduction as clusters (cluster_split_estimate's
# lone splits by the kOneTap32 terms, down to a chunk a split), ahead of the wide tile and of the tiny
# tile the rule falls back on. 256 -> 512 channels at stride 2 on 14 x 14: 4 large tiles of 8 chunks,
# 8 splits of one; 1024 -> 512 on 17 x 17: 12 tiles of 32 chunks forward, 24 of 16 for grad_input.
LONE_SPLIT_CASES = [
    ((1, 256, 512, 14, 14, 1, 1, 2, 0, 1, 1), ("wgmma-large/splits=8", "wgmma-large/splits=8")),
    ((1, 1024, 512, 17, 17, 1, 1, 1, 0, 1, 1), ("wgmma-large/splits=[2-8]", "wgmma-large/splits=[2-8]")),
]


@pytest.mark.parametrize("setting", ["tf32-nchw", "tf32-nhwc"])
@pytest.mark.parametrize("case", LONE_SPLIT_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_1x1_lone_splits(device, case, setting):
    shape, expected = case
    forward_plan, backward_plan = split_tiles_case(shape, device, setting)
    if hopper():
        for pass_, plan, want in zip(("forward", "grad_input"), (forward_plan, backward_plan), expected):
            # The backward's plan names the forward's entry too: find the pass's own entry.
            assert re.search(f"(^| ){pass_}:{want}" + r"(/a=\w+)?( |$)", plan), plan
        assert torchconv.last_workspace_bytes() == 0  # the splits' sums meet in distributed shared memory


# The wgmma grad_weight config rule (Hopper), as (shape, config, split count pattern): 64 filters for
# groups with at most 64 (narrow), else 128 x 256 columns (taps x channels per group; wide), 128 x 192
# where 192-column tiles pad the columns less (wide-n192: 144, 288, 360, 576 or 1152 columns; 216 and
# 2304 stay wide), or 128 x 128 where there are at most 128 columns (large); the positions split
# across blocks to fill the GPU.
# Stride, padding, dilation and groups on the way. In float16 / bfloat16 the split estimate
# (weight_grad_split_estimate) overrules the wave-filling count: a grid of many wide tiles (17 x 17
# outputs, 1024 filters: 144 tiles), whose rule fills the waves with 5 splits through the workspace,
# takes 2-4 as clusters in fewer waves; a short reduction over two waves of 72 tiles (7 x 7, 512
# filters) goes unsplit rather than in the rule's 3 splits; a few tiles (1x1, stride 2, 4 tiles) split
# as clusters past the rule's floor of 8 chunks a split; 36 wide tiles of a long reduction (34 x 34,
# 512 filters, by the tensor copies) take 3 splits as clusters in one wave rather than the rule's 7
# through the workspace in two.
def gemm_grad_weight(x, w, b, kw):
    """grad_weight of the GEMM through autograd, for a random grad_output: (gw, gy, the plan's
    "grad_weight:<config>/splits=<n>" match, the float64 reference); a second call returns the same
    bits (the splits' sums are added in a fixed order)."""
    w.requires_grad_(True)
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    gy = torch.randn_like(y)
    (gw,) = torch.autograd.grad(y, (w,), gy)
    plan = re.search(r"grad_weight:(\S+)/splits=(\d+)", torchconv.last_choice())
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    assert torch.equal(torch.autograd.grad(y, (w,), gy)[0], gw)
    w64 = w.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(F.conv2d(x.double(), w64, b.double(), **kw), (w64,), gy.double())
    return gw, gy, plan, ref


def pytorch_grad_weight_error(x, w, b, kw, gy, ref):
    """PyTorch's (cuDNN's) grad_weight error against `ref` at the tensors' precision."""
    wr = w.detach().requires_grad_(True)
    (theirs,) = torch.autograd.grad(F.conv2d(x, wr, b, **kw), (wr,), gy)
    return rel_err(theirs, ref)


WGMMA_WEIGHT_GRAD_TILES = {"wgmma-wide": (128, 256), "wgmma-wide-n192": (128, 192), "wgmma-large": (128, 128),
                           "wgmma-narrow": (64, 128)}  # filters x columns
WEIGHT_GRAD_CASES = [
    ((2, 16, 136, 13, 11, 3, 3, 1, 1, 1, 1), "wgmma-wide-n192", r"\d+"),
    ((2, 32, 136, 9, 10, 3, 3, 1, 1, 1, 1), "wgmma-wide-n192", r"\d+"),
    ((2, 16, 72, 15, 14, 3, 3, 2, 2, 2, 1), "wgmma-wide-n192", r"\d+"),
    ((2, 40, 136, 11, 9, 3, 3, 1, 1, 1, 1), "wgmma-wide-n192", r"\d+"),
    ((2, 128, 136, 9, 11, 3, 3, 1, 1, 1, 1), "wgmma-wide-n192", r"\d+"),
    ((2, 24, 136, 10, 9, 3, 3, 1, 1, 1, 1), "wgmma-wide", r"\d+"),
    ((1, 256, 200, 9, 7, 3, 3, 1, 1, 1, 1), "wgmma-wide", r"\d+"),
    ((3, 128, 136, 7, 9, 1, 1, 1, 0, 1, 1), "wgmma-large", r"\d+"),
    ((2, 112, 80, 8, 9, 1, 1, 2, 0, 1, 1), "wgmma-large", r"\d+"),
    ((2, 16, 24, 9, 7, 3, 3, 1, 1, 1, 1), "wgmma-narrow", r"\d+"),
    ((1, 32, 40, 12, 13, 3, 3, 2, 1, 1, 1), "wgmma-narrow", r"\d+"),
    ((2, 64, 48, 10, 9, 3, 3, 1, 1, 1, 2), "wgmma-narrow", r"\d+"),
    ((8, 64, 128, 40, 33, 3, 3, 1, 1, 1, 1), "wgmma-wide-n192", r"[2-9]|\d\d+"),  # many position splits
    ((32, 512, 1024, 17, 17, 3, 3, 1, 1, 1, 1), "wgmma-wide", "[2-4]"),
    ((32, 512, 512, 7, 7, 3, 3, 1, 1, 1, 1), "wgmma-wide", "1"),
    ((32, 256, 512, 14, 14, 1, 1, 2, 0, 1, 1), "wgmma-wide", "[5-8]"),
    ((32, 256, 512, 34, 34, 3, 3, 1, 1, 1, 1), "wgmma-wide", "3"),
]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", WEIGHT_GRAD_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_weight_grad_config_rule(device, case, dtype, channels_last):
    shape, config, split_count = case
    x, w, b, kw = make_case(shape, device, dtype, channels_last)
    gw, gy, plan, ref = gemm_grad_weight(x, w, b, kw)
    if hopper():
        assert plan.group(1) == config, torchconv.last_choice()
        assert re.fullmatch(split_count, plan.group(2)), torchconv.last_choice()
        # A tile's splits, at most 8 (here where their clusters fit the blocks' waves), add their sums
        # as one thread-block cluster and write grad_weight themselves; more go through the workspace.
        # Into an NCHW filter gradient of several taps, whose elements of one tap lie R x S apart, the
        # cluster's blocks write a channels_last target (the call's workspace) and copy it, where each
        # block finishes more than 4096 elements (its share of the tile's filters x the tile's columns).
        splits, workspace = int(plan.group(2)), torchconv.last_workspace_bytes()
        if splits > 8:
            assert workspace > 0, torchconv.last_choice()
        else:
            n, c, k, h, wd, r, s, stride, padding, dilation, groups = shape
            rows, cols = WGMMA_WEIGHT_GRAD_TILES[config]
            finished = -(-min(rows, k // groups) // splits) * cols
            target = not channels_last and r * s > 1 and c // groups > 1 and finished > 4096
            assert workspace == (gw.numel() * gw.element_size() if target else 0), (torchconv.last_choice(), workspace)
    err, their_err = rel_err(gw, ref), pytorch_grad_weight_error(x, w, b, kw, gy, ref)
    assert err <= allowed_error(their_err, dtype), f"grad_weight: error {err:.2e}, PyTorch's {their_err:.2e}"


# Where the wgmma grad_weight loads both tiles by tensor copies (thread 0's copies, no gather): 16-bit,
# a group's channels whole blocks of 64 (a column block is one tap's channels), filters a multiple of
# 8 (gy's rows whole 16-byte words; the wgmma kernels need that either way), the im2col map encodable
# (its box's corners within 8 bits: padding up to 128).
# As (shape, copies): filters not a multiple of 64 (the A box's rows past them unused), strides,
# dilation and groups, a 1x1 layer whose 64 columns leave the 128-column tile a block past the
# layer's (copied as zeros; 7 x 9 planes are not whole 8-byte words, so from NCHW too it goes through
# the channels_last copies), batch 1, a split's chunks; then the gather's: padding 130 (dilated as
# far, so that the output stays 8 x 8), 96 channels.
WEIGHT_GRAD_COPY_CASES = [
    ((2, 64, 72, 11, 9, 3, 3, 1, 1, 1, 1), True),
    ((1, 128, 64, 9, 7, 3, 3, 2, 1, 1, 1), True),
    ((2, 128, 96, 10, 9, 3, 3, 1, 2, 2, 2), True),
    ((3, 64, 40, 7, 9, 1, 1, 1, 0, 1, 1), True),
    ((2, 64, 128, 13, 17, 1, 1, 2, 0, 1, 1), True),
    ((8, 64, 128, 40, 33, 3, 3, 1, 1, 1, 1), True),
    ((1, 64, 64, 8, 8, 3, 3, 1, 130, 130, 1), False),
    ((2, 96, 64, 9, 9, 3, 3, 1, 1, 1, 1), False),
]
WEIGHT_GRAD_WGMMA_KERNEL = re.compile(r"tc_weight_grad_wgmma_kernel<")
WEIGHT_GRAD_COPIES_KERNEL = re.compile(r"tc_weight_grad_wgmma_kernel<.*, false, true>\(")


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", WEIGHT_GRAD_COPY_CASES, ids=lambda c: shape_id(c[0]) + ("-copies" if c[1] else "-gather"))
@pytest.mark.parametrize("device", [CUDA])
def test_wgmma_grad_weight_loads_by_tensor_copies(device, case, dtype, layout):
    """On Hopper the 16-bit grad_weight of such a layer (from NHWC, or from NCHW through its
    channels_last copies) loads its tiles by tensor copies, else by the threads' gather; either way
    the same bits twice and an error within 2x of cuDNN's."""
    if not hopper():
        pytest.skip("wgmma and its tensor copies: sm_90a")
    shape, copies = case
    x, w, b, kw = make_case(shape, device, dtype, channels_last=layout == "nhwc")
    names, (gw, gy, plan, ref) = cuda_kernel_names(lambda: gemm_grad_weight(x, w, b, kw))
    launched = [name for name in names if WEIGHT_GRAD_WGMMA_KERNEL.search(name)]
    assert launched and all(bool(WEIGHT_GRAD_COPIES_KERNEL.search(name)) == copies for name in launched), launched
    err, their_err = rel_err(gw, ref), pytorch_grad_weight_error(x, w, b, kw, gy, ref)
    assert err <= allowed_error(their_err, dtype), f"grad_weight: error {err:.2e}, PyTorch's {their_err:.2e}"


# The channels_last grad_weight kernels address a position's taps by 64-bit offsets from its input
# pixel, fixed before their loops, so no image size bounds them: padding and dilation far past the
# image (a padded extent x channels beyond 2^31, what 32-bit image offsets would need) still run
# wgmma on Hopper and give cuDNN's error. Dilation as wide as the padding keeps the output 8 x 8.
WIDE_IMAGE_CASES = [
    ((1, 448, 16, 8, 8, 3, 3, 1, 1100, 1100, 1), "wgmma-narrow"),  # 448 x 2208 x 2208 > 2^31
    ((1, 448, 136, 8, 8, 3, 3, 1, 1100, 1100, 1), "wgmma-wide-n192"),  # 4032 columns: 21 tiles of 192
]


@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", WIDE_IMAGE_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_weight_grad_padding_far_past_the_image(device, case, dtype):
    shape, config = case
    x, w, b, kw = make_case(shape, device, dtype, channels_last=True)
    gw, gy, plan, ref = gemm_grad_weight(x, w, b, kw)
    if hopper():
        assert plan.group(1) == config, torchconv.last_choice()
    err, their_err = rel_err(gw, ref), pytorch_grad_weight_error(x, w, b, kw, gy, ref)
    assert err <= allowed_error(their_err, dtype), f"grad_weight: error {err:.2e}, PyTorch's {their_err:.2e}"


# The 16-bit mma.sync grad_weight (GPUs without wgmma; on Hopper where a tc-* config is forced) on
# the wgmma rule's shapes but the three of 512 channels, and the wide images: tc-medium for groups of
# at most 64 filters, else tc-large.
@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", WEIGHT_GRAD_CASES[:-3] + WIDE_IMAGE_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_mma_sync_weight_grad(device, case, dtype):
    shape = case[0]
    x, w, b, kw = make_case(shape, device, dtype, channels_last=True)
    torchconv.set_config("gemm", "tc-large")
    try:
        gw, gy, plan, ref = gemm_grad_weight(x, w, b, kw)
    finally:
        torchconv.set_config("gemm", "")
    assert plan.group(1) == ("tc-medium" if shape[2] // shape[10] <= 64 else "tc-large"), torchconv.last_choice()
    err, their_err = rel_err(gw, ref), pytorch_grad_weight_error(x, w, b, kw, gy, ref)
    assert err <= allowed_error(their_err, dtype), f"grad_weight: error {err:.2e}, PyTorch's {their_err:.2e}"


# A few tiles over a long reduction, as (shape, config, tiles, blocks per SM): 3x3, 128 channels, 256
# filters, 68 x 68 outputs, batch 8 in 16-bit channels_last (12 tiles of 128 x 192, 578 chunks); 64
# channels, 128 filters in TF32 (5 tiles of 128 x 128, two blocks per SM, 1156 chunks) from NCHW planes
# (wgmma) and from channels_last (mma.sync).
FILL_CASES = {
    "fp16-nhwc": ((8, 128, 256, 68, 68, 3, 3, 1, 1, 1, 1), "wgmma-wide-n192", 12, 1),
    "bf16-nhwc": ((8, 128, 256, 68, 68, 3, 3, 1, 1, 1, 1), "wgmma-wide-n192", 12, 1),
    "tf32-nchw": ((8, 64, 128, 68, 68, 3, 3, 1, 1, 1, 1), "wgmma-nchw-large", 5, 2),
    "tf32-nhwc": ((8, 64, 128, 68, 68, 3, 3, 1, 1, 1, 1), "tc-large", 5, 2),
}


@pytest.mark.parametrize("setting", list(FILL_CASES))
@pytest.mark.parametrize("device", [CUDA])
def test_weight_grad_splits_fill_the_wave(device, setting):
    """grad_weight's splits of a few tiles over a long reduction: more than the fewest that fill one
    wave to 90%, as many as the wave holds (less what the splits' whole chunks round away): every
    block's run of chunks sets the wave's time."""
    shape, config, tiles, per_sm = FILL_CASES[setting]
    precision, layout = setting.split("-")
    x, w, b, kw = make_case(shape, device, at_precision(precision), channels_last=layout == "nhwc")
    gw, gy, plan, ref = gemm_grad_weight(x, w, b, kw)
    if hopper():
        slots = torch.cuda.get_device_properties(device).multi_processor_count * per_sm
        fewest = -(-9 * slots // (10 * tiles))
        assert plan.group(1) == config, torchconv.last_choice()
        assert fewest < int(plan.group(2)) <= slots // tiles, (fewest, torchconv.last_choice())
    err, their_err = rel_err(gw, ref), pytorch_grad_weight_error(x, w, b, kw, gy, ref)
    assert err <= allowed_error(their_err, gw.dtype), f"grad_weight: error {err:.2e}, PyTorch's {their_err:.2e}"


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
@pytest.mark.parametrize("shape", TF32_SHAPES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_forward_and_grad_input(device, shape, layout):
    """With TF32 allowed, float32 forward and grad_input run the GEMM's tensor cores wherever channels
    (filters, for grad_input) per group are a multiple of 4 or the layer is ungrouped: wgmma on
    Hopper, which reads a 1x1 layer's NCHW input or grad_output as it is (any channel count), other
    layouts and layers through a channels_last copy. Error within 2x of cuDNN's at TF32 (grad_weight:
    test_tf32_grad_weight)."""
    n, c, k, h, w_, r, s, stride, padding, dilation, groups = shape
    x, w, b, kw = make_case(shape, device, torch.float32, channels_last=layout == "nhwc")
    if layout == "strided":  # neither format: the copy path
        x = torch.cat([x, x], dim=3)[..., ::2]
    torch.backends.cudnn.allow_tf32 = True
    y, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
    assert y.is_contiguous(memory_format=torch.channels_last if layout == "nhwc" else torch.contiguous_format)
    pays = tf32_pays(shape, channels_last=layout == "nhwc")
    if pays and (groups == 1 or (c // groups) % 4 == 0):
        assert re.match(r"forward:(tc|wgmma)-", forward_plan)
        assert not hopper() or forward_plan.startswith("forward:wgmma-")
    else:
        assert not TENSOR_CORE_PLAN.search(forward_plan)
    if tf32_grad_input(shape, channels_last=layout == "nhwc") and (k // groups) % 4 == 0:
        assert re.search(r"grad_input:(tc|wgmma)-", backward_plan)
    elif not tf32_grad_input(shape, channels_last=layout == "nhwc"):
        assert not re.search(r"grad_input:(tc|wgmma)-", backward_plan)


# Layers of several taps whose chunks hold one tap's channels (16-bit: more than 32 channels and
# filters; the copies' other limits are met): stride 1, stride 2 (four grad_input phases), dilation 2.
IM2COL_COPY_SHAPES = [
    (2, 64, 72, 17, 15, 3, 3, 1, 1, 1, 1),
    (2, 48, 96, 19, 16, 3, 3, 2, 1, 1, 1),
    (1, 48, 64, 21, 18, 3, 3, 1, 2, 2, 1),
]
# The wgmma kernels' instantiations whose A tiles come by im2col tensor copies (kTmaA): the launch of
# one forward or grad_input phase, and that of a strided grad_input's phases together. The group is
# kRawA, the last argument: the copied float32 tiles go to the MMAs from registers, rounded there.
IM2COL_COPY_KERNEL = re.compile(
    r"tc_conv_wgmma_kernel<.*, (?:true|false), true, (?:true|false), (?P<raw>true|false)>\(|"
    r"tc_conv_wgmma_phases_kernel<.*, true, (?:true|false), (?P<phases_raw>true|false)>\(")
WGMMA_CONV_KERNEL = re.compile(r"tc_conv_wgmma_(phases_)?kernel<")


@pytest.mark.parametrize("precision, layout", [("bf16", "nhwc"), ("fp16", "nhwc"), ("tf32", "nchw"),
                                               ("tf32", "nhwc")])
@pytest.mark.parametrize("shape", IM2COL_COPY_SHAPES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_forward_and_grad_input_load_by_im2col_tensor_copies(device, shape, precision, layout):
    """On Hopper every wgmma launch of the forward and of the grad_input phases of such a layer loads
    its input tiles by im2col tensor copies: grad_input runs its taps reversed (the copies need source
    offsets that rise with the tap). float32 from NCHW comes from our transposing copy, rounded to
    TF32 when made, which the MMAs read by descriptor; a channels_last float32 source of these small
    layers is read as it is, its tiles rounded in registers (test_tf32_channels_last_sources_read_as_they_are).
    Errors within 2x of cuDNN's."""
    if not hopper():
        pytest.skip("wgmma and its tensor copies: sm_90a")
    dtype = at_precision(precision)
    x, w, b, kw = make_case(shape, device, dtype, channels_last=layout == "nhwc")
    names, (_, forward_plan, backward_plan) = cuda_kernel_names(lambda: check_gemm_forward_and_grad_input(x, w, b, kw))
    assert forward_plan.startswith("forward:wgmma-") and "grad_input:wgmma-" in backward_plan, backward_plan
    launched = [name for name in names if WGMMA_CONV_KERNEL.search(name)]
    copies = [IM2COL_COPY_KERNEL.search(name) for name in launched]
    assert launched and all(copies), launched
    raw = precision == "tf32" and layout == "nhwc"
    assert all((m["raw"] or m["phases_raw"]) == str(raw).lower() for m in copies), launched


@pytest.mark.parametrize("config", WGMMA_CONFIGS)
@pytest.mark.parametrize("device", [CUDA])
def test_forced_wgmma_configs_read_tf32_channels_last_sources_as_they_are(device, config):
    """Every wgmma config, forced, reads a TF32 channels_last source of several taps as it is, its
    tiles rounded in registers, and gives the bits of the rounded copy's descriptor loop in the same
    config: the configs whose threads hold two chunks' fragments beside their accumulators (the
    chunk-level loop) and those that keep a k-step's (wgmma-medium, wgmma-wide192), forward (9
    chunks) and grad_input (27: 72 filters in chunks of 32), partial tiles in every config."""
    if not hopper():
        pytest.skip("wgmma configs run on sm_90a")
    x, w, b, kw = make_case((2, 32, 72, 13, 11, 3, 3, 1, 1, 1, 1), device, at_precision("tf32"), channels_last=True)
    gy = torch.randn(2, 72, 13, 11, device=device).contiguous(memory_format=torch.channels_last)
    with using_config("gemm", config):
        check_gemm_forward_and_grad_input(x, w, b, kw)
        names, (y, gx, plan) = cuda_kernel_names(lambda: gemm_passes(x, w, b, kw, gy))
        with aid_set("tf32_source_reads", "rounded_copies"):
            copied_names, (y_copied, gx_copied, _) = cuda_kernel_names(lambda: gemm_passes(x, w, b, kw, gy))
    assert f"forward:{config}/" in plan and f"grad_input:{config}/" in plan, plan
    for launched, raw in ((names, "true"), (copied_names, "false")):
        copies = [IM2COL_COPY_KERNEL.search(name) for name in launched if WGMMA_CONV_KERNEL.search(name)]
        assert copies and all(m and m["raw"] == raw for m in copies), launched
    assert torch.equal(y, y_copied) and torch.equal(gx, gx_copied)


def tf32_grad_weight_reads_nchw(layout):
    """On Hopper, grad_weight reads dense NCHW float32 planes as they are (wgmma reads TF32 operands
    K-major, and in NCHW both of grad_weight's run along the positions)."""
    return layout == "nchw" and hopper()


def tf32_grad_weight(shape, layout="nchw"):
    """grad_weight runs TF32 where the forward would (tf32_pays). Reading NCHW planes
    (tf32_grad_weight_reads_nchw) that is all; the other kernels copy 16-byte words -- filters per
    group a multiple of 4, and channels per group too unless the layer is ungrouped (its channels are
    padded to a word) -- and in NCHW (strided tensors, or GPUs without wgmma) need more than 16
    multiply-adds per byte of input and output (the copies of both into channels_last cost more
    than the tensor cores save on 1x1 layers of few channels)."""
    n, c, k, h, w, r, s, stride, padding, dilation, groups = shape
    if not tf32_pays(shape, channels_last=layout == "nhwc"):
        return False
    if tf32_grad_weight_reads_nchw(layout):
        return True
    words = (k // groups) % 4 == 0 and (groups == 1 or (c // groups) % 4 == 0)
    return (layout == "nhwc" or macs_per_byte(shape) > 16) and words


def tf32_grad_weight_config(shape, layout, copies_config):
    """The config of a TF32 grad_weight: reading NCHW planes, by filters per group (at most 64
    narrow, at most 128 large, else wide: 256 filters a block), with 64-column tiles ("-n64") where
    a group has at most 64 columns (taps x channels); else `copies_config`."""
    if not tf32_grad_weight_reads_nchw(layout):
        return copies_config
    n, c, k, h, w, r, s, stride, padding, dilation, groups = shape
    filters, columns = k // groups, c // groups * r * s
    tile = "narrow" if filters <= 64 else "large" if filters <= 128 else "wide"
    return f"wgmma-nchw-{tile}" + ("-n64" if columns <= 64 else "")


# grad_weight's TF32 configs. On channels_last (or copied) sources mma.sync on every GPU (wgmma reads
# TF32 operands K-major only, and in channels_last both of grad_weight's run along the positions), a
# 64-filter tile for groups of at most 64 filters (medium), else 128 x 128 (large); on Hopper's NCHW
# planes wgmma (tf32_grad_weight_config). The positions split across blocks to fill the GPU. Partial
# filter and column tiles, strides, padding, dilation, groups, an RGB stem (channels padded to 4),
# 1x1 layers, filters or channels per group that are not whole words (IEEE FP32 on copies; NCHW
# planes take them), NCHW layers at most 16 multiply-adds per byte (IEEE FP32 on copies: a 1x1 layer
# of 64 channels at 8.0, beside 128 -> 256 at 21.3 and 128 -> 136 at 16.5), filters per group past
# a wide tile (300), groups of at most 64 columns on each NCHW tile (the 64-column configs).
TF32_WEIGHT_GRAD_CASES = [
    ((2, 16, 136, 13, 11, 3, 3, 1, 1, 1, 1), "tc-large"),
    ((2, 40, 136, 9, 11, 3, 3, 1, 1, 1, 1), "tc-large"),
    ((2, 16, 72, 15, 14, 3, 3, 2, 2, 2, 1), "tc-large"),
    ((3, 128, 136, 7, 9, 1, 1, 1, 0, 1, 1), "tc-large"),
    ((2, 112, 80, 8, 9, 1, 1, 2, 0, 1, 1), "tc-large"),
    ((2, 16, 24, 9, 7, 3, 3, 1, 1, 1, 1), "tc-medium"),
    ((1, 32, 40, 12, 13, 3, 3, 2, 1, 1, 1), "tc-medium"),
    ((2, 64, 48, 10, 9, 3, 3, 1, 1, 1, 2), "tc-medium"),
    ((2, 3, 16, 15, 14, 7, 7, 2, 3, 1, 1), "tc-medium"),
    ((2, 24, 24, 10, 9, 5, 3, (2, 1), (2, 1), 1, 3), "tc-medium"),
    ((8, 64, 128, 40, 33, 3, 3, 1, 1, 1, 1), "tc-large"),
    ((2, 7, 5, 8, 9, 3, 3, 1, 1, 1, 1), None),
    ((2, 12, 8, 8, 9, 3, 3, 1, 1, 1, 2), None),
    ((4, 64, 128, 14, 14, 1, 1, 2, 0, 1, 1), "tc-large"),
    ((4, 64, 64, 12, 10, 1, 1, 1, 0, 1, 1), "tc-medium"),
    ((2, 128, 256, 9, 8, 1, 1, 1, 0, 1, 1), "tc-large"),
    ((2, 64, 130, 12, 10, 3, 3, 1, 1, 1, 1), None),
    ((2, 30, 33, 17, 19, 3, 3, 1, 1, 2, 3), None),
    ((1, 40, 130, 9, 7, 5, 3, 1, 2, 1, 2), None),
    ((2, 128, 300, 7, 9, 1, 1, 1, 0, 1, 1), "tc-large"),
    ((3, 256, 320, 11, 6, 1, 1, 1, 0, 1, 4), "tc-large"),
    ((1, 48, 200, 13, 11, 1, 1, 1, 0, 1, 1), "tc-large"),
]


# TF32 grad_weight on a grid of a few tiles: where the unsplit tiles leave most SMs idle, the
# positions split down to 3 chunks a split instead of 8 (from channels_last, weighed against the
# counts as clusters) -- a 1x1 stride-2 layer of 512 filters at 7 x 7 outputs and batch 8 (8 tiles of 128 x
# 128, 392 positions: 13 chunks of 32, unsplit under the 8-chunk floor), a 1x1 layer of 512 filters
# and 1024 channels at batch 1 (17 x 17: 289 positions) -- the same bits every call, within 2x of
# cuDNN's TF32 error. From channels_last (the mma.sync kernel) a tile's splits, at most 8 here, add
# their sums as one cluster: no workspace.
SMALL_GRID_TF32_WEIGHT_GRAD_CASES = [
    (8, 256, 512, 14, 14, 1, 1, 2, 0, 1, 1),
    (1, 1024, 512, 17, 17, 1, 1, 1, 0, 1, 1),
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", SMALL_GRID_TF32_WEIGHT_GRAD_CASES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_grad_weight_of_a_few_tiles_splits_short_reductions(device, shape, layout):
    if not hopper():
        pytest.skip("the split counts are the rule's on Hopper (132 SMs)")
    x, w, b, kw = make_case(shape, device, torch.float32, channels_last=layout == "nhwc")
    torch.backends.cudnn.allow_tf32 = True
    gw, gy, plan, ref = gemm_grad_weight(x, w, b, kw)
    assert TENSOR_CORE_PLAN.search(plan.group(0)), torchconv.last_choice()
    assert int(plan.group(2)) >= 2, torchconv.last_choice()
    if layout == "nhwc":
        assert int(plan.group(2)) <= 8 and torchconv.last_workspace_bytes() == 0, torchconv.last_choice()
    err, their_err = rel_err(gw, ref), pytorch_grad_weight_error(x, w, b, kw, gy, ref)
    assert err <= allowed_error(their_err, torch.float32), f"error {err:.2e}, cuDNN's {their_err:.2e}"


# The mma.sync grad_weight (TF32 from channels_last, or from copies of strided tensors) of one split
# -- 7 x 7 or 7 x 9 outputs at batch 1 are too few positions to split -- writes the gradient from its
# blocks: a channels_last gradient (filters and columns short of whole tiles, groups, channels padded
# to a word, whose gradient is not stored a quad of channels at a time) or a 1x1 layer's in either
# format. No workspace, no finish kernel. An NCHW gradient of several taps (a strided source's) is
# written on Hopper as a channels_last target and copied (the wgmma kernels' rule, `taps_apart`), and
# elsewhere through the finish. Within 2x of cuDNN's TF32 error.
ONE_SPLIT_WEIGHT_GRAD_CASES = [
    # shape, source layout, an NCHW gradient of several taps
    ((1, 512, 512, 7, 7, 3, 3, 1, 1, 1, 1), "nhwc", False),
    ((1, 96, 72, 7, 9, 3, 3, 1, 1, 1, 2), "nhwc", False),
    ((1, 58, 72, 7, 7, 3, 3, 1, 1, 1, 1), "nhwc", False),
    ((1, 256, 200, 7, 7, 1, 1, 1, 0, 1, 1), "strided", False),
    ((1, 64, 96, 7, 7, 3, 3, 1, 1, 1, 1), "strided", True),
]


@pytest.mark.parametrize("case", ONE_SPLIT_WEIGHT_GRAD_CASES, ids=lambda c: f"{c[1]}-" + shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_one_split_mma_sync_grad_weight_writes_the_gradient_itself(device, case):
    shape, layout, nchw_taps = case
    x, w, _, kw = make_case(shape, device, torch.float32, channels_last=layout == "nhwc")
    if layout == "strided":  # neither format: the copies' path
        x = torch.cat([x, x], dim=3)[..., ::2]
    torch.backends.cudnn.allow_tf32 = True
    torchconv._C.set_poison_outputs(False)  # no poisoning fills among the launches counted
    wi = w.detach().requires_grad_(True)
    y = torchconv.conv2d(x, wi, None, algorithm="gemm", **kw)
    gy = torch.randn(y.shape, device=device).contiguous(
        memory_format=torch.channels_last if layout == "nhwc" else torch.contiguous_format)
    launches = kernel_launches(lambda: torch.autograd.grad(y, wi, gy, retain_graph=True))
    assert re.search(r"grad_weight:tc-\w+/splits=1\b", torchconv.last_choice()), torchconv.last_choice()
    finishes = [n for n in launches if "tc_weight_grad_finish_kernel" in n]
    copies = [n for n in launches if "weight_to_contiguous" in n]
    if nchw_taps and not hopper():
        assert finishes and not copies, launches
    else:
        assert not finishes and bool(copies) == nchw_taps, launches
    torchconv._C.set_poison_outputs(True)  # an element the blocks leave unwritten stays NaN
    (gw,) = torch.autograd.grad(y, wi, gy)
    w64 = w.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(F.conv2d(x.double(), w64, None, **kw), w64, gy.double())
    wr = w.detach().requires_grad_(True)
    (theirs,) = torch.autograd.grad(F.conv2d(x, wr, None, **kw), wr, gy)
    assert rel_err(gw, ref) <= allowed_error(rel_err(theirs, ref), torch.float32)


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
@pytest.mark.parametrize("case", TF32_WEIGHT_GRAD_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_grad_weight(device, case, layout):
    """With TF32 allowed, float32 grad_weight runs the GEMM's tensor-core kernels (tf32_grad_weight,
    tf32_grad_weight_config), within 2x of cuDNN's TF32 error, the same bits every call, and from
    strided tensors the same bits as from channels_last ones (the mma.sync kernel rounds what it reads
    to TF32 as the copies of strided sources do); elsewhere IEEE FP32, and always with TF32 off."""
    shape, config = case
    x, w, b, kw = make_case(shape, device, torch.float32, channels_last=layout == "nhwc")
    if layout == "strided":  # neither format: the copy path
        x = torch.cat([x, x], dim=3)[..., ::2]
    torch.backends.cudnn.allow_tf32 = True
    gw, gy, plan, ref = gemm_grad_weight(x, w, b, kw)
    assert layout == "nhwc" or gw.is_contiguous()  # NCHW, where the kernels wrote a channels_last target
    err, their_err = rel_err(gw, ref), pytorch_grad_weight_error(x, w, b, kw, gy, ref)
    tensor_cores = tf32_grad_weight(shape, layout)
    copies = config is not None and (layout == "nhwc" or macs_per_byte(shape) > 16)
    assert tensor_cores == (tf32_pays(shape) if tf32_grad_weight_reads_nchw(layout) else copies)
    if tensor_cores:
        assert plan.group(1) == tf32_grad_weight_config(shape, layout, config), torchconv.last_choice()
        if shape[0] == 8:
            assert int(plan.group(2)) > 1
        assert err <= allowed_error(their_err, torch.float32), f"error {err:.2e}, cuDNN's {their_err:.2e}"
    else:
        assert not TENSOR_CORE_PLAN.search(plan.group(0)), torchconv.last_choice()
        assert err <= 1e-5, err
    # From channels_last tensors of the same values, the same bits.
    if tensor_cores and layout == "strided":  # the copies' kernel, as channels_last tensors
        xc, gyc = (t.contiguous(memory_format=torch.channels_last) for t in (x, gy))
        y = torchconv.conv2d(xc, w, b, algorithm="gemm", **kw)
        assert torch.equal(torch.autograd.grad(y, (w,), gyc)[0], gw)
    torch.backends.cudnn.allow_tf32 = False
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    (gw,) = torch.autograd.grad(y, (w,), gy)
    assert not TENSOR_CORE_PLAN.search(torchconv.last_choice())
    assert rel_err(gw, ref) <= 1e-5


@pytest.mark.parametrize(
    "dtype, layout",
    [(torch.float32, "nchw"), (torch.float32, "nhwc"), (torch.bfloat16, "nhwc"), (torch.float16, "nchw")],
    ids=["tf32-nchw", "tf32-nhwc", "bf16-nhwc", "fp16-nchw"],
)
@pytest.mark.parametrize(
    "shape", [(32, 64, 64, 56, 56, 1, 1, 1, 0, 1, 1), (32, 58, 72, 57, 57, 1, 1, 1, 0, 1, 1)], ids=shape_id
)
@pytest.mark.parametrize("device", [CUDA])
def test_grad_weight_of_many_splits(device, shape, dtype, layout):
    """A 1x1 layer of few channels over many positions splits the tensor-core grad_weight's reduction
    a hundred ways and more (on GPUs of a hundred SMs and more: the splits fill the waves), where the
    finish shares each run of 32 elements among a block's warps (the second layer's 72 x 58 elements
    end in a partial run where the TF32 kernel reads the NCHW planes; the copies pad the channels to a
    word): within 2x of cuDNN's error at the same precision, the same bits every call."""
    x, w, b, kw = make_case(shape, device, dtype, channels_last=layout == "nhwc")
    torch.backends.cudnn.allow_tf32 = True
    gw, gy, plan, ref = gemm_grad_weight(x, w, b, kw)
    assert dtype != torch.float32 or tf32_grad_weight(shape, layout)
    assert TENSOR_CORE_PLAN.search(plan.group(0)), torchconv.last_choice()
    if torch.cuda.get_device_properties(device).multi_processor_count >= 100:
        assert int(plan.group(2)) >= 100, torchconv.last_choice()
    err, their_err = rel_err(gw, ref), pytorch_grad_weight_error(x, w, b, kw, gy, ref)
    assert err <= allowed_error(their_err, dtype), f"error {err:.2e}, cuDNN's {their_err:.2e}"


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("shape", SHAPES[:5] + SHAPES[6:7], ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_follows_pytorchs_switch(device, shape, channels_last):
    x, w, b, kw = make_case(shape, device, torch.float32, channels_last)
    ref = F.conv2d(x.double(), w.double(), b.double(), **kw)
    torch.backends.cudnn.allow_tf32 = True
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    if tf32_pays(shape, channels_last):
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
        cudnn_err = rel_err(F.conv2d(x, w, b, **kw), ref)
        assert rel_err(y, ref) <= allowed_error(cudnn_err, torch.float32)
    else:  # memory-bound on CUDA cores: IEEE FP32 although TF32 is allowed
        assert not TENSOR_CORE_PLAN.search(torchconv.last_choice())
        assert rel_err(y, ref) <= 1e-5
    torch.backends.cudnn.allow_tf32 = False
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    assert not TENSOR_CORE_PLAN.search(torchconv.last_choice())
    assert rel_err(y, ref) <= 1e-5


# NCHW float32 layers on either side of the TF32 bound (7 multiply-adds per byte of input and
# output, counting the taps that read the input): a strided 1x1 layer of 64 channels (5.3), an RGB
# stem (5.7) and a 3x3 layer on 1 x 1 planes (1.3: one tap in nine reads the input; 12 counting them
# all) stay in IEEE FP32 with TF32 allowed, at batch 1 and 4; 1x1 layers of 64 -> 64 (8.0) and
# 64 -> 72 channels (8.5), and a 7x7 RGB stem (22.1), run TF32. In channels_last all of them run TF32 but
# the layer on 1 x 1 planes, whose tensors are NCHW-contiguous as well and read as NCHW.
TF32_BOUND_CASES = [
    ((4, 64, 128, 14, 14, 1, 1, 2, 0, 1, 1), False),
    ((1, 64, 128, 14, 14, 1, 1, 2, 0, 1, 1), False),
    ((4, 3, 32, 20, 18, 3, 3, 1, 1, 1, 1), False),
    ((1, 8, 16, 1, 1, 3, 3, 1, 1, 1, 1), False),
    ((4, 64, 64, 12, 10, 1, 1, 1, 0, 1, 1), True),
    ((1, 64, 72, 12, 10, 1, 1, 1, 0, 1, 1), True),
    ((4, 3, 32, 20, 18, 7, 7, 2, 3, 1, 1), True),
]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", TF32_BOUND_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_runs_only_where_it_pays(device, case, channels_last):
    shape, tensor_cores = case
    assert tf32_pays(shape) == tensor_cores
    torch.backends.cudnn.allow_tf32 = True
    x, w, b, kw = make_case(shape, device, torch.float32, channels_last)
    read_channels_last = channels_last and not x.is_contiguous()  # 1 x 1 planes are NCHW as well, and read so
    tensor_cores = tensor_cores or read_channels_last
    y, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
    assert bool(TENSOR_CORE_PLAN.search(forward_plan)) == tensor_cores
    assert bool(re.search(r"grad_input:(tc|wgmma)-", backward_plan)) == tf32_grad_input(shape, read_channels_last)
    if not tensor_cores:
        ref = F.conv2d(x.double(), w.double(), b.double(), **kw)
        assert rel_err(y, ref) <= 1e-5


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_grad_input_of_an_nchw_rgb_stem_is_ieee(device, channels_last):
    """With TF32 allowed, an NCHW RGB stem's forward runs TF32 and its grad_input IEEE FP32 (float32's
    error, as cuDNN's); in channels_last both run TF32."""
    shape = (2, 3, 64, 40, 38, 7, 7, 2, 3, 1, 1)
    assert tf32_pays(shape) and not tf32_grad_input(shape) and tf32_grad_input(shape, channels_last=True)
    torch.backends.cudnn.allow_tf32 = True
    x, w, b, kw = make_case(shape, device, torch.float32, channels_last)
    x = x.detach().requires_grad_(True)
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
    gy = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, (x,), gy)
    assert bool(re.search(r"grad_input:(tc|wgmma)-", torchconv.last_choice())) == channels_last
    x64 = x.detach().double().requires_grad_(True)
    (gx64,) = torch.autograd.grad(F.conv2d(x64, w.double(), b.double(), **kw), (x64,), gy.double())
    assert rel_err(gx, gx64) <= (2 ** -9 if channels_last else 1e-5)


@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("device", [CUDA])
def test_tensor_cores_run_half_precision(device, dtype):
    """The GEMM's reduced-precision calls run its tensor-core kernels (forward, grad_input and
    grad_weight), ungrouped layers with few channels (an RGB stem) on zero-padded channels, and fall
    back to float32 CUDA-core kernels only where a grouped layer's channels (or filters) per group
    are not a multiple of 8."""
    x, w, b, kw = make_case(SHAPES[0], device, dtype, channels_last=True)
    torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    assert re.match(r"forward:(tc|wgmma)-", torchconv.last_choice())
    x.requires_grad_(True), w.requires_grad_(True)
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    y.backward(torch.randn_like(y))
    assert re.search(r"grad_input:(tc|wgmma)-", torchconv.last_choice())
    assert re.search(r"grad_weight:(tc|wgmma)-", torchconv.last_choice())
    x, w, b, kw = make_case(SHAPES[6], device, dtype, channels_last=True)  # RGB stem
    w.requires_grad_(True)
    y = torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    assert re.match(r"forward:(tc|wgmma)-", torchconv.last_choice())
    y.backward(torch.randn_like(y))
    assert re.search(r"grad_weight:(tc|wgmma)-", torchconv.last_choice())
    x, w, b, kw = make_case(SHAPES[7], device, dtype, channels_last=True)
    torchconv.conv2d(x, w, b, algorithm="gemm", **kw)
    assert not TENSOR_CORE_PLAN.search(torchconv.last_choice())


def misaligned_copy(t, elements=1):
    """`t` as a dense tensor of the same strides whose first element is `elements` elements past a
    16-byte boundary (a view at that place in its storage)."""
    flat = torch.empty(t.numel() + elements, device=t.device, dtype=t.dtype)[elements:]
    out = flat.as_strided(t.shape, t.stride())
    out.copy_(t)
    return out


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("device", [CUDA])
def test_tensor_cores_take_misaligned_channels_last_views(device, precision):
    """The tensor-core kernels copy 16-byte words: a dense channels_last input or grad_output whose
    first element is not on a 16-byte boundary is copied once, and gives the same bits as an
    aligned one (forward, grad_input and grad_weight)."""
    dtype = at_precision(precision)
    x, w, b, kw = make_case((2, 16, 24, 9, 7, 3, 3, 1, 1, 1, 1), device, dtype, channels_last=True)
    gy = torch.randn(2, 24, 9, 7, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
    results = []
    for xi, gyi in ((x, gy), (misaligned_copy(x), misaligned_copy(gy))):
        xi = xi.detach().requires_grad_(True)
        wi = w.detach().requires_grad_(True)
        y = torchconv.conv2d(xi, wi, b, algorithm="gemm", **kw)
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
        results.append((y,) + torch.autograd.grad(y, (xi, wi), gyi))
    assert results[1][0].is_contiguous(memory_format=torch.channels_last)
    for ours, aligned in zip(results[1], results[0]):
        assert torch.equal(ours, aligned)


# The wgmma kernel copies its A tiles (input positions x a tap's channels) with im2col tensor copies
# on Hopper wherever the chunks hold one tap's channels: each copy walks a bounding box over the
# column grid, across rows and images. Geometries at its edges, forward and grad_input: channels past
# the last full chunk (zero-filled), strides and dilations per axis, padding per axis, no padding,
# groups of whole chunks, a 7x7 filter, tiles that cross images.
IM2COL_SHAPES = [
    (3, 72, 40, 13, 11, 3, 3, 1, 1, 1, 1),
    (2, 64, 48, 17, 9, 5, 3, (2, 1), (2, 1), (1, 2), 1),
    (2, 128, 64, 10, 12, 3, 3, 1, 1, 1, 2),
    (1, 64, 24, 9, 8, 7, 7, 1, 3, 1, 1),
    (2, 64, 32, 20, 19, 3, 3, 2, 0, 1, 1),
    (5, 96, 136, 7, 6, 3, 3, 1, (0, 2), 1, 1),
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("shape", IM2COL_SHAPES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_im2col_copies_cover_every_geometry(device, shape, precision, layout):
    dtype = at_precision(precision)
    x, w, b, kw = make_case(shape, device, dtype, channels_last=layout == "nhwc")
    y, forward_plan, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
    assert TENSOR_CORE_PLAN.search(forward_plan) and TENSOR_CORE_PLAN.search(backward_plan)
    assert torch.equal(torchconv.conv2d(x, w, b, algorithm="gemm", **kw), y)


# Layers of several taps whose NCHW sources the tensor-core path transposes: 40 channels (a channel
# tile of 32 and a partial one), a strided 35-pixel plane, groups over a plane of 1155 pixels.
NCHW_COPY_SHAPES = [
    (3, 40, 24, 9, 11, 3, 3, 1, 1, 1, 1),
    (2, 72, 16, 7, 5, 3, 3, 2, 1, 1, 1),
    (1, 32, 24, 33, 35, 3, 3, 1, 1, 1, 2),
]


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("shape", NCHW_COPY_SHAPES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_nchw_source_gives_the_channels_last_bits(device, shape, precision):
    """An NCHW input and grad_output of a layer with several taps reach the tensor-core kernels as a
    channels_last copy (a tiled transpose; only 1x1 layers in TF32 are gathered from NCHW by the
    kernel): forward and grad_input give the bits the same call gives on channels_last tensors."""
    dtype = at_precision(precision)
    x, w, b, kw = make_case(shape, device, dtype, channels_last=False)
    results = []
    for fmt in (torch.contiguous_format, torch.channels_last):
        xi = x.detach().contiguous(memory_format=fmt).requires_grad_(True)
        y = torchconv.conv2d(xi, w, b, algorithm="gemm", **kw)
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
        assert y.is_contiguous(memory_format=fmt)
        gy = torch.ones_like(y).copy_(torch.linspace(-1, 1, y.numel(), device=device).view(y.shape))
        results.append((y,) + torch.autograd.grad(y, (xi,), gy))
    for ours, reference in zip(*results):
        assert torch.equal(ours.contiguous(), reference.contiguous())
    check_gemm_forward_and_grad_input(x, w, b, kw)


# 1x1 layers whose NCHW float32 sources the TF32 wgmma kernel reads as they are (all above the TF32
# bound, in both passes): whole planes in 16-byte words (planes of 120 and 20 pixels, tiles across
# images; a partial chunk of 40 channels; groups of 72; 520 channels over 17 chunks), and element by
# element (a 49-pixel plane, stride 2, padding, a 5 x 7 plane with groups of 72).
NCHW_PLANE_SHAPES = [
    (2, 64, 72, 12, 10, 1, 1, 1, 0, 1, 1),
    (3, 40, 136, 10, 6, 1, 1, 1, 0, 1, 1),
    (2, 144, 144, 8, 8, 1, 1, 1, 0, 1, 2),
    (4, 520, 136, 5, 4, 1, 1, 1, 0, 1, 1),
    (3, 72, 136, 7, 7, 1, 1, 1, 0, 1, 1),
    (2, 72, 256, 9, 11, 1, 1, 2, 0, 1, 1),
    (2, 72, 136, 8, 9, 1, 1, 1, 1, 1, 1),
    (2, 216, 216, 5, 7, 1, 1, 1, 0, 1, 3),
]


@pytest.mark.parametrize("shape", NCHW_PLANE_SHAPES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_1x1_nchw_source_gives_the_channels_last_bits(device, shape):
    """A 1x1 layer's NCHW float32 input and grad_output are read by the TF32 kernel as they are (on
    Hopper: channel-major tiles, A fragments from registers): forward and grad_input give the bits
    of the same call on channels_last tensors, and stay within 2x of cuDNN's TF32 error."""
    torch.backends.cudnn.allow_tf32 = True
    x, w, b, kw = make_case(shape, device, torch.float32, channels_last=False)
    results = []
    for fmt in (torch.contiguous_format, torch.channels_last):
        xi = x.detach().contiguous(memory_format=fmt).requires_grad_(True)
        y = torchconv.conv2d(xi, w, b, algorithm="gemm", **kw)
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
        assert y.is_contiguous(memory_format=fmt)
        gy = torch.randn(y.shape, device=device, generator=torch.Generator(device).manual_seed(7))
        gy = gy.contiguous(memory_format=fmt)
        results.append((y,) + torch.autograd.grad(y, (xi,), gy))
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
    for ours, reference in zip(*results):
        assert torch.equal(ours.contiguous(), reference.contiguous())
    check_gemm_forward_and_grad_input(x, w, b, kw)


# The TF32 Wt from a contiguous float32 weight of 2-9 taps (unpacked channels) is re-laid in blocks of
# 32 filters x 32 channels through shared memory (tc_weight_relayout_transpose_kernel) for the forward
# and a stride-1 grad_input (a strided one's phases re-lay in one launch by the gathers), from any
# other weight by the word-per-thread gathers: both must give the same Wt, so the same weight,
# contiguous or channels_last, gives the same bits, forward and grad_input. Partial chunks of channels
# and filters (520 channels, 516 filters), a weight of a few blocks (72 channels, 68 filters), groups,
# 2 x 3 taps with uneven padding, dilation, stride 2; few positions, so that the weight is most of the
# work.
TF32_WEIGHT_RELAYOUT_SHAPES = [
    (1, 520, 516, 5, 6, 3, 3, 1, 1, 1, 1),
    (2, 72, 68, 7, 5, 3, 3, 1, 1, 1, 1),
    (2, 1040, 1040, 5, 5, 3, 3, 1, 1, 1, 2),
    (1, 512, 520, 5, 6, 2, 3, 1, (0, 1), 1, 1),
    (1, 512, 512, 7, 6, 3, 3, 1, 2, 2, 1),
    (2, 520, 516, 9, 9, 3, 3, 2, 1, 1, 1),
]


@pytest.mark.parametrize("shape", TF32_WEIGHT_RELAYOUT_SHAPES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_tf32_weight_relayouts_agree(device, shape):
    torch.backends.cudnn.allow_tf32 = True
    x, w, b, kw = make_case(shape, device, torch.float32)
    results = []
    for fmt in (torch.contiguous_format, torch.channels_last):
        def transpose_as_expected(names):
            return any("tc_weight_relayout_transpose_kernel" in n for n in names) == (fmt == torch.contiguous_format)

        wi = w.detach().contiguous(memory_format=fmt).requires_grad_(True)
        xi = x.detach().requires_grad_(True)
        names, y = cuda_kernel_names(lambda: torchconv.conv2d(xi, wi, b, algorithm="gemm", **kw))
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
        assert transpose_as_expected(names)
        gy = torch.randn(y.shape, device=device, generator=torch.Generator(device).manual_seed(7))
        names, grads = cuda_kernel_names(lambda: torch.autograd.grad(y, (xi,), gy))
        results.append((y,) + grads)
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
        if kw["stride"] == 1:  # a strided one's phases re-lay by the gathers where they run as one launch
            assert transpose_as_expected(names)
    for ours, reference in zip(*results):
        assert torch.equal(ours, reference)
    check_gemm_forward_and_grad_input(x, w, b, kw)


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("device", [CUDA])
def test_rgb_stem_pads_any_input_layout(device, precision, layout):
    """An ungrouped layer whose channels are not whole 16-byte words (an RGB stem) runs on a copy
    with its channels zero-padded to a word: from NCHW, from channels_last and from a strided view
    the same bits as from a contiguous input, forward and both gradients, within 2x of PyTorch's
    error. With TF32 an NCHW input's grad_input is IEEE FP32 instead (tf32_grad_input)."""
    dtype = at_precision(precision)
    x, w, b, kw = make_case((2, 3, 16, 17, 13, 7, 7, 2, 3, 1, 1), device, dtype, channels_last=True)
    gy = torch.randn(2, 16, 9, 7, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
    big = torch.randn(2, 5, 2 * 17, 13 + 3, device=device, dtype=dtype)
    big[:, 1:4, ::2, 2:15] = x
    inputs = {"nchw": x.contiguous(), "nhwc": x, "strided": big[:, 1:4, ::2, 2:15]}
    results = []
    for xi in (x.contiguous(memory_format=torch.channels_last), inputs[layout]):
        xi = xi.detach().requires_grad_(True)
        wi = w.detach().requires_grad_(True)
        y = torchconv.conv2d(xi, wi, b, algorithm="gemm", **kw)
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
        results.append((y,) + torch.autograd.grad(y, (xi, wi), gy))
    ieee_grad_input = precision == "tf32" and layout != "nhwc"
    for name, ours, reference in zip(("output", "grad_input", "grad_weight"), results[1], results[0]):
        if name == "grad_input" and ieee_grad_input:
            x64 = x.detach().double().requires_grad_(True)
            (gx64,) = torch.autograd.grad(F.conv2d(x64, w.double(), b.double(), **kw), (x64,), gy.double())
            assert rel_err(ours, gx64) <= 1e-5
        else:
            assert torch.equal(ours.contiguous(), reference.contiguous()), name
    y64 = F.conv2d(x.double(), w.double(), b.double(), **kw)
    err, their_err = rel_err(results[1][0], y64), rel_err(F.conv2d(x, w, b, **kw), y64)
    assert err <= allowed_error(their_err, dtype), f"error {err:.2e}, PyTorch's {their_err:.2e}"


@pytest.mark.parametrize("dtype", REDUCED, ids=["fp16", "bf16"])
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_reduced_precision_channels_last(device, dtype):
    op = torch.ops.torchconv.conv2d_gemm.default
    x, w, b, _ = make_case((2, 8, 16, 7, 6, 3, 3, 1, 1, 1, 1), device, dtype, channels_last=True)
    torch.library.opcheck(op, (x, w, b, [1, 1], [1, 1], [1, 1], 1), test_utils=("test_schema", "test_faketensor"))
    gy = torch.randn(2, 16, 7, 6, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
    torch.library.opcheck(torch.ops.torchconv.conv2d_gemm_backward.default,
                          (gy, x, w, [1, 1], [1, 1], [1, 1], 1, [True, True, True]),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_under_autocast_channels_last(device):
    torch._dynamo.reset()
    model = torch.nn.Sequential(torchconv.Conv2d(8, 16, 3, padding=1, algorithm="gemm"), torch.nn.ReLU(),
                                torchconv.Conv2d(16, 8, 1, algorithm="gemm")).to(device)
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(2, 8, 10, 9, device=device).contiguous(memory_format=torch.channels_last)
    dtype = torch.bfloat16
    with torch.autocast(device, dtype=dtype):
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
    assert compiled.dtype == eager.dtype == dtype
    assert compiled.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(compiled, eager)


# The tensor-core filter relayout (Wt) reads the weight through its strides: weights in any layout
# give the contiguous weight's bits, forward, grad_input (every phase of a strided layer) and
# grad_weight; a channels_last weight is read in place (no copy kernel).
WEIGHT_LAYOUT_SHAPES = [
    (2, 16, 24, 9, 7, 3, 3, 1, 1, 1, 1),
    (2, 32, 40, 12, 13, 3, 3, 2, 1, 1, 1),  # four grad_input phases
    (2, 64, 144, 6, 5, 3, 3, 1, 1, 1, 2),  # groups, filters past one tile
    (2, 3, 16, 15, 14, 7, 7, 2, 3, 1, 1),  # an RGB stem: taps packed
    (1, 24, 16, 10, 9, 5, 3, (2, 1), (2, 1), (1, 2), 1),
    (2, 160, 72, 8, 7, 3, 3, 1, 1, 1, 1),  # a tap's channels over several 128-byte rows of Wt
    (1, 40, 12, 13, 11, 11, 11, 1, 5, 1, 1),  # 121 taps
    (1, 40, 8, 21, 20, 19, 19, 1, 9, 1, 1),  # 361 taps
]


def weight_in_layout(w, layout):
    if layout == "channels_last":
        return w.contiguous(memory_format=torch.channels_last)
    if layout == "sliced":  # every other filter of a weight twice as large
        big = torch.empty((2 * w.shape[0],) + tuple(w.shape[1:]), device=w.device, dtype=w.dtype)
        big[::2] = w
        return big[::2]
    return w.transpose(2, 3).contiguous().transpose(2, 3)  # "transposed_taps": S before R in memory


@pytest.mark.parametrize("layout", ["channels_last", "sliced", "transposed_taps"])
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("shape", WEIGHT_LAYOUT_SHAPES, ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_tensor_core_filter_reads_any_weight_layout(device, shape, precision, layout):
    dtype = at_precision(precision)
    x, w, b, kw = make_case(shape, device, dtype, channels_last=True)
    gy = None
    results = []
    for wi in (w, weight_in_layout(w, layout)):
        assert torch.equal(wi, w)
        xi, wi = x.detach().requires_grad_(True), wi.detach().requires_grad_(True)
        y = torchconv.conv2d(xi, wi, b, algorithm="gemm", **kw)
        assert TENSOR_CORE_PLAN.search(torchconv.last_choice())
        gy = torch.randn_like(y) if gy is None else gy
        results.append((y,) + torch.autograd.grad(y, (xi, wi), gy))
    for name, ours, reference in zip(("output", "grad_input", "grad_weight"), results[1], results[0]):
        assert torch.equal(ours, reference), name
    if layout == "channels_last":
        torchconv._C.set_poison_outputs(False)
        wi = weight_in_layout(w, layout).requires_grad_(True)
        names, _ = cuda_kernel_names(lambda: torchconv.conv2d(x, wi, b, algorithm="gemm", **kw))
        assert all("torchconv::" in name for name in names), sorted(names)


# A frozen weight's re-laid filters are cached (csrc/weight_cache.h). A strided grad_input re-lays
# them for each output phase with the taps that reach the phase, and those follow from the stride,
# padding and dilation, not from the phase alone: one weight used at several geometries must get
# each one's own taps (a phase's taps at padding 1 are one row, at padding 0 two), also when a
# geometry comes back after another.
SHARED_WEIGHT_GEOMETRIES = [(2, 1, 1), (2, 0, 1), (2, 2, 2), (2, 1, 1), (1, 1, 1), (2, 0, 1)]  # stride, padding, dilation


@pytest.mark.parametrize("algorithm, precision", [("gemm", "fp32"), ("csg", "fp32"), ("direct", "fp32"),
                                                  ("gemm", "tf32"), ("gemm", "bf16"), ("gemm", "fp16")])
@pytest.mark.parametrize("device", [CUDA])
def test_frozen_weight_shared_by_strided_layers_of_other_paddings(device, algorithm, precision):
    dtype = torch.float32 if precision == "fp32" else at_precision(precision)
    torchconv.clear_weight_cache()
    x, w, _, _ = make_case((2, 40, 48, 13, 11, 3, 3, 1, 1, 1, 1), device, dtype, channels_last=precision == "tf32")
    assert not w.requires_grad  # frozen: its re-laid filters are cached
    for stride, padding, dilation in SHARED_WEIGHT_GEOMETRIES:
        kw = dict(stride=stride, padding=padding, dilation=dilation)
        xi = x.detach().requires_grad_(True)
        y = torchconv.conv2d(xi, w, None, algorithm=algorithm, **kw)
        gy = torch.randn_like(y)
        (gx,) = torch.autograd.grad(y, (xi,), gy)
        if precision == "tf32":
            assert "grad_input:wgmma-" in torchconv.last_choice() or not hopper(), torchconv.last_choice()
        ref = torch.nn.grad.conv2d_input(x.shape, w.double(), gy.double(), **kw)
        what = f"grad_input at stride {stride}, padding {padding}, dilation {dilation}"
        if precision == "fp32":
            assert rel_err(gx, ref) < 1e-5, what
        else:
            theirs = torch.nn.grad.conv2d_input(x.shape, w, gy, **kw)
            assert rel_err(gx, ref) <= allowed_error(rel_err(theirs, ref), dtype), what
    if algorithm != "direct":  # the direct kernels re-lay the filter on every call
        assert torchconv.weight_cache_size() > 0


# A strided grad_input runs each output phase as a launch of the taps that reach it. On Hopper, where
# 2 to 4 phases receive taps (stride 2 x 2 or less), the phases run as one launch of one grid (their
# tiles longest reduction first, each phase split as the rule says) and their Wt is re-laid by one
# launch -- or, where each phase would read the weight as it is (GRAD_INPUT_DIRECT_WEIGHT_CASES: 16
# bits, a group's filters whole 64-filter chunks, its channels whole words and at least 64), by
# columns at its own taps, none re-laid; otherwise (one phase, more than 4, forced configs) a launch
# per phase. (shape, phases that
# receive taps): im2col tensor copies and gathered A (packed taps of an RGB stem), groups, stride per
# axis, a grid of four tiles whose phases split as clusters.
PHASE_LAUNCH_CASES = [
    ((2, 48, 96, 19, 16, 3, 3, 2, 1, 1, 1), 4),  # 1, 2, 2 and 4 taps
    ((1, 64, 72, 13, 11, 3, 3, (2, 1), 1, 1, 1), 2),
    ((2, 32, 64, 15, 17, 3, 3, 2, 1, 1, 2), 4),
    ((2, 3, 16, 15, 14, 7, 7, 2, 3, 1, 1), 4),  # 16 filters: packed taps, A gathered
    ((1, 64, 256, 9, 8, 3, 3, 2, 1, 1, 1), 4),  # four tiles, long reductions: the phases split
    ((2, 24, 40, 10, 9, 1, 1, 2, 0, 1, 1), 1),  # 1x1 stride 2: phase (0, 0) only
    ((1, 16, 32, 17, 16, 5, 5, 3, 1, 1, 1), 9),
]


def kernel_launches(fn):
    """The names of the CUDA kernels `fn()` launches, once per launch."""
    return cuda_kernel_launches(fn)[0]


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("case", PHASE_LAUNCH_CASES, ids=lambda c: shape_id(c[0]))
@pytest.mark.parametrize("device", [CUDA])
def test_strided_grad_input_phases_run_as_one_launch(device, case, precision):
    if not hopper():
        pytest.skip("the phases' launch: the wgmma kernel (sm_90a)")
    shape, phases = case
    dtype = at_precision(precision)
    x, w, b, kw = make_case(shape, device, dtype, channels_last=True)
    w = w.contiguous(memory_format=torch.channels_last)  # as a channels_last model's weight
    _, _, backward_plan = check_gemm_forward_and_grad_input(x, w, b, kw)
    assert "grad_input:wgmma-" in backward_plan, backward_plan
    if shape == PHASE_LAUNCH_CASES[4][0]:
        assert not backward_plan.endswith("/splits=1"), backward_plan
        assert torchconv.last_workspace_bytes() == 0
    # A trainable weight (its Wt re-laid every call, unless read by columns), grad_input alone.
    xi, wi = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    y = torchconv.conv2d(xi, wi, b, algorithm="gemm", **kw)
    gy = torch.randn_like(y)
    torchconv._C.set_poison_outputs(False)  # no fill kernels among the launches counted
    launches = kernel_launches(lambda: torch.autograd.grad(y, (xi,), gy, retain_graph=True))
    # Phases no tap reaches (a 1x1 stride-2 layer's three odd ones): one fill of the whole grad_input.
    stride = shape[7] if isinstance(shape[7], tuple) else (shape[7], shape[7])
    fills = [n for n in launches if n.startswith("Memset") or "at::native::" in n]
    assert len(fills) == int(phases < stride[0] * stride[1]), launches
    joint = [n for n in launches if "tc_conv_wgmma_phases_kernel" in n]
    # A phase launched alone: the wgmma tile, or the warp-specialized one where its reduction is short.
    single = [n for n in launches if "tc_conv_wgmma_kernel" in n or "tc_conv_wgmma_ws_kernel" in n]
    joint_relayout = [n for n in launches if "tc_weight_relayout_phases_kernel" in n]
    single_relayout = [n for n in launches if "tc_weight_relayout_kernel" in n]
    c, k, groups = shape[1], shape[2], shape[-1]
    relaid = precision == "tf32" or (k // groups) % 64 != 0 or (c // groups) % 8 != 0 or c // groups < 64
    if 2 <= phases <= 4:
        assert (len(joint), len(single), len(joint_relayout), len(single_relayout)) == (1, 0, int(relaid), 0), launches
    else:
        assert (len(joint), len(single), len(joint_relayout), len(single_relayout)) == (0, phases, 0, phases * relaid), launches
    # A forced config runs as named, phase by phase.
    if phases > 1:
        with using_config("gemm", "wgmma-large"):
            launches = kernel_launches(lambda: torch.autograd.grad(y, (xi,), gy))
        assert sum("tc_conv_wgmma_kernel" in n for n in launches) == phases, launches


# The channels_last -> contiguous weight copy (copy_into_contiguous_weight; here the direct algorithm's
# weight.contiguous(), which it runs in float32 or float64): by 16-byte words where a filter's
# channels are whole words and both tensors lie on 16-byte boundaries -- one unit a filter (512
# channels x 3 x 3), a filter's channels in two units (float64), 1x3 and 5x5 taps -- else element by
# element (channels not whole words, a weight 4 bytes past a boundary). The copy gives the
# contiguous weight's bits.
WEIGHT_COPY_CASES = [
    # dtype, (K, C, R, S), a weight 4 bytes past a 16-byte boundary, copied by words
    (torch.float32, (24, 512, 3, 3), False, True),
    (torch.float64, (8, 520, 3, 3), False, True),
    (torch.float32, (16, 40, 1, 3), False, True),
    (torch.float32, (8, 12, 5, 5), False, True),
    (torch.float32, (8, 7, 3, 3), False, False),
    (torch.float64, (8, 7, 3, 3), False, False),
    (torch.float32, (8, 16, 3, 3), True, False),
]


@pytest.mark.parametrize("case", WEIGHT_COPY_CASES,
                         ids=lambda c: f"{str(c[0])[6:]}-{'x'.join(map(str, c[1]))}{'-offset' if c[2] else ''}")
@pytest.mark.parametrize("device", [CUDA])
def test_channels_last_weight_copy_by_words_or_elements(device, case):
    dtype, (k, c, r, s), offset, by_words = case
    w = torch.randn(k, c, r, s, dtype=dtype, device=device)
    w_cl = w.contiguous(memory_format=torch.channels_last)
    if offset:  # the same channels_last layout, 4 bytes past the storage's 16-byte boundary
        w_cl = misaligned_copy(w_cl)
        assert w_cl.data_ptr() % 16 == 4
    assert w_cl.is_contiguous(memory_format=torch.channels_last) and not w_cl.is_contiguous()
    x = torch.randn(2, c, 9, 7, dtype=dtype, device=device)
    launches = kernel_launches(lambda: torchconv.conv2d(x, w_cl, None, algorithm="direct", padding=1))
    assert any("contiguous_words_kernel" in n for n in launches) == by_words, launches
    assert any("channels_last_weight_to_contiguous_kernel" in n for n in launches) == (not by_words), launches
    ours = torchconv.conv2d(x, w_cl, None, algorithm="direct", padding=1)
    assert torch.equal(ours, torchconv.conv2d(x, w, None, algorithm="direct", padding=1))


# (algorithm, precision, shape, channels_last, gradient copied): calls whose weight changes layout on
# the way -- a channels_last weight read in place by Winograd's filter transforms, Winograd's TF32
# grad_weight written in the call's format, an NCHW GEMM grad_weight of several taps finished into a
# channels_last target and copied into the NCHW gradient by our kernel (copy_into_contiguous_weight),
# by 16-byte words. (Where the position splits leave each block few elements to finish, the blocks
# store into the NCHW gradient themselves: no copy.)
WEIGHT_LAYOUT_CASES = [
    ("winograd", "tf32", (2, 40, 72, 12, 10, 3, 3, 1, 1, 1, 1), True, False),
    ("winograd", "bf16", (2, 40, 72, 12, 10, 3, 3, 1, 1, 1, 1), True, False),
    ("winograd", "tf32", (1, 520, 24, 6, 5, 3, 3, 1, 1, 1, 1), True, False),  # a filter's channels in two runs
    ("gemm", "bf16", (8, 256, 256, 14, 14, 3, 3, 1, 1, 1, 1), False, True),
    ("gemm", "tf32", (8, 128, 256, 28, 28, 3, 3, 2, 1, 1, 1), False, False),  # few elements a block: no copy
]


@pytest.mark.parametrize("case", WEIGHT_LAYOUT_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{shape_id(c[2])}")
@pytest.mark.parametrize("device", [CUDA])
def test_weight_layout_changes_launch_no_aten_copies(device, case):
    """A trainable weight (no cached transform) changes layout by our kernels alone: no pass launches
    an ATen kernel, and a channels_last weight gives the bits of the same weight made contiguous."""
    if not hopper():
        pytest.skip("the wgmma tiles (sm_90a)")
    algorithm, precision, shape, channels_last, copied = case
    dtype = at_precision(precision)
    x, w, _, kw = make_case(shape, device, dtype, channels_last)
    weights = [w.contiguous(memory_format=torch.channels_last), w] if channels_last else [w]
    torchconv._C.set_poison_outputs(False)  # no poisoning fills among the launches counted
    results = []
    for weight in weights:
        xi, wi = x.detach().requires_grad_(True), weight.detach().requires_grad_(True)
        y = torchconv.conv2d(xi, wi, None, algorithm=algorithm, **kw)
        gy = torch.randn(y.shape, generator=torch.Generator(device).manual_seed(0), device=device).to(dtype)
        gy = gy.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
        launches = kernel_launches(lambda: torchconv.conv2d(xi, wi, None, algorithm=algorithm, **kw))
        launches += kernel_launches(lambda: torch.autograd.grad(y, (xi, wi), gy, retain_graph=True))
        assert not [n for n in launches if "at::native::" in n], launches
        copies = [n for n in launches if "weight_to_contiguous" in n]
        assert all("contiguous_words_kernel" in n for n in copies), copies  # channels whole 16-byte words
        assert bool(copies) == copied, launches
        results.append([y] + list(torch.autograd.grad(y, (xi, wi), gy)))
    for ours, contiguous in zip(*results) if len(results) == 2 else ():
        assert torch.equal(ours, contiguous)


# (precision, channels_last) of the tensor-core grad_weight on padded channels (TF32 in channels_last
# only: an NCHW float32 grad_weight does not run on padded channels).
PADDED_GRAD_WEIGHT_CALLS = [("bf16", False), ("bf16", True), ("tf32", True)]


@pytest.mark.parametrize("call", PADDED_GRAD_WEIGHT_CALLS, ids=lambda c: f"{c[0]}-{'nhwc' if c[1] else 'nchw'}")
@pytest.mark.parametrize("shape", [SHAPES[6], (2, 7, 40, 9, 8, 3, 3, 1, 1, 1, 1)], ids=shape_id)
@pytest.mark.parametrize("device", [CUDA])
def test_padded_channel_grad_weight_stores_only_the_callers_channels(device, shape, call):
    """An ungrouped layer whose channels are short of a word (an RGB stem, 7 channels) runs its
    tensor-core grad_weight on zero-padded channels and stores only the caller's channels into
    grad_weight: no padded gradient, and no ATen copy out of one, in the pass; the gradient stays
    within 2x of cuDNN's error against float64."""
    if not hopper():
        pytest.skip("the wgmma grad_weight kernels (sm_90a)")
    precision, channels_last = call
    dtype = at_precision(precision)
    x, w, _, kw = make_case(shape, device, dtype, channels_last)
    torchconv._C.set_poison_outputs(False)  # no poisoning fills among the launches counted
    wi = w.detach().requires_grad_(True)
    y = torchconv.conv2d(x, wi, None, algorithm="gemm", **kw)
    gy = torch.randn(y.shape, device=device).to(dtype).contiguous(
        memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    launches = kernel_launches(lambda: torch.autograd.grad(y, wi, gy, retain_graph=True))
    assert "grad_weight:tc" in torchconv.last_choice() or "grad_weight:wgmma" in torchconv.last_choice()
    assert not [n for n in launches if "at::native::" in n], launches
    (gw,) = torch.autograd.grad(y, wi, gy)
    w64 = w.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(F.conv2d(x.double(), w64, None, **kw), w64, gy.double())
    wr = w.detach().requires_grad_(True)
    (theirs,) = torch.autograd.grad(F.conv2d(x, wr, None, **kw), wr, gy)
    assert rel_err(gw, ref) <= allowed_error(rel_err(theirs, ref), dtype)
