"""The direct algorithm's depthwise / small-group specialist (csrc/cuda/direct/depthwise_kernels.cuh).

It runs every launch whose groups are small -- at most 16 channels and 16 filters per group, 64
pairs: depthwise with any channel multiplier, grouped convolutions such as ResNeXt's -- forward,
grad_input (the same kernel with the flipped filter, one launch per phase when strided) and
grad_weight (per-block partial sums added in a fixed order). Kernel sizes from 1x1 to 51x51,
rectangular, stride 1 and 2, dilation, any padding, any H and W, batch 1 and more; float32 and
float64. Every case compares the output and the three gradients with F.conv2d in float64."""
import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import assert_close_rel, check_forward_backward

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


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_depthwise_matches_float64(shape, dtype):
    check_forward_backward("direct", shape, "cuda", dtype, f"depthwise {shape_id(shape)}")
    choice = torchconv.last_choice()
    if specialist_takes(shape):
        # grad_input of a strided layer with few blocks may take the per-pixel gather instead.
        assert choice.startswith("forward:depthwise/") and "grad_weight:depthwise/" in choice, choice
    else:
        assert "depthwise/" not in choice.split()[0], choice


@needs_cuda
def test_grad_input_runs_on_the_specialist():
    shape = (4, 32, 32, 28, 28, 7, 7, 1, 3, 1, 32, False)
    check_forward_backward("direct", shape, "cuda", torch.float32, "grad_input")
    assert "grad_input:depthwise/" in torchconv.last_choice()


@needs_cuda
def test_padding_rows_are_skipped_not_read_out_of_bounds():
    """A 27x27 filter on a 3x3 plane (most taps read the padding) stays exact."""
    check_forward_backward("direct", (2, 4, 4, 3, 3, 27, 27, 1, 13, 1, 4, True), "cuda", torch.float64, "tiny plane")


@needs_cuda
@pytest.mark.parametrize("stride", [1, 2])
def test_backward_is_deterministic(stride):
    """grad_weight sums its partial tiles in a fixed order: two runs are bitwise equal."""
    x = torch.randn(8, 64, 33, 31, device="cuda", requires_grad=True)
    w = torch.randn(64, 1, 7, 7, device="cuda", requires_grad=True)
    out = torchconv.conv2d(x, w, None, stride, 3, 1, 64, algorithm="direct")
    gy = torch.randn_like(out)
    first = torch.autograd.grad(out, (x, w), gy)
    second = torch.autograd.grad(torchconv.conv2d(x, w, None, stride, 3, 1, 64, algorithm="direct"), (x, w), gy)
    assert "grad_weight:depthwise/" in torchconv.last_choice()
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@needs_cuda
def test_forced_specialist_on_a_wide_group_is_a_value_error():
    x = torch.randn(1, 32, 8, 8, device="cuda")
    w = torch.randn(16, 32, 3, 3, device="cuda")
    torchconv.set_config("direct", "depthwise")
    try:
        with pytest.raises(ValueError, match="forced config 'depthwise'"):
            torchconv.conv2d(x, w, None, 1, 1, algorithm="direct")
    finally:
        torchconv.set_config("direct", "")


@needs_cuda
def test_forced_tile_config_bypasses_the_specialist():
    """Forcing a tile config runs the tiled kernels on a depthwise layer (so both can be timed)."""
    x = torch.randn(2, 16, 12, 12, device="cuda", dtype=torch.float64)
    w = torch.randn(16, 1, 3, 3, device="cuda", dtype=torch.float64)
    ref = F.conv2d(x, w, None, 1, 1, 1, 16)
    torchconv.set_config("direct", "wide")
    try:
        out = torchconv.conv2d(x, w, None, 1, 1, 1, 16, algorithm="direct")
    finally:
        torchconv.set_config("direct", "")
    assert not torchconv.last_choice().startswith("forward:depthwise/")
    assert_close_rel(out, ref, torch.float64, "forced wide")


@needs_cuda
def test_auto_takes_direct_for_depthwise():
    x = torch.randn(8, 96, 28, 28, device="cuda")
    w = torch.randn(96, 1, 7, 7, device="cuda")
    assert torchconv.select_algorithm(x, w, 1, 1, 96, 3) == "direct"
    x, w = torch.randn(8, 96, 28, 28, device="cuda"), torch.randn(96, 96, 7, 7, device="cuda")
    assert torchconv.select_algorithm(x, w, 1, 1, 1, 3) != "direct"
