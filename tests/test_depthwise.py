"""The direct algorithm's depthwise / small-group specialist (csrc/cuda/direct/depthwise_kernels.cuh).

It runs every launch whose groups are small -- at most 16 channels and 16 filters per group, 64
pairs: depthwise with any channel multiplier, grouped convolutions such as ResNeXt's -- forward,
grad_input (the same kernel with the flipped filter, one launch per phase when strided) and
grad_weight (per-block partial sums added in a fixed order). Kernel sizes from 1x1 to 51x51,
rectangular, stride 1 and 2, dilation, any padding, any H and W, batch 1 and more; float32 and
float64. Every case compares the output and the three gradients with F.conv2d in float64.

A channels_last layer with 1, 2 or 4 channels and as many filters per group (depthwise, ResNeXt-like
groups) and a multiple of 4 channels runs the NHWC
specialist (depthwise_nhwc_kernels.cuh) in its own dtype, forward and grad_input, and returns
channels_last; so does grad_weight where a filter row's sums fit a thread (rows of at most 12 taps
depthwise, 6 in groups of 2, 3 in groups of 4), summed over slices in a fixed order. Other
grad_weights go through the NCHW specialist in float32."""
import re

import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import (assert_close_rel, check_forward_backward, cuda_kernel_launches, cuda_kernel_names, rel_err,
                      using_config, using_variant)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def shape_id(shape):
    n, c, k, h, w, r, s, stride, pad, dil, groups, bias = shape
    return f"n{n}c{c}k{k}g{groups}_{h}x{w}_{r}x{s}_s{stride}p{pad}d{dil}" + ("b" if bias else "")


# (N, C, K, H, W, R, S, stride, padding, dilation, groups, bias)
SHAPES = [
    (2, 16, 16, 14, 14, 3, 3, 1, 1, 1, 16, True),  # MobileNet 3x3
    (1, 9, 9, 13, 17, 3, 3, 2, 1, 1, 9, False),  # stride 2, odd H != W, batch 1
    (3, 8, 8, 11, 10, 5, 5, 2, 2, 1, 8, True),  # 5x5 stride 2 (EfficientNet)
    (2, 12, 12, 15, 19, 7, 7, 1, 3, 1, 12, True),  # ConvNeXt 7x7
    (2, 6, 6, 9, 9, 13, 13, 1, 6, 1, 6, False),  # 13x13 on a 9x9 plane: mostly padding
    (1, 4, 4, 14, 14, 27, 27, 1, 13, 1, 4, True),  # RepLKNet 27x27 on 14x14
    (2, 3, 3, 20, 23, 31, 31, 1, 15, 1, 3, False),  # RepLKNet 31x31
    (1, 4, 4, 30, 29, 51, 5, 1, (25, 2), 1, 4, True),  # SLaK 51x5
    (1, 4, 4, 29, 30, 5, 51, 1, (2, 25), 1, 4, False),  # 5x51
    (2, 5, 5, 12, 16, 1, 7, 1, (0, 3), 1, 5, True),  # 1x7
    (2, 5, 5, 16, 12, 7, 1, 1, (3, 0), 1, 5, False),  # 7x1
    (2, 7, 7, 17, 18, 3, 3, 1, 2, 2, 7, True),  # dilation 2
    (1, 6, 6, 21, 20, 3, 5, 2, (2, 1), (2, 3), 6, False),  # stride 2 with dilation 2, 3
    (2, 6, 6, 10, 11, 3, 3, 1, 0, 1, 6, True),  # no padding
    (1, 4, 4, 8, 9, 3, 3, 1, 4, 1, 4, False),  # padding wider than the filter's reach
    (2, 8, 16, 12, 13, 3, 3, 1, 1, 1, 8, True),  # channel multiplier 2
    (1, 4, 12, 11, 12, 5, 5, 2, 2, 1, 4, False),  # channel multiplier 3, stride 2
    (2, 16, 16, 14, 15, 3, 3, 1, 1, 1, 4, True),  # groups of 4 x 4 (ResNeXt)
    (1, 24, 48, 10, 9, 3, 3, 2, 1, 1, 3, False),  # groups of 8 x 16 (128 pairs): not a small group
    (2, 32, 32, 70, 67, 3, 3, 1, 1, 1, 32, False),  # a plane wider than one row of thread tiles' batch
    (1, 2, 2, 130, 40, 3, 3, 1, 1, 1, 2, True),  # a tall plane: several bands
    (33, 3, 3, 7, 7, 3, 3, 1, 1, 1, 3, True),  # more images than a block takes
]


def specialist_takes(shape):
    n, c, k, h, w, r, s, stride, pad, dil, groups, bias = shape
    cg, kg = c // groups, k // groups
    return cg <= 16 and kg <= 16 and cg * kg <= 64


def unstaged_takes(shape, dtype):
    """The unstaged forward (no shared memory) runs float32 small-group launches with a 3x3, 5x5 or
    7x7 filter, equal strides of 1 or 2 and no dilation."""
    n, c, k, h, w, r, s, stride, pad, dil, groups, bias = shape
    return (dtype == torch.float32 and specialist_takes(shape) and r == s and r in (3, 5, 7) and stride in (1, 2)
            and dil == 1)


def strided_grad_input_takes(shape, dtype):
    """The unstaged family's strided grad_input: float32 depthwise layers (one filter per channel) at
    stride 2 with a 3x3 or 5x5 filter and no dilation, every output phase in one launch."""
    n, c, k, h, w, r, s, stride, pad, dil, groups, bias = shape
    return dtype == torch.float32 and c == groups and k == groups and stride == 2 and dil == 1 and r == s and r in (3, 5)


