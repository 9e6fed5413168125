"""Direct-kernel specifics on CUDA (and, at the end, the CPU's depthwise forward). The float kernel
has two tile configs (wide: 64 x 16 outputs x 16 channels, one channel per barrier; small: 16 x 16 x
32, two channels per barrier), picked by a rule
(the larger estimated useful fraction of the GPU: small for small planes, grids short of the GPU and
strided layers) or forced with TORCHCONV_DIRECT_CONFIG / torchconv.set_config("direct", name), so each can be
timed and tested alone. Every
config must match F.conv2d forward and backward on every shape: filter sizes 1..13 (unrolled) and
others (run-time sizes), input rows loaded in 16-byte pieces (W a multiple of 4, any padding: the
column tiles shift so each starts aligned) or element by element (any other W, or a misaligned
input), C not a multiple of the channels staged per barrier, K off the 16 or 32 channels of a
tile, planes over several tiles, stride, dilation and groups. float64 runs its own config, and layers
with one filter per group (depthwise) a one-channel config.

grad_input runs the forward kernel on grad_output (filters rotated, C and K swapped); a strided layer
runs it once per output phase (iy mod stride, ix mod stride) with the taps that reach the phase, and
phases that no tap reaches are zero. Phase grids short of the GPU (under one block per two SMs)
gather per input pixel instead; torchconv.set_variant("direct", "phases" | "gather") forces either path. grad_weight
runs a tiled kernel over slices of the N*Ho*Wo reduction whose partial sums are added in a fixed order
(deterministic, within the workspace limit). Its tiles are 64 x 64 (float) or 32 x 32 (double)
filters x columns, where a column is an input channel (for up to 4 taps of one filter row: layers
with many channels per group) or a (channel, r, s) patch of the filter (few channels per group, such
as C = 3 first layers and depthwise, and strides of 13 and more along W, where a channels stage would
not fit shared memory); torchconv.last_choice() names it."""
import os
import subprocess
import sys

import pytest
import torch

import torchconv
from conftest import assert_backward_repeatable, assert_close_rel, baseline_build_env, check_forward_backward
from conftest import needs_cuda_build

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
CONFIGS = ("wide", "small")

# (N, C, K, H, W, R, S, stride, padding, dilation, groups, bias)
SHAPES = [
    (1, 5, 33, 20, 68, 3, 3, 1, 0, 1, 1, True),  # W % 4 == 0, no padding: 16-byte rows; C = 5: small's last stage is partial
    (2, 7, 18, 19, 132, 3, 3, 1, 1, 1, 1, False),  # padding 1: tiles start 3 columns left; 3 column tiles
    (1, 4, 16, 17, 36, 5, 5, 1, 2, 1, 1, True),  # padding 2: shift 2
    (1, 3, 20, 18, 40, 7, 7, 1, 3, 1, 1, True),  # padding 3: shift 1
    (2, 6, 12, 23, 29, 3, 3, 1, 1, 1, 1, True),  # W = 29: element loads
    (1, 9, 40, 33, 24, 1, 1, 1, 0, 1, 1, True),  # 1x1, rows over 2 tiles
    (1, 2, 17, 30, 44, 9, 9, 1, 4, 1, 1, False),  # 9x9
    (1, 3, 8, 25, 28, 11, 11, 1, 5, 1, 1, True),  # 11x11, K = 8 (half a tile)
    (1, 2, 24, 29, 31, 13, 13, 1, 6, 1, 1, True),  # 13x13, element loads
    (1, 1, 5, 12, 16, 3, 3, 1, 1, 1, 1, True),  # C = 1
    (2, 6, 10, 21, 20, 3, 3, 2, 1, 1, 1, True),  # stride 2: run-time path
    (1, 4, 6, 22, 24, 3, 3, 1, 2, 2, 1, False),  # dilation 2: run-time path
    (1, 5, 7, 15, 16, 4, 2, 1, (1, 0), 1, 1, True),  # non-square filter
    (2, 8, 12, 14, 16, 3, 3, 1, 1, 1, 4, True),  # groups 4
    (1, 64, 64, 40, 72, 3, 3, 1, 0, 1, 1, False),  # 64 channels, 4 filter tiles of wide, 2 of small
]


def shape_id(s):
    return "N{}C{}K{}H{}W{}R{}S{}s{}p{}d{}g{}b{:d}".format(*s).replace(" ", "")


@pytest.fixture
def forced_tile():
    """Forces a tile config for one test and restores the rule afterwards."""
    yield lambda name: torchconv.set_config("direct", name)
    torchconv.set_config("direct", "")