def unstaged_grad_input(shape, dtype):
    """Its grad_input: the same launch on grad_output where the layer has stride 1; the strided
    grad_input above for strided depthwise layers (other strided layers' grad_input phases have
    smaller filters: the staged specialist or the per-pixel gather runs them)."""
    return (unstaged_takes(shape, dtype) and shape[7] == 1) or strided_grad_input_takes(shape, dtype)


def unstaged_by_rule(shape, dtype, transposed=False):
    """auto takes the unstaged launch wherever it can with at most 4 reduced channels per group
    (filters per group for grad_input)."""
    n, c, k, h, w, r, s, stride, pad, dil, groups, bias = shape
    if not (unstaged_grad_input(shape, dtype) if transposed else unstaged_takes(shape, dtype)):
        return False
    return (k if transposed else c) // groups <= 4


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_depthwise_matches_float64(shape, dtype):
    check_forward_backward("direct", shape, "cuda", dtype, f"depthwise {shape_id(shape)}")
    choice = torchconv.last_choice()
    if specialist_takes(shape):
        forward = ("depthwise-plane" if plane_by_rule(shape, dtype) else
                   "depthwise-unstaged" if unstaged_by_rule(shape, dtype) else "depthwise")
        assert choice.startswith(f"forward:{forward}/") and "grad_weight:depthwise/" in choice, choice
        # grad_input of a strided layer with few blocks may take the per-pixel gather instead.
        if unstaged_by_rule(shape, dtype, transposed=True):
            assert "grad_input:depthwise-unstaged/" in choice, choice
    else:
        assert "depthwise/" not in choice.split()[0], choice


# Forced onto the unstaged forward: every filter size and stride it compiles, odd planes (H != W,
# narrower than a warp, fewer rows than a thread's strip), padding from none to wider than the
# filter's reach, batch 1 and more, channel multipliers (grad_input then reduces over the filters of a
# group), groups of 4 x 4, 2 x 2 and 16 channels x 4 filters, bias. 3x3 launches whose groups have a
# multiple of 4 filters compute 4 of them per thread (ResNeXt's groups, multiplier 4).
UNSTAGED_SHAPES = [
    (2, 16, 16, 14, 14, 3, 3, 1, 1, 1, 16, True),
    (1, 9, 9, 13, 17, 3, 3, 2, 1, 1, 9, False),
    (3, 8, 8, 11, 10, 5, 5, 2, 2, 1, 8, True),
    (2, 5, 5, 7, 7, 5, 5, 1, 2, 1, 5, False),
    (2, 12, 12, 15, 19, 7, 7, 1, 3, 1, 12, True),
    (1, 6, 6, 17, 16, 7, 7, 2, 3, 1, 6, False),
    (2, 6, 6, 10, 11, 3, 3, 1, 0, 1, 6, True),
    (1, 4, 4, 8, 9, 3, 3, 1, 4, 1, 4, False),
    (2, 3, 3, 3, 2, 3, 3, 1, 1, 1, 3, True),
    (1, 4, 4, 2, 37, 5, 5, 1, 2, 1, 4, False),
    (2, 8, 16, 12, 13, 3, 3, 1, 1, 1, 8, True),
    (1, 4, 12, 11, 12, 5, 5, 2, 2, 1, 4, False),
    (33, 3, 3, 7, 7, 3, 3, 1, 1, 1, 3, True),
    (2, 16, 16, 14, 15, 3, 3, 1, 1, 1, 4, True),
    (1, 12, 12, 9, 10, 5, 5, 2, 2, 1, 6, False),
    (1, 32, 8, 9, 10, 3, 3, 1, 1, 1, 2, True),
    (2, 8, 8, 11, 13, 3, 3, 2, 1, 1, 2, True),  # 3x3 with 4 filters per group: 4 per thread, stride 2
    (1, 3, 12, 10, 9, 3, 3, 1, 1, 1, 3, False),  # channel multiplier 4: 4 filters per thread
]


@needs_cuda
@pytest.mark.parametrize("shape", UNSTAGED_SHAPES, ids=shape_id)
def test_unstaged_forward_matches_float64(shape):
    with using_config("direct", "depthwise-unstaged"):
        check_forward_backward("direct", shape, "cuda", torch.float32, f"unstaged {shape_id(shape)}")
    choice = torchconv.last_choice()
    assert unstaged_takes(shape, torch.float32)
    assert choice.startswith("forward:depthwise-unstaged/") and "grad_weight:depthwise/" in choice, choice
    if unstaged_grad_input(shape, torch.float32):
        assert "grad_input:depthwise-unstaged/" in choice, choice


# What each forced config declines: (config, (N, C, K, H, W, R, S, stride, padding, dilation, groups), dtype).
DECLINED = [
    ("depthwise-unstaged", (1, 4, 4, 9, 9, 3, 5, 1, 1, 1, 4), torch.float32, "3x5"),
    ("depthwise-unstaged", (1, 4, 4, 9, 9, 3, 3, 1, 2, 2, 4), torch.float32, "dilation2"),
    ("depthwise-unstaged", (1, 4, 4, 9, 9, 3, 3, (1, 2), 1, 1, 4), torch.float32, "strides1x2"),
    ("depthwise-unstaged", (1, 4, 4, 9, 9, 9, 9, 1, 4, 1, 4), torch.float32, "9x9"),
    ("depthwise-unstaged", (1, 64, 64, 9, 9, 3, 3, 1, 1, 1, 2), torch.float32, "groups-of-32"),
    ("depthwise-unstaged", (1, 4, 4, 9, 9, 3, 3, 1, 1, 1, 4), torch.float64, "float64"),
    ("depthwise-plane", (16, 4, 4, 7, 7, 5, 5, 1, 2, 1, 4), torch.float32, "centred-5x5"),  # nor covering
    ("depthwise-plane", (16, 4, 4, 8, 8, 15, 15, 1, 7, 1, 4), torch.float32, "width8"),  # no compiled width
    ("depthwise-plane", (16, 4, 4, 14, 14, 27, 27, 2, 13, 1, 4), torch.float32, "stride2"),
    ("depthwise-plane", (16, 4, 4, 7, 7, 13, 13, 1, 12, 2, 4), torch.float32, "dilation2"),
    ("depthwise-plane", (16, 16, 16, 7, 7, 13, 13, 1, 6, 1, 4), torch.float32, "groups-of-4"),
    ("depthwise-plane", (16, 4, 4, 7, 7, 13, 13, 1, 6, 1, 4), torch.float64, "float64"),
]


@needs_cuda
@pytest.mark.parametrize("config, shape, dtype", [d[:3] for d in DECLINED], ids=[f"{d[0]}-{d[3]}" for d in DECLINED])
def test_forced_config_declines_what_it_cannot_run(config, shape, dtype):
    n, c, k, h, w, r, s, stride, pad, dil, groups = shape
    takes = unstaged_takes if config == "depthwise-unstaged" else plane_takes
    assert not takes(shape + (False,), dtype)
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
    wt = torch.randn(k, c // groups, r, s, device="cuda", dtype=dtype)
    with using_config("direct", config):
        with pytest.raises(ValueError, match=f"forced config '{config}'"):
            torchconv.conv2d(x, wt, None, stride, pad, dil, groups, algorithm="direct")


# The strided grad_input over every padding parity of 3x3 and 5x5 filters (which taps join which
# input row and column pair), padding 0 and wider than half the filter, odd and even H and W (a last
# row or column pair with one pixel), batch 1, 2 and 33, bias.
STRIDED_SHAPES = [
    (2, 5, 5, 12, 9, 3, 3, 2, 0, 1, 5, False),
    (1, 4, 4, 9, 14, 3, 3, 2, (2, 1), 1, 4, True),
    (3, 6, 6, 15, 8, 5, 5, 2, (1, 2), 1, 6, False),
    (1, 3, 3, 7, 7, 5, 5, 2, 3, 1, 3, True),
    (33, 2, 2, 6, 5, 3, 3, 2, 1, 1, 2, False),
    (2, 8, 8, 112, 113, 3, 3, 2, 1, 1, 8, False),
]


@needs_cuda
@pytest.mark.parametrize("shape", STRIDED_SHAPES, ids=shape_id)
def test_strided_grad_input_matches_float64(shape):
    assert strided_grad_input_takes(shape, torch.float32)
    check_forward_backward("direct", shape, "cuda", torch.float32, f"strided grad_input {shape_id(shape)}")
    assert "grad_input:depthwise-unstaged/" in torchconv.last_choice(), torchconv.last_choice()


@needs_cuda
@pytest.mark.parametrize("variant", ["phases", "gather"])
def test_forced_grad_input_variant_bypasses_the_strided_kernel(variant):
    shape = (2, 5, 5, 12, 9, 3, 3, 2, 1, 1, 5, False)
    with using_variant("direct", variant):
        check_forward_backward("direct", shape, "cuda", torch.float32, f"{variant} {shape_id(shape)}")
    choice = torchconv.last_choice()
    assert "grad_input:depthwise-unstaged/" not in choice, choice
    assert ("grad_input:gather/" in choice) == (variant == "gather"), choice


def plane_takes(shape, dtype=torch.float32):
    """The whole-plane forward runs float32 depthwise launches (one channel per group) at stride 1 with
    dilation 1 on planes 7 or 14 wide (the output as wide) whose filter, along W, covers the plane
    (every output column reads every input column) or is centred and 7 wide; any filter height and
    padding along H."""
    n, c, k, h, w, r, s, stride, pad, dil, groups, bias = shape
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    wo = w + 2 * pw - s + 1
    covers = pw >= w - 1 and w - 1 + pw <= s - 1
    centred = s == 7 and pw == 3
    return (dtype == torch.float32 and c == groups and stride == 1 and dil == 1 and w in (7, 14) and wo == w
            and (covers or centred))


def plane_by_rule(shape, dtype):
    """auto takes it at batches of 16 and more for filters that cover the plane's width, and for
    centred 7-column filters on 14-wide planes."""
    n, c, k, h, w, r, s, stride, pad, dil, groups, bias = shape
    pw = pad if isinstance(pad, int) else pad[1]
    covers = pw >= w - 1 and w - 1 + pw <= s - 1
    return plane_takes(shape, dtype) and n >= 16 and (covers or w == 14)


# Forced onto the whole-plane forward. Covering filters: RepLKNet's 13x13 on 7x7 and 27x27 on 14x14,
# H != W (taller and shorter than wide, output rows not a multiple of a thread's strip), rectangular
# filters wider than needed, asymmetric padding. Centred 7-column filters (ConvNeXt's 7x7 on 14x14 and
# 7x7), no padding along H, a plane taller than wide with a taller filter. Batch 1, 2, 17, 32, 33 (a second warp with one image), channel multiplier 2 (its grad_input
# reduces over 2 filters: the staged kernel), bias.
PLANE_SHAPES = [
    (32, 8, 8, 7, 7, 13, 13, 1, 6, 1, 8, True),
    (16, 4, 4, 14, 14, 27, 27, 1, 13, 1, 4, False),
    (33, 3, 3, 5, 7, 15, 15, 1, 7, 1, 3, True),
    (1, 2, 4, 14, 14, 29, 31, 1, (14, 15), 1, 2, True),
    (2, 3, 3, 9, 7, 21, 13, 1, (10, 6), 1, 3, False),
    (3, 5, 5, 3, 14, 9, 29, 1, (4, 14), 1, 5, True),
    (32, 6, 6, 7, 7, 7, 7, 1, 3, 1, 6, True),
    (17, 4, 4, 14, 14, 7, 7, 1, 3, 1, 4, False),
    (2, 3, 6, 11, 14, 7, 7, 1, (0, 3), 1, 3, True),
    (1, 5, 5, 20, 7, 9, 7, 1, (2, 3), 1, 5, False),
]


@needs_cuda
@pytest.mark.parametrize("shape", PLANE_SHAPES, ids=shape_id)
def test_plane_forward_matches_float64(shape):
    assert plane_takes(shape)
    with using_config("direct", "depthwise-plane"):
        check_forward_backward("direct", shape, "cuda", torch.float32, f"plane {shape_id(shape)}")
    choice = torchconv.last_choice()
    assert choice.startswith("forward:depthwise-plane/") and "grad_weight:depthwise/" in choice, choice
    n, c, k = shape[:3]
    assert ("grad_input:depthwise-plane/" in choice) == (k == c), choice


@needs_cuda
@pytest.mark.parametrize("n, hw, r, taken", [
    (32, 7, 13, True), (16, 7, 13, True), (8, 7, 13, False),  # covering
    (16, 14, 7, True), (8, 14, 7, False), (16, 7, 7, False),  # centred 7x7: on 14-wide planes only
])
def test_rule_takes_the_plane_forward_for_batches_of_16_and_more(n, hw, r, taken):
    shape = (n, 8, 8, hw, hw, r, r, 1, r // 2, 1, 8, False)
    assert plane_by_rule(shape, torch.float32) == taken
    check_forward_backward("direct", shape, "cuda", torch.float32, f"rule {shape_id(shape)}")
    choice = torchconv.last_choice()
    assert choice.startswith("forward:depthwise-plane/") == taken, choice
    assert ("grad_input:depthwise-plane/" in choice) == taken, choice


@needs_cuda
def test_grad_input_runs_on_the_specialist():
    shape = (4, 32, 32, 28, 28, 7, 7, 1, 3, 1, 32, False)
    check_forward_backward("direct", shape, "cuda", torch.float32, "grad_input")
    assert re.search(r"grad_input:depthwise(-unstaged)?/", torchconv.last_choice())


@needs_cuda
def test_padding_rows_are_skipped_not_read_out_of_bounds():
    """A 27x27 filter on a 3x3 plane (most taps read the padding) stays exact."""
    check_forward_backward("direct", (2, 4, 4, 3, 3, 27, 27, 1, 13, 1, 4, True), "cuda", torch.float64, "tiny plane")


@needs_cuda
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("stride", [1, 2])
def test_backward_is_deterministic(stride, layout):
    """grad_weight sums its partial tiles (NCHW specialist, float32) or slices (NHWC specialist,
    bfloat16) in a fixed order: two runs are bitwise equal."""
    x = torch.randn(8, 64, 33, 31, device="cuda")
    w = torch.randn(64, 1, 7, 7, device="cuda")
    if layout == "nhwc":
        x, w = x.bfloat16().contiguous(memory_format=torch.channels_last), w.bfloat16()
    x.requires_grad_(), w.requires_grad_()
    out = torchconv.conv2d(x, w, None, stride, 3, 1, 64, algorithm="direct")
    gy = torch.randn_like(out)
    first = torch.autograd.grad(out, (x, w), gy)
    second = torch.autograd.grad(torchconv.conv2d(x, w, None, stride, 3, 1, 64, algorithm="direct"), (x, w), gy)
    # bfloat16 7x7 rows at stride 1 over 64 channels: threads of 8 channels (dw_nhwc_grad_weight_vector)
    expected = {"nchw": "grad_weight:depthwise/", "nhwc": "grad_weight:depthwise-nhwc/" if stride == 2
                else "grad_weight:depthwise-nhwc-vec8/"}[layout]
    assert expected in torchconv.last_choice()
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_nhwc_grad_weight_is_two_kernels(dtype):
    """The NHWC grad_weight is the slices' kernel and their sum, which writes the weight's dtype (no
    cast kernel after it)."""
    x = torch.randn(4, 32, 12, 11, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(32, 1, 3, 3, device="cuda", dtype=dtype, requires_grad=True)
    y = torchconv.conv2d(x, w, None, 1, 1, 1, 32, algorithm="direct")
    gy = torch.randn_like(y)
    torchconv._C.set_poison_outputs(False)  # no fill kernels among the launches counted
    names, (gw,) = cuda_kernel_names(lambda: torch.autograd.grad(y, (w,), gy))
    assert "grad_weight:depthwise-nhwc/" in torchconv.last_choice()
    assert gw.dtype == dtype and gw.is_contiguous()
    assert len(names) == 2, sorted(names)
    assert any("depthwise_nhwc_grad_weight_kernel" in n for n in names), sorted(names)
    assert any("sum_slices_kernel" in n for n in names), sorted(names)
    ref = torch.nn.grad.conv2d_weight(x.double(), w.shape, gy.double(), 1, 1, 1, 32)
    assert rel_err(gw, ref) <= (1e-5 if dtype == torch.float32 else 2.0 ** -7)


@needs_cuda
def test_forced_specialist_on_a_wide_group_is_a_value_error():
    x = torch.randn(1, 32, 8, 8, device="cuda")
    w = torch.randn(16, 32, 3, 3, device="cuda")
    with using_config("direct", "depthwise"):
        with pytest.raises(ValueError, match="forced config 'depthwise'"):
            torchconv.conv2d(x, w, None, 1, 1, algorithm="direct")


@needs_cuda
def test_forced_tile_config_bypasses_the_specialist():
    """Forcing a tile config runs the tiled kernels on a depthwise layer (so both can be timed)."""
    x = torch.randn(2, 16, 12, 12, device="cuda", dtype=torch.float64)
    w = torch.randn(16, 1, 3, 3, device="cuda", dtype=torch.float64)
    ref = F.conv2d(x, w, None, 1, 1, 1, 16)
    with using_config("direct", "wide"):
        out = torchconv.conv2d(x, w, None, 1, 1, 1, 16, algorithm="direct")
    assert not torchconv.last_choice().startswith("forward:depthwise/")
    assert_close_rel(out, ref, torch.float64, "forced wide")


@needs_cuda
def test_auto_takes_direct_for_depthwise():
    x = torch.randn(8, 96, 28, 28, device="cuda")
    w = torch.randn(96, 1, 7, 7, device="cuda")
    assert torchconv.select_algorithm(x, w, 1, 1, 96, 3) == "direct"
    x, w = torch.randn(8, 96, 28, 28, device="cuda"), torch.randn(96, 96, 7, 7, device="cuda")
    assert torchconv.select_algorithm(x, w, 1, 1, 1, 3) != "direct"


# (N, C, H, W, R, S, stride, padding, dilation, bias): depthwise, multiplier 1, C a multiple of 4.
NHWC_SHAPES = [
    (2, 16, 14, 14, 3, 3, 1, 1, 1, True),  # MobileNet 3x3
    (1, 24, 13, 17, 3, 3, 2, 1, 1, False),  # stride 2, odd H != W, batch 1
    (3, 8, 11, 10, 5, 5, 2, 2, 1, True),  # 5x5 stride 2 (EfficientNet)
    (2, 32, 15, 19, 7, 7, 1, 3, 1, True),  # ConvNeXt 7x7
    (2, 8, 9, 9, 13, 13, 1, 6, 1, False),  # 13x13 on a 9x9 plane: mostly padding
    (1, 8, 14, 14, 27, 27, 1, 13, 1, True),  # RepLKNet 27x27 on 14x14
    (2, 8, 20, 23, 31, 31, 1, 15, 1, False),  # RepLKNet 31x31
    (1, 8, 30, 29, 51, 5, 1, (25, 2), 1, True),  # SLaK 51x5
    (1, 8, 29, 30, 5, 51, 1, (2, 25), 1, False),  # 5x51
    (2, 12, 12, 16, 1, 7, 1, (0, 3), 1, True),  # 1x7, 12 channels
    (2, 16, 16, 12, 7, 1, 1, (3, 0), 1, False),  # 7x1
    (2, 20, 17, 18, 3, 3, 1, 2, 2, True),  # dilation 2
    (1, 16, 21, 20, 3, 5, 2, (2, 1), (2, 3), False),  # stride 2 with dilation 2, 3
    (2, 4, 10, 11, 3, 3, 1, 0, 1, True),  # no padding, one channel vector
    (1, 8, 8, 9, 3, 3, 1, 4, 1, False),  # padding wider than the filter's reach
    (1, 8, 12, 13, 3, 3, 3, 1, 1, True),  # stride 3: phases no tap reaches stay zero in grad_input
    (2, 40, 70, 67, 3, 3, 1, 1, 1, False),  # a wide plane, channels not a multiple of 32
    (33, 8, 7, 7, 5, 5, 1, 2, 1, True),  # many images of a small plane
    (20, 8, 15, 9, 3, 3, 1, 1, 1, False),  # 300 output rows: grad_weight's 300 slices summed 32 lanes an element
    (1, 8, 23, 21, 5, 5, 5, 2, 1, True),  # stride 5: 25 grad_input phases, their filters re-laid 16 at a time
    (1, 8, 9, 45, 5, 5, 1, 2, 1, False),  # 45 output columns: grad_weight's window slots over a 40-pixel step and a part
    (1, 12, 5, 61, 7, 7, 1, 3, 1, True),  # 61 output columns: the 7-tap window's 56-pixel step and a part
    # 16-bit 3x3 / 5x5 run the rows kernel (every filter row's inputs loaded at once):
    (2, 12, 9, 14, 3, 3, 1, (2, 1), (2, 1), True),  # dilation along H only: the rows' step
    (1, 20, 16, 18, 5, 5, 1, (4, 2), (2, 1), False),  # 5x5, dilation along H only, a partial strip
    (2, 28, 15, 17, 3, 3, 2, 1, 1, True),  # 3x3 stride 2, 9 output columns: a partial strip of 2
    (1, 36, 6, 23, 5, 5, 2, 2, 1, False),  # 5x5 stride 2, rows mostly padding
    (2, 12, 17, 19, 7, 7, 2, 3, 1, True),  # 7x7 stride 2: grad_weight's window keeps 5 columns a pixel
]


# The same with a last element: channels (and filters) per group, 2 or 4.
NHWC_GROUP_SHAPES = [
    (2, 16, 14, 13, 3, 3, 1, 1, 1, True, 4),  # ResNeXt 3x3, groups of 4 x 4
    (1, 16, 13, 12, 3, 3, 1, (2, 1), (2, 1), False, 4),  # groups of 4, dilation along H only
    (1, 24, 15, 14, 3, 3, 2, 1, 1, False, 4),  # stride 2, batch 1
    (2, 12, 11, 12, 3, 3, 1, 1, 1, False, 2),  # groups of 2 x 2
    (2, 8, 12, 11, 5, 5, 1, 2, 1, True, 4),  # 5x5: the per-product loop
    (1, 16, 13, 12, 3, 3, 1, 2, 2, False, 2),  # dilation 2
]


def nhwc_id(shape):
    n, c, h, w, r, s, stride, pad, dil, bias = shape[:10]
    group = f"_g{shape[10]}" if len(shape) > 10 else ""
    return f"n{n}c{c}_{h}x{w}_{r}x{s}_s{stride}p{pad}d{dil}" + ("b" if bias else "") + group


def nhwc_case(shape, dtype, device="cuda"):
    n, c, h, w, r, s, stride, pad, dil, bias = shape[:10]
    cg = shape[10] if len(shape) > 10 else 1
    x = torch.randn(n, c, h, w, dtype=torch.float64, device=device)
    wt = torch.randn(c, cg, r, s, dtype=torch.float64, device=device) / (cg * r * s) ** 0.5
    b = torch.randn(c, dtype=torch.float64, device=device) if bias else None
    x = x.to(dtype).contiguous(memory_format=torch.channels_last)
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=c // cg)
    return x, wt.to(dtype), b.to(dtype) if bias else None, kw


def forward_and_gradients(x, w, b, kw, conv):
    leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
    y = conv(leaves[0], leaves[1], leaves[2] if b is not None else None, **kw)
    gy = torch.randn(y.shape, dtype=torch.float64, device=y.device).to(y.dtype)
    return (y,) + torch.autograd.grad(y, leaves, gy), gy


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", NHWC_SHAPES + NHWC_GROUP_SHAPES, ids=nhwc_id)
def test_nhwc_depthwise_matches_float64(shape, dtype):
    """Forward and grad_input on the NHWC specialist, in the input's dtype and channels_last; every
    gradient within float32's bar, or in float16 / bfloat16 within 2x of cuDNN's error at the same
    precision (with a floor of one unit in the last place)."""
    x, w, b, kw = nhwc_case(shape, dtype)
    ours, gy = forward_and_gradients(x, w, b, kw, lambda *a, **k: torchconv.conv2d(*a, **k, algorithm="direct"))
    choice = torchconv.last_choice()
    assert "forward:depthwise-nhwc/" in choice and "grad_input:depthwise-nhwc/" in choice, choice
    group, width = (shape[10] if len(shape) > 10 else 1), shape[5]
    dil_w = shape[8][1] if isinstance(shape[8], tuple) else shape[8]
    # threads of 8 channels: 16-bit rows of 5 or 7 taps at stride and dilation 1 along W, channels a multiple of 8
    vec8 = (dtype != torch.float32 and group == 1 and shape[6] == 1 and dil_w == 1 and width in (5, 7)
            and shape[1] % 8 == 0)
    nhwc_gw = "grad_weight:depthwise-nhwc-vec8/" if vec8 else "grad_weight:depthwise-nhwc/"
    assert (nhwc_gw in choice) == (width * group <= 12), choice
    y, gx = ours[0], ours[1]
    assert y.dtype == gx.dtype == ours[2].dtype == dtype
    assert y.is_contiguous(memory_format=torch.channels_last) and gx.is_contiguous(memory_format=torch.channels_last)

    leaves64 = [t.detach().double().requires_grad_() for t in (x, w, b) if t is not None]
    y64 = F.conv2d(leaves64[0], leaves64[1], leaves64[2] if b is not None else None, **kw)
    refs = (y64,) + torch.autograd.grad(y64, leaves64, gy.double())
    if dtype == torch.float32:
        for name, o, r in zip(("output", "grad_input", "grad_weight", "grad_bias"), ours, refs):
            assert_close_rel(o, r, dtype, f"{nhwc_id(shape)} {name}")
        return
    ulp = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
    for name, o in zip(("output", "grad_input", "grad_weight", "grad_bias"), ours):
        assert not torch.isnan(o).any(), f"{name}: NaN (unwritten elements?)"
    # cuDNN's error on the same inputs and the same grad_output
    leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
    yr = F.conv2d(leaves[0], leaves[1], leaves[2] if b is not None else None, **kw)
    theirs = (yr,) + torch.autograd.grad(yr, leaves, gy)
    for name, o, r, t in zip(("output", "grad_input", "grad_weight", "grad_bias"), ours, refs, theirs):
        err, their_err = rel_err(o, r), rel_err(t, r)
        assert err <= max(2 * their_err, ulp), f"{name}: error {err:.2e}, cuDNN's {their_err:.2e}"


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("width", [5, 7])
def test_nhwc_grad_weight_8_channel_threads_only_from_16_byte_aligned_tensors(width, dtype):
    """16-bit depthwise rows of 5 or 7 taps at stride 1 over a multiple of 8 channels run threads of 8
    channels (16-byte loads); an input 8 bytes past a 16-byte boundary (aligned for 4 channels, so no
    copy) runs the 4-channel threads. A channel's sums run in the same order at either width, and the
    slices are the same, so the two gradients are equal bit for bit and within the bar."""
    n, c, h, w = 2, 24, 13, 17
    base = torch.randn(n * h * w * c + 4, device="cuda").to(dtype)
    shifted = base[4:].view(n, h, w, c).permute(0, 3, 1, 2)  # channels_last, 8 bytes past the start
    assert shifted.is_contiguous(memory_format=torch.channels_last) and shifted.data_ptr() % 16 == 8
    aligned = shifted.clone(memory_format=torch.channels_last)
    assert aligned.data_ptr() % 16 == 0
    wt = (torch.randn(c, 1, width, width, device="cuda") / width).to(dtype)
    pad = width // 2
    gy = torch.randn(n, c, h, w, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)

    def grad_weight(x):
        wd = wt.detach().requires_grad_()
        y = torchconv.conv2d(x, wd, None, 1, pad, 1, c, algorithm="direct")
        return torch.autograd.grad(y, (wd,), gy)[0]

    wide = grad_weight(aligned)
    assert "grad_weight:depthwise-nhwc-vec8/" in torchconv.last_choice()
    narrow = grad_weight(shifted)
    assert "grad_weight:depthwise-nhwc/" in torchconv.last_choice()
    assert torch.equal(wide, narrow)
    ref = torch.nn.grad.conv2d_weight(aligned.double(), wt.shape, gy.double(), 1, pad, 1, c)
    assert rel_err(wide, ref) <= 2 * (2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 9])
def test_nhwc_grad_weight_of_few_output_rows(rows, dtype):
    """The NHWC grad_weight of 1 to 9 output rows of one image (a slice a row: 1 to 9 slices) and 20
    channels (5 channel vectors x 3 filter rows: a block part empty), within the bar against float64
    and repeatable bit for bit; under a workspace limit of less than two slices' sums, one slice
    and no workspace."""
    x = torch.randn(1, 20, rows + 2, 13, device="cuda", dtype=torch.float64)
    w = torch.randn(20, 1, 3, 5, device="cuda", dtype=torch.float64) / 4
    gy = torch.randn(1, 20, rows, 11, device="cuda", dtype=torch.float64)
    ref = torch.nn.grad.conv2d_weight(x, w.shape, gy, 1, (0, 1), 1, 20)
    xs, gys = (t.to(dtype).contiguous(memory_format=torch.channels_last) for t in (x, gy))
    bar = 1e-5 if dtype == torch.float32 else 2.0 ** -7

    def grad_weight():
        wd = w.to(dtype).requires_grad_()
        y = torchconv.conv2d(xs, wd, None, 1, (0, 1), 1, 20, algorithm="direct")
        (gw,) = torch.autograd.grad(y, (wd,), gys)
        assert "grad_weight:depthwise-nhwc/" in torchconv.last_choice()
        return gw

    first = grad_weight()
    assert rel_err(first, ref) <= bar
    assert torch.equal(first, grad_weight())
    assert (torchconv.last_workspace_bytes() > 0) == (rows > 1)
    old = torchconv.get_workspace_limit()
    try:
        torchconv.set_workspace_limit(2 * 20 * 15 * 4 - 1)
        assert rel_err(grad_weight(), ref) <= bar
        assert torchconv.last_workspace_bytes() == 0
    finally:
        torchconv.set_workspace_limit(old)


# The weight in three layouts: as made, channels_last, and taps transposed in memory (neither).
WEIGHT_LAYOUTS = {
    "contiguous": lambda w: w.contiguous(),
    "channels_last": lambda w: w.contiguous(memory_format=torch.channels_last),
    "taps_transposed": lambda w: w.transpose(2, 3).contiguous().transpose(2, 3),
}


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", [
    (2, 16, 14, 13, 3, 3, 2, 1, 1, True),  # depthwise, stride 2: four grad_input phases
    (1, 24, 15, 14, 3, 3, 1, 1, 1, False, 4),  # groups of 4 x 4
    (2, 8, 12, 11, 5, 5, 2, 2, 1, True, 2),  # groups of 2 x 2, 5x5 stride 2
], ids=nhwc_id)
def test_nhwc_depthwise_filter_from_any_weight_layout_cached_while_frozen(shape, dtype):
    """The NHWC specialist re-lays the filter in float32 from the weight in its own layout (no
    contiguous copy: the same bits from every layout) and keeps it in the weight cache while a frozen
    weight is unchanged, so a repeated forward launches the convolution alone; an in-place write to
    the weight is seen; a strided grad_input's phases have their filters re-laid together (one
    entry, one kernel); a trainable weight is re-laid once a pass and never cached. The one kernel a
    frozen forward launches is the rows kernel for a 16-bit depthwise 3x3 and a 16-bit 3x3 of groups
    of 4 at stride 1 (every filter row's inputs loaded at once), the per-row kernel for float32 and
    for other groups."""
    x, w, b, kw = nhwc_case(shape, dtype)
    # 16-bit depthwise 3x3 and 5x5, and 16-bit groups of 4 at 3x3 stride 1, run the rows kernel
    depthwise = len(shape) == 10 and shape[4] == shape[5] in (3, 5)
    groups_of_4 = len(shape) == 11 and shape[10] == 4 and shape[4] == shape[5] == 3 and shape[6] == 1
    rows = dtype != torch.float32 and (depthwise or groups_of_4)
    kernel = "depthwise_nhwc_rows_kernel<" if rows else "depthwise_nhwc_kernel<"
    conv = lambda xi, wi: torchconv.conv2d(xi, wi, b, **kw, algorithm="direct")  # noqa: E731
    xg = x.detach().requires_grad_()
    y_ref = conv(x, w)
    gy = torch.randn_like(y_ref)
    (gx_ref,) = torch.autograd.grad(conv(xg, w.detach().requires_grad_()), (xg,), gy)
    for name, layout in WEIGHT_LAYOUTS.items():
        torchconv.clear_weight_cache()
        wi = layout(w.clone())  # its own storage: the in-place write below leaves w as it is
        assert torch.equal(wi, w) and not wi.requires_grad
        assert torch.equal(conv(x, wi), y_ref), name
        assert torchconv.last_choice().startswith("forward:depthwise-nhwc/")
        assert torchconv.weight_cache_size() == 1, name
        torchconv._C.set_poison_outputs(False)
        names, y = cuda_kernel_names(lambda: conv(x, wi))
        assert torch.equal(y, y_ref) and torchconv.weight_cache_size() == 1, name
        assert len(names) == 1 and kernel in next(iter(names)), (name, sorted(names))
        (gx,) = torch.autograd.grad(conv(xg, wi), (xg,), gy)
        assert torch.equal(gx, gx_ref), name
        assert torchconv.weight_cache_size() == 2, name  # the forward's filter and the phases' together
        with torch.no_grad():
            wi.mul_(-1)  # in place: the next call must see it
        assert torch.equal(conv(x, wi), conv(x, -w)), name
    torchconv.clear_weight_cache()
    trainable = WEIGHT_LAYOUTS["channels_last"](w.clone()).requires_grad_()
    assert torch.equal(conv(x, trainable), y_ref)
    launches, (gx,) = cuda_kernel_launches(lambda: torch.autograd.grad(conv(xg, trainable), (xg,), gy))
    assert torch.equal(gx, gx_ref)
    relayouts = [n for n in launches if "relayout_filter_kernel" in n]
    assert len(relayouts) == 2, launches  # the forward's and the grad_input's, whatever the phases
    assert torchconv.weight_cache_size() == 0


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", [
    (2, 16, 14, 14, 3, 3, 1, 1, 1, True),  # 3x3: the rows kernel (bf16), the per-row kernel (f32)
    (2, 16, 14, 13, 3, 3, 2, 1, 1, True),  # stride 2: four grad_input phases, one re-layout
    (2, 8, 9, 9, 13, 13, 1, 6, 1, False),  # 13x13: the column window
    (2, 20, 17, 18, 3, 3, 1, 2, 2, True),  # dilation 2: the per-product loads
    (2, 12, 11, 12, 3, 3, 1, 1, 1, False, 2),  # groups of 2 x 2
], ids=nhwc_id)
def test_nhwc_depthwise_trainable_filter_is_this_calls(shape, dtype):
    """A trainable weight's filter is re-laid on every call, and on sm_90 the convolution after it
    starts while the re-layout runs (a programmatic dependent launch that loads its inputs, then waits
    for the filter): each forward and grad_input must read this call's filter, never the one an
    earlier call left in the re-used buffer. Two weights alternate; every call equals, bit for bit,
    what the same weight gives frozen (its filter from the weight cache, the kernel launched alone)."""
    x, w, b, kw = nhwc_case(shape, dtype)
    xg = x.detach().requires_grad_()
    conv = lambda xi, wi: torchconv.conv2d(xi, wi, b, **kw, algorithm="direct")  # noqa: E731
    weights = [w, w.flip(0) * 2]
    gy = torch.randn_like(conv(x, w))
    refs = []
    for wi in weights:
        torchconv.clear_weight_cache()
        y = conv(x, wi)
        (gx,) = torch.autograd.grad(conv(xg, wi), (xg,), gy)
        assert torchconv.weight_cache_size() == 2  # frozen: both filters came from the cache
        refs.append((y, gx))
    assert not torch.equal(refs[0][0], refs[1][0])
    torchconv.clear_weight_cache()
    for _ in range(4):
        for wi, (y_ref, gx_ref) in zip(weights, refs):
            trainable = wi.clone().requires_grad_()
            y = conv(xg, trainable)
            assert torchconv.last_choice().startswith("forward:depthwise-nhwc/")
            (gx,) = torch.autograd.grad(y, (xg,), gy)
            assert torch.equal(y, y_ref) and torch.equal(gx, gx_ref)
    assert torchconv.weight_cache_size() == 0