@needs_cuda
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_every_config_matches(shape, config, forced_tile):
    forced_tile(config)
    check_forward_backward("direct", shape, "cuda", torch.float32, f"{config} {shape_id(shape)}")
    assert f"forward:{config}/" in torchconv.last_choice()


@needs_cuda
@pytest.mark.parametrize("shape", SHAPES[::2], ids=shape_id)
def test_float64(shape):
    check_forward_backward("direct", shape, "cuda", torch.float64, f"f64 {shape_id(shape)}")


@needs_cuda
@pytest.mark.parametrize("config", CONFIGS)
def test_misaligned_input_takes_element_loads(config, forced_tile):
    """An input whose data starts off a 16-byte boundary (a view at storage offset 1) cannot take
    16-byte copies; the kernel falls back to element loads and stays exact."""
    forced_tile(config)
    storage = torch.randn(2 * 3 * 18 * 36 + 1, dtype=torch.float64)
    x = storage[1:].view(2, 3, 18, 36)
    w = torch.randn(10, 3, 3, 3, dtype=torch.float64)
    ref = torch.nn.functional.conv2d(x, w, None, 1, 1)
    xc = torch.empty(x.numel() + 1, device="cuda")[1:].view_as(x).copy_(x)
    assert xc.data_ptr() % 16 != 0 and xc.is_contiguous()
    out = torchconv.conv2d(xc, w.cuda().float(), None, 1, 1, algorithm="direct")
    assert_close_rel(out, ref, torch.float32, f"{config} misaligned")