@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_nhwc_depthwise_takes_strided_and_misaligned_inputs(dtype):
    """A channels_last view that is not dense, and a dense one whose channel vectors are not
    aligned, are copied once and give the same result as a dense input."""
    x, w, b, kw = nhwc_case((2, 16, 12, 11, 3, 3, 1, 1, 1, True), dtype)
    ref = torchconv.conv2d(x, w, b, **kw, algorithm="direct")
    wide = torch.randn(2, 16, 12, 15, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
    wide[..., 2:13] = x
    view = wide[..., 2:13]
    assert not view.is_contiguous(memory_format=torch.channels_last)
    flat = torch.empty(x.numel() + 1, device="cuda", dtype=dtype)[1:]
    shifted = flat.as_strided(x.shape, x.stride())
    shifted.copy_(x)
    assert shifted.data_ptr() % (4 * x.element_size()) != 0
    for other in (view, shifted):
        out = torchconv.conv2d(other, w, b, **kw, algorithm="direct")
        assert torchconv.last_choice().startswith("forward:depthwise-nhwc/")
        assert torch.equal(out, ref)


@needs_cuda
def test_nhwc_depthwise_declines_what_it_cannot_vectorize():
    """C not a multiple of 4, a channel multiplier, groups of 8, an NCHW input or a forced tile config
    go to the NCHW kernels (correct, in float32 for float16 inputs)."""
    cases = [
        ((2, 6, 9, 9), (6, 1, 3, 3), 6, torch.float16, True),  # 6 channels
        ((2, 8, 9, 9), (16, 1, 3, 3), 8, torch.float32, True),  # multiplier 2
        ((2, 16, 9, 9), (16, 8, 3, 3), 2, torch.float32, True),  # groups of 8 x 8
        ((2, 16, 9, 9), (16, 1, 3, 3), 16, torch.float16, False),  # NCHW
    ]
    for xs, ws, groups, dtype, channels_last in cases:
        x = torch.randn(xs, device="cuda", dtype=dtype)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        w = torch.randn(ws, device="cuda", dtype=dtype)
        out = torchconv.conv2d(x, w, None, 1, 1, 1, groups, algorithm="direct")
        assert "nhwc" not in torchconv.last_choice()
        ref = F.conv2d(x.double(), w.double(), None, 1, 1, 1, groups)
        assert rel_err(out, ref) < (1e-5 if dtype == torch.float32 else 2e-3)
    x = torch.randn(2, 16, 9, 9, device="cuda").contiguous(memory_format=torch.channels_last)
    w = torch.randn(16, 1, 3, 3, device="cuda")
    with using_config("direct", "wide"):
        torchconv.conv2d(x, w, None, 1, 1, 1, 16, algorithm="direct")
    assert "nhwc" not in torchconv.last_choice()
    with using_config("direct", "depthwise"):
        torchconv.conv2d(x, w, None, 1, 1, 1, 16, algorithm="direct")
    assert torchconv.last_choice().startswith("forward:depthwise-nhwc/")