@needs_cuda
@pytest.mark.parametrize("n, c, k, hw, r, stride, expected", [
    (1, 8, 16, 14, 3, 1, "small"),  # 14 x 14: one wide tile would be 81% idle
    (4, 8, 16, 224, 3, 1, "wide"),  # large planes, a grid of 224 wide blocks: wide does more per cycle
    (1, 8, 16, 224, 3, 1, "small"),  # the same at N = 1: 56 wide blocks fill a fifth of the GPU
    (2, 3, 64, 64, 7, 2, "small"),  # strided: the run-time path, where wide reads with bank conflicts
])
def test_rule(n, c, k, hw, r, stride, expected):
    x = torch.randn(n, c, hw, hw, device="cuda")
    torchconv.conv2d(x, torch.randn(k, c, r, r, device="cuda"), None, stride, r // 2, algorithm="direct")
    assert torchconv.last_choice() == f"forward:{expected}/splits=1"


@needs_cuda
def test_large_filter_takes_the_config_that_fits(forced_tile):
    """A 25x25 filter on a small plane: the rule would pick small, whose two 2-channel stages (345 KB)
    exceed shared memory, so wide (108 KB) runs; forcing small is a clear error."""
    shape = (1, 4, 24, 48, 44, 25, 25, 1, 12, 1, 1, True)  # 4 x 24: not a small group (the specialist's)
    check_forward_backward("direct", shape, "cuda", torch.float32, "25x25")
    assert torchconv.last_choice().startswith("forward:wide/")
    forced_tile("small")
    with pytest.raises(ValueError, match="shared memory"):
        torchconv.conv2d(torch.randn(1, 4, 48, 44, device="cuda"), torch.randn(24, 4, 25, 25, device="cuda"),
                         None, 1, 12, algorithm="direct")


@needs_cuda
def test_last_choice_names_each_pass():
    x = torch.randn(1, 8, 20, 20, device="cuda", requires_grad=True)
    out = torchconv.conv2d(x, torch.randn(16, 8, 3, 3, device="cuda"), None, 1, 1, algorithm="direct")
    out.sum().backward()
    assert torchconv.last_choice() == "forward:small/splits=1 grad_input:small/splits=1"


@needs_cuda_build
def test_unknown_tile_name_is_a_value_error():
    with pytest.raises(ValueError, match="must name a config of 'direct' \\('wide', 'small', 'depthwise', 'depthwise-unstaged', 'depthwise-plane'\\)"):
        torchconv.set_config("direct", "huge")
    assert torchconv.get_config("direct") == ""


@needs_cuda_build
def test_tile_from_environment():
    """TORCHCONV_DIRECT_CONFIG forces a config for the whole process (read once); a bad name is a
    ValueError naming the variable."""
    code = "import torchconv; print(torchconv.get_config('direct'))"
    env = lambda v: {**os.environ, "TORCHCONV_DIRECT_CONFIG": v}  # noqa: E731
    out = subprocess.run([sys.executable, "-c", code], env=env("small"), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "small"
    bad = subprocess.run([sys.executable, "-c", code], env=env("huge"), capture_output=True, text=True)
    assert bad.returncode != 0 and "ValueError: TORCHCONV_DIRECT_CONFIG must name a config of 'direct'" in bad.stderr


# One filter per group (depthwise and its strided and dilated forms) runs the depthwise specialist
# (test_depthwise.py); with a tile config forced, or where the specialist's tiles do not fit, it runs
# the tiled kernel's one-channel tile, 64 x 16 outputs per block, with the same loaders (16-byte rows
# for unit-stride 3x3).
DEPTHWISE_SHAPES = [
    (2, 8, 8, 14, 16, 3, 3, 1, 1, 1, 8, True),  # 3x3: unrolled, 16-byte rows (shift 3)
    (1, 6, 6, 13, 70, 3, 3, 1, 1, 1, 6, False),  # W = 70: element loads, 2 column tiles
    (1, 6, 6, 13, 12, 5, 5, 1, 2, 1, 6, False),  # 5x5: run-time path
    (1, 4, 4, 15, 17, 3, 3, 2, 1, 1, 4, True),  # stride 2: grad_input per phase
    (2, 5, 5, 11, 9, 3, 3, 1, 2, 2, 5, True),  # dilation 2
]


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", DEPTHWISE_SHAPES, ids=shape_id)
def test_depthwise_tile(shape, dtype):
    torchconv.set_config("direct", "wide")
    try:
        check_forward_backward("direct", shape, "cuda", dtype, f"depthwise {shape_id(shape)}")
    finally:
        torchconv.set_config("direct", "")
    assert torchconv.last_choice().startswith("forward:depthwise-tile/")


# Strided grad_input: one forward launch per phase, writing every stride-th pixel.
GRAD_INPUT_SHAPES = [
    (2, 6, 10, 21, 20, 3, 3, 2, 1, 1, 1, True),  # 3x3 stride 2: phases of 1x1, 1x2, 2x1 and 2x2 taps
    (1, 3, 16, 29, 31, 7, 7, 2, 3, 1, 1, False),  # 7x7 stride 2 (a first layer): 3x3 to 4x4 taps; odd H, W
    (1, 8, 12, 17, 16, 1, 1, 2, 0, 1, 1, True),  # 1x1 stride 2: three of the four phases receive nothing
    (1, 5, 7, 23, 19, 3, 3, 3, 1, 2, 1, True),  # stride 3, dilation 2: one tap per axis in each phase
    (1, 4, 6, 20, 22, 3, 3, 2, 2, 2, 1, True),  # stride 2, dilation 2: all taps in one phase per axis
    (2, 4, 6, 13, 14, 3, 3, 2, 4, 1, 1, False),  # padding past the filter's reach: negative padding per phase
    (1, 6, 9, 18, 22, 5, 3, (2, 3), (2, 1), 1, 3, True),  # a stride per axis, groups
    (1, 64, 64, 28, 36, 3, 3, 2, 1, 1, 1, False),  # 64 channels: whole filter tiles, 16-byte rows
]


@pytest.fixture
def forced_grad_input():
    """Forces the strided grad_input path for one test and restores the rule afterwards."""
    yield lambda name: torchconv.set_variant("direct", name)
    torchconv.set_variant("direct", "auto")


@needs_cuda
@pytest.mark.parametrize("path", ["phases", "gather"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", GRAD_INPUT_SHAPES, ids=shape_id)
def test_strided_grad_input(shape, dtype, path, forced_grad_input):
    forced_grad_input(path)
    check_forward_backward("direct", shape, "cuda", dtype, f"strided grad_input {path} {shape_id(shape)}")
    expected = ("gather",) if path == "gather" else ("wide", "small") if dtype == torch.float32 else ("f64",)
    n, c, k, *_, groups, _ = shape
    if path == "phases" and torchconv._C.small_groups(c // groups, k // groups):
        expected = ("depthwise",)  # small groups: the specialist runs the phases
    assert any(f"grad_input:{name}/" in torchconv.last_choice() for name in expected)


@needs_cuda
@pytest.mark.parametrize("n, c, hw, by_phases", [
    (1, 256, 28, False),  # 14 x 14 phases of 256 channels: 8 blocks each, the gather fills the GPU
    (1, 3, 224, False),  # 112 x 112 phases of 3 channels: 49 blocks
    (32, 128, 28, True),  # 14 x 14 phases of 128 channels at N = 32: 128 blocks
    (8, 16, 200, True),  # 100 x 100 phases: 392 blocks
])
def test_strided_grad_input_rule(n, c, hw, by_phases):
    x = torch.randn(n, c, hw, hw, device="cuda", requires_grad=True)
    torchconv.conv2d(x, torch.randn(c, c, 3, 3, device="cuda"), None, 2, 1, algorithm="direct").sum().backward()
    assert ("grad_input:gather/" not in torchconv.last_choice()) == by_phases


def test_unknown_grad_input_path_is_a_value_error():
    with pytest.raises(ValueError, match="variant must be one of 'auto', 'phases', 'gather'"):
        torchconv.set_variant("direct", "scatter")
    assert torchconv.get_variant("direct") == "auto"


# (shape, the columns grad_weight takes in float)
WEIGHT_GRAD_SHAPES = [
    ((2, 70, 130, 12, 11, 3, 3, 1, 1, 1, 1, False), "channels"),  # 2 x 3 partial filter x channel tiles
    ((1, 40, 9, 40, 37, 7, 7, 2, 3, 1, 1, True), "channels"),  # 7 taps per row: chunks of 4 and 3; stride 2
    ((1, 64, 6, 30, 33, 13, 13, 1, 6, 1, 1, False), "channels"),  # 13 taps per row: 4 chunks
    ((4, 16, 24, 33, 70, 1, 1, 1, 0, 1, 1, True), "channels"),  # 1x1: a long reduction in many slices
    ((1, 36, 8, 19, 23, 3, 5, 1, (1, 2), (2, 3), 1, True), "channels"),  # dilation: wider staged input rows
    ((1, 128, 66, 9, 10, 3, 3, 1, 1, 1, 2, True), "channels"),  # groups of 64 channels
    ((2, 3, 70, 33, 35, 3, 3, 1, 1, 1, 1, True), "patches"),  # C = 3: 27 columns of a 64 tile; 2 filter tiles
    ((1, 16, 20, 18, 21, 5, 5, 1, 2, 1, 1, False), "patches"),  # 400 columns: 2 tiles of 4 x 64, the last partial
    ((1, 2, 6, 17, 19, 7, 7, 2, 3, 1, 1, True), "patches"),  # stride 2, 98 columns in 2 sub-tiles
    ((1, 6, 8, 19, 23, 3, 5, 1, (1, 2), (2, 3), 1, True), "patches"),  # dilation
    ((2, 12, 18, 15, 14, 3, 3, 1, 1, 1, 3, True), "patches"),  # groups of 4 channels
    ((1, 4, 5, 20, 300, 3, 3, (1, 13), 1, 1, 1, True), "patches"),  # stride 13 along W: channels would not fit
]


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape, columns", WEIGHT_GRAD_SHAPES, ids=[shape_id(s) for s, _ in WEIGHT_GRAD_SHAPES])
def test_weight_grad(shape, columns, dtype):
    # The tiled grad_weight; small groups would take the depthwise specialist (test_depthwise.py)
    # unless a tile config is forced.
    torchconv.set_config("direct", "wide")
    try:
        check_forward_backward("direct", shape, "cuda", dtype, f"weight grad {shape_id(shape)}")
    finally:
        torchconv.set_config("direct", "")
    if dtype == torch.float32:
        assert f"grad_weight:{columns}/" in torchconv.last_choice()


@needs_cuda
@pytest.mark.parametrize("index", [3, 0, 6], ids=["1x1", "3x3", "patches"])
def test_weight_grad_within_workspace_limit(index):
    """A workspace limit below two slices of partial sums gives one slice, written in place in weight
    order (several channels slices are written tap-major, and the slice sum puts them back)."""
    shape = WEIGHT_GRAD_SHAPES[index][0]
    old = torchconv.get_workspace_limit()
    try:
        check_forward_backward("direct", shape, "cuda", torch.float32, "several slices")
        assert torchconv.last_workspace_bytes() > 2048
        assert not torchconv.last_choice().endswith("/splits=1")
        torchconv.set_workspace_limit(2048)
        check_forward_backward("direct", shape, "cuda", torch.float32, "one slice")
        assert torchconv.last_workspace_bytes() == 0
        assert torchconv.last_choice().endswith("/splits=1")
    finally:
        torchconv.set_workspace_limit(old)


@needs_cuda
@pytest.mark.parametrize("stride", [1, 2])
def test_backward_is_repeatable(stride):
    assert_backward_repeatable("direct", stride)


@needs_cuda
def test_empty_batch_backward():
    x = torch.randn(0, 4, 9, 8, device="cuda", requires_grad=True)
    w = torch.randn(6, 4, 3, 3, device="cuda", requires_grad=True)
    gx, gw = torch.autograd.grad(torchconv.conv2d(x, w, None, 1, 1, algorithm="direct").sum(), (x, w))
    assert gx.shape == x.shape and torch.equal(gw, torch.zeros_like(w))


# The CPU's depthwise forward of 3x3, 5x5 and 7x7 filters at stride 1 or 2 sums each output's taps at
# once: along rows (NCHW data, outputs more than 14 wide), or along the channels in blocks of 16
# (channels_last data, and NCHW planes up to 14 wide, transposed): rows and columns of border only
# (padding as large as the filter and larger), planes narrower or shorter than the filter, a one-pixel
# plane, H != W, odd sizes at stride 2, channel counts off the blocks (20, 33, 40) and under one block,
# bands of rows cut by the plane's end, bias and none; each in NCHW and channels_last (returned in the
# layout PyTorch returns). Other depthwise filters, strides and dilations take the tiled loop. Each
# against float64.
CPU_DEPTHWISE_SHAPES = [
    (2, 8, 8, 13, 17, 3, 3, 1, 1, 1, 8, True),
    (2, 3, 3, 9, 30, 7, 7, 1, 3, 1, 3, True),
    (1, 2, 2, 2, 19, 3, 3, 1, 4, 1, 2, True),  # padding past the filter: rows of border only
    (2, 6, 6, 18, 35, 5, 5, 2, 2, 1, 6, False),  # stride 2, odd sizes
    (1, 4, 4, 15, 33, 3, 3, 2, 1, 1, 4, True),
    (1, 4, 4, 5, 4, 5, 5, 1, 2, 1, 4, False),
    (2, 5, 5, 7, 5, 5, 5, 1, 0, 1, 5, True),  # no padding: one output column
    (3, 20, 20, 9, 8, 3, 3, 1, 0, 1, 20, False),
    (1, 7, 7, 3, 3, 7, 7, 1, 5, 1, 7, True),  # a plane smaller than the filter
    (1, 3, 3, 1, 1, 3, 3, 1, 1, 1, 3, True),  # one pixel
    (2, 40, 40, 14, 13, 7, 7, 1, 3, 1, 40, True),
    (1, 33, 33, 11, 16, 7, 7, 2, 3, 1, 33, True),
    (2, 24, 24, 13, 11, 7, 7, 2, 3, 1, 24, True),  # NCHW planes under 15 wide, strided: along the channels
    (1, 2, 2, 4, 6, 3, 3, 2, 0, 1, 2, True),  # stride 2, no padding
    (2, 4, 4, 11, 12, 4, 4, 1, 2, 1, 4, True),  # 4x4: the tiled loop
    (1, 4, 4, 13, 14, 3, 3, 3, 1, 1, 4, True),  # stride 3: the tiled loop
    (1, 5, 5, 6, 37, 3, 3, 1, 1, 1, 5, False),  # NCHW 3x3 planes over 28 wide: grad_weight by the tiles
    (2, 5, 5, 11, 9, 3, 3, 1, 2, 2, 5, True),  # dilation 2: the tiled loop
]


def cpu_depthwise_case(shape, layout):
    """x (in the layout), weight and bias (or None) of a CPU_DEPTHWISE_SHAPES or CPU_GROUPED_SHAPES row,
    float64."""
    n, c, k, h, w, r, s, stride, padding, dilation, groups, bias = shape
    torch.manual_seed(0)
    x = torch.randn(n, c, h, w, dtype=torch.float64)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c // groups, r, s, dtype=torch.float64)
    return x, wt, torch.randn(k, dtype=torch.float64) if bias else None


def assert_same_layout(out, ref):
    assert out.is_contiguous(memory_format=torch.channels_last) == ref.is_contiguous(memory_format=torch.channels_last)
    assert out.is_contiguous() == ref.is_contiguous()


def over_cpu_layouts_and_dtypes(test):
    """`test` in NCHW and channels_last, float32 and float64 (the dtypes the CPU kernels compute)."""
    test = pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])(test)
    return pytest.mark.parametrize("layout", ["nchw", "channels_last"])(test)


@over_cpu_layouts_and_dtypes
@pytest.mark.parametrize("shape", CPU_DEPTHWISE_SHAPES, ids=shape_id)
def test_cpu_depthwise_forward(shape, dtype, layout):
    x, wt, b = cpu_depthwise_case(shape, layout)
    conv = shape[7:11]  # stride, padding, dilation, groups
    out = torchconv.conv2d(x.to(dtype), wt.to(dtype), b.to(dtype) if b is not None else None, *conv, algorithm="direct")
    ref = torch.nn.functional.conv2d(x, wt, b, *conv)
    assert_close_rel(out, ref, dtype, shape_id(shape))
    assert_same_layout(out, ref)


# A stride-1 depthwise layer's grad_input on the CPU runs the depthwise forward on grad_output (the
# filter turned half a turn, the padding's complement); the other layers the forward takes along the
# channels (channels_last, NCHW planes up to 14 wide) gather theirs along the channels; the rest the
# scatter per input plane.
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("shape", CPU_DEPTHWISE_SHAPES, ids=shape_id)
def test_cpu_depthwise_grad_input(shape, layout):
    x, wt, _ = cpu_depthwise_case(shape, layout)
    conv = shape[7:11]  # stride, padding, dilation, groups
    xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = torchconv.conv2d(xg, wt, None, *conv, algorithm="direct")
    gy = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, (xg,), gy)
    (ref,) = torch.autograd.grad(torch.nn.functional.conv2d(xr, wt, None, *conv), (xr,), gy)
    assert_close_rel(gx, ref, torch.float64, shape_id(shape))
    assert_same_layout(gx, ref)


# A depthwise layer's grad_weight on the CPU runs along the channels (blocks of 16, the remainder
# apart) where its forward does (channels_last inputs, and NCHW planes up to 14 outputs wide), and on
# NCHW planes up to 28 wide or with 5x5 and 7x7 filters at any width, in a fixed number of parts of the
# output rows added in order; the tiles elsewhere (3x3 filters on wider NCHW planes, other filters).
@over_cpu_layouts_and_dtypes
@pytest.mark.parametrize("shape", CPU_DEPTHWISE_SHAPES, ids=shape_id)
def test_cpu_depthwise_grad_weight(shape, dtype, layout):
    x, wt, _ = cpu_depthwise_case(shape, layout)
    conv = shape[7:11]  # stride, padding, dilation, groups
    wg, wr = wt.to(dtype).requires_grad_(), wt.clone().requires_grad_()
    out = torchconv.conv2d(x.to(dtype), wg, None, *conv, algorithm="direct")
    gy = torch.randn_like(out)
    (gw,) = torch.autograd.grad(out, (wg,), gy)
    (ref,) = torch.autograd.grad(torch.nn.functional.conv2d(x, wr, None, *conv), (wr,), gy.double())
    assert_close_rel(gw, ref, dtype, shape_id(shape))


def test_cpu_depthwise_grad_weight_bits_do_not_depend_on_the_thread_count():
    """The parts of the output rows are a fixed number, whatever the threads: one thread gives the
    bits of several."""
    x, wt, _ = cpu_depthwise_case((3, 40, 40, 14, 13, 3, 3, 1, 1, 1, 40, False), "channels_last")
    gy = torch.randn(3, 40, 14, 13, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    grad_weight = lambda: torch.ops.torchconv.conv2d_direct_backward(  # noqa: E731
        gy, x, wt, [1, 1], [1, 1], [1, 1], 40, [False, True, False])[1]
    threads = torch.get_num_threads()
    many = grad_weight()
    try:
        torch.set_num_threads(1)
        one = grad_weight()
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


# Grouped layers of up to 64 channels and filters a group on planes up to 14 outputs wide run on the
# CPU along the channels (csrc/cpu/grouped_nhwc.h): a pixel's filters of a group in blocks of four, two
# and one register-wide vectors, a half vector and single filters (filters per group 1, 2, 3, 4, 8, 13,
# 20, 32, 64), channels per group from 1 (a channel multiplier) to 64, borders, H != W, strides 1-3,
# dilation, padding past the filter, non-square filters, batch 1 and more; forward, grad_input (at
# stride 1 the same kernel on grad_output, each group's filters swapped and turned half a turn; strided
# or padded past the filter, gathered: each input pixel sums the outputs its taps reach) and
# grad_weight (fixed parts of the rows), in NCHW and channels_last, each against float64. Wider planes
# run there too from channels_last inputs with 8 to 16 filters and 4 to 16 channels a group (the NCHW
# ones on the tiles). The last rows lie past the gate (4 filters a group 15 wide, 24 a group 17 wide,
# 65 channels a group): the tiles run them.
CPU_GROUPED_SHAPES = [
    (2, 8, 8, 9, 7, 3, 3, 1, 1, 1, 2, True),
    (1, 12, 18, 11, 5, 3, 1, 1, (1, 0), 1, 6, False),  # 3 filters a group: the remainder only
    (3, 64, 64, 7, 7, 3, 3, 1, 1, 1, 2, True),  # 32 a group: two whole blocks
    (2, 6, 4, 13, 10, 5, 3, 2, 2, 1, 2, False),  # stride 2: grad_input gathered
    (2, 20, 40, 8, 9, 3, 3, 1, 2, 2, 5, True),  # dilation 2, 8 filters a group
    (1, 8, 4, 5, 6, 1, 1, 1, 0, 1, 4, False),  # 1x1, one filter a group
    (2, 66, 26, 6, 5, 3, 3, 1, 0, 1, 2, True),  # 33 channels, 13 filters a group: 8 + 4 + 1
    (2, 10, 20, 7, 7, 3, 3, 1, 1, 1, 10, False),  # a channel multiplier of 2
    (2, 34, 34, 6, 6, 2, 2, 3, 1, 1, 17, True),  # stride 3, even filter
    (1, 128, 128, 3, 4, 3, 3, 1, 4, 1, 2, True),  # 64 a group; padding past the filter
    (2, 40, 80, 14, 14, 3, 3, 1, 1, 1, 4, False),  # 10 channels, 20 filters a group: 16 + 4
    (2, 24, 24, 9, 17, 3, 3, 1, 1, 1, 3, False),  # 8 a group, 17 wide: channels_last along the channels
    (1, 32, 32, 6, 19, 3, 3, 1, 1, 1, 2, True),  # 16 a group, 19 wide: the same
    (1, 16, 16, 6, 31, 3, 3, 2, 1, 1, 2, True),  # 8 a group, 16 wide, stride 2: the same, grad_input gathered
    (2, 16, 16, 15, 15, 3, 3, 1, 1, 1, 4, True),  # 4 filters a group, 15 wide: past the gate
    (1, 48, 48, 5, 17, 3, 3, 1, 1, 1, 2, False),  # 24 a group, 17 wide: past the gate
    (1, 130, 130, 5, 5, 3, 3, 1, 1, 1, 2, False),  # 65 a group: past the gate
]


@over_cpu_layouts_and_dtypes
@pytest.mark.parametrize("shape", CPU_GROUPED_SHAPES, ids=shape_id)
def test_cpu_grouped(shape, dtype, layout):
    x, wt, b = cpu_depthwise_case(shape, layout)
    conv = shape[7:11]  # stride, padding, dilation, groups
    x, wt, b = (t.to(dtype).requires_grad_() if t is not None else None for t in (x, wt, b))
    out = torchconv.conv2d(x, wt, b, *conv, algorithm="direct")
    gy = torch.randn_like(out)
    grads = torch.autograd.grad(out, (x, wt), gy)
    with torch.no_grad():
        x64, w64 = x.double().requires_grad_(), wt.double().requires_grad_()
    ref = torch.nn.functional.conv2d(x64, w64, None if b is None else b.double(), *conv)
    refs = torch.autograd.grad(ref, (x64, w64), gy.double())
    for got, want, what in zip((out,) + grads, (ref,) + refs, ("forward", "grad_input", "grad_weight")):
        assert_close_rel(got, want, dtype, f"{shape_id(shape)} {what}")
        assert_same_layout(got, want)


@pytest.mark.parametrize("shape", [CPU_DEPTHWISE_SHAPES[0], CPU_GROUPED_SHAPES[0]], ids=["depthwise", "grouped"])
def test_cpu_filters_re_laid_once_for_a_frozen_weight(shape):
    """The CPU kernels along the channels read their filters re-laid: a frozen weight's (and any weight's
    in inference mode) stay in the weight cache until the weight changes; a trainable weight's, and the
    turned filters a stride-1 grad_input runs the forward with, never go in."""
    x, w, b = cpu_depthwise_case(shape, "channels_last")
    conv = lambda xi, wi: torchconv.conv2d(xi, wi, b, *shape[7:11], algorithm="direct")  # noqa: E731
    ref = lambda wi: torch.nn.functional.conv2d(x, wi, b, *shape[7:11])  # noqa: E731
    torchconv.clear_weight_cache()
    frozen = w.clone()
    for _ in range(2):
        assert_close_rel(conv(x, frozen), ref(w), torch.float64, "frozen")
        assert torchconv.weight_cache_size() == 1
    with torch.no_grad():
        frozen.mul_(-1)  # in place: the next call must see it
    assert_close_rel(conv(x, frozen), ref(frozen), torch.float64, "frozen, written in place")
    xg = x.clone().requires_grad_()
    out = conv(xg, frozen)
    (gx,) = torch.autograd.grad(out, (xg,), torch.ones_like(out))
    xr = x.clone().requires_grad_()
    out_ref = torch.nn.functional.conv2d(xr, frozen, b, *shape[7:11])
    (gx_ref,) = torch.autograd.grad(out_ref, (xr,), torch.ones_like(out))
    assert_close_rel(gx, gx_ref, torch.float64, "grad_input")
    assert torchconv.weight_cache_size() == 1
    torchconv.clear_weight_cache()
    trainable = w.clone().requires_grad_()
    assert_close_rel(conv(x, trainable), ref(w), torch.float64, "trainable")
    assert torchconv.weight_cache_size() == 0
    with torch.inference_mode():
        assert_close_rel(conv(x, trainable), ref(w), torch.float64, "inference mode")
    assert torchconv.weight_cache_size() == 1
    torchconv.clear_weight_cache()


def test_cpu_baseline_build():
    """The depthwise kernels (forwards along the rows and along the channels, grad_weight along the
    channels) and the grouped kernels are built for the x86-64 baseline and for AVX2 (the grouped ones
    with FMA), the second run where the CPU has both; TORCHCONV_CPU_BASELINE=1 runs the first, here on
    the same cases."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                          "(test_cpu_grouped or test_cpu_depthwise) and not same_bits"], env=baseline_build_env(),
                         capture_output=True, text=True)
    cases = 4 * len(CPU_GROUPED_SHAPES) + (4 + 2 + 4) * len(CPU_DEPTHWISE_SHAPES) + 1
    assert run.returncode == 0 and f"{cases} passed" in run.stdout, run.stdout[-2000:]


DEPTHWISE_OUTPUTS = """
import sys, torch, torchconv
from test_direct import CPU_DEPTHWISE_SHAPES, cpu_depthwise_case
outs = []
for shape in CPU_DEPTHWISE_SHAPES:
    for layout in ("nchw", "channels_last"):
        x, w, b = cpu_depthwise_case(shape, layout)
        for dtype in (torch.float32, torch.float64):
            xd, wd = x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
            y = torchconv.conv2d(xd, wd, None if b is None else b.to(dtype), *shape[7:11], algorithm="direct")
            outs += [y.detach(), *torch.autograd.grad(y, (xd, wd), torch.ones_like(y))]
torch.save(outs, sys.argv[1])
"""


def test_cpu_depthwise_builds_give_the_same_bits(tmp_path):
    """Both builds of the depthwise kernels add each product apart (no FMA), in the same order: the
    baseline build's outputs and gradients are the AVX2 build's, bit for bit."""
    tests = os.path.dirname(os.path.abspath(__file__))
    for name, env in (("default", {k: v for k, v in os.environ.items() if k != "TORCHCONV_CPU_BASELINE"}),
                      ("baseline", baseline_build_env())):
        subprocess.run([sys.executable, "-c", DEPTHWISE_OUTPUTS, str(tmp_path / name)], env=env, cwd=tests,
                       check=True)
    default, baseline = torch.load(tmp_path / "default"), torch.load(tmp_path / "baseline")
    assert len(default) == 12 * len(CPU_DEPTHWISE_SHAPES)
    assert all(torch.equal(a, b) for a, b in zip(default, baseline))


def test_auto_takes_direct_for_grouped_layers_on_the_cpu():
    """On the CPU, ResNeXt's and RegNet's grouped layers 7 and 14 wide go to direct's kernels along the
    channels, and so do wider channels_last layers of 8 to 16 filters and 4 to 16 channels a group;
    layers of at most 4 channels a group go to its tiles at any width; wider NCHW layers of more
    channels a group, wider layers of 24 or more a group, and groups of more than 64 channels, do
    not."""
    def pick(c, hw, groups, stride=1, layout=torch.contiguous_format):
        x = torch.empty(8, c, hw, hw).contiguous(memory_format=layout)
        return torchconv.selection.select_algorithm(x, torch.empty(c, c // groups, 3, 3), (stride, stride), (1, 1),
                                                    groups, (1, 1))
    assert pick(1024, 7, 32) == "direct" and pick(512, 14, 32) == "direct" and pick(440, 7, 55) == "direct"
    assert pick(128, 56, 32) == "direct" and pick(256, 56, 64, 2) == "direct" and pick(64, 28, 32) == "direct"
    assert pick(256, 28, 32) != "direct" and pick(48, 56, 6) != "direct" and pick(256, 7, 2) != "direct"
    cl = torch.channels_last
    assert pick(256, 28, 32, layout=cl) == "direct" and pick(48, 56, 6, layout=cl) == "direct"
    assert pick(512, 28, 32, layout=cl) == "direct" and pick(512, 56, 32, 2, layout=cl) == "direct"
    assert pick(192, 28, 8, layout=cl) != "direct" and pick(256, 28, 2, layout=cl) != "direct"
    grouped = torchconv._C.cpu_grouped  # groups, channels and filters a group, output width, channels_last
    assert grouped(32, 8, 8, 28, True) and not grouped(32, 8, 8, 28, False) and grouped(32, 8, 8, 14, False)
    assert not grouped(32, 8, 4, 28, True) and not grouped(8, 24, 24, 28, True)
    assert grouped(32, 4, 8, 56, True) and not grouped(32, 1, 8, 56, True)  # not a channel multiplier
