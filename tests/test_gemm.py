"""Unrolled-GEMM specifics. On CUDA two variants compute the same convolution: 'implicit' (the
default: the GEMM gathers the unrolled matrix from the input while loading its tiles; a 1x1
stride-1 unpadded layer copies 16-byte words of the input when H*W allows) and 'explicit' (an
unroll kernel writes the matrix for a chunk of columns into a workspace bounded by the workspace
limit, then the GEMM reads it). Both must match F.conv2d forward and backward (grad_input through
the transposed gather, once per output phase for strided layers; grad_weight through the split
reduction over N*Ho*Wo) on every shape
F.conv2d takes: any filter size, stride, padding, dilation, groups, C and K off the tiles, H != W,
batch 1 and more, in float32 and float64. The variant API is tested here too."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import (assert_backward_repeatable, assert_close_rel, baseline_build_env, cuda_kernel_launches,
                      using_variant)
from conftest import check_forward_backward as conftest_check

VARIANTS = torchconv.variants("gemm")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

# (N, C, K, H, W, R, S, stride, padding, dilation, groups, bias)
SHAPES = [
    (2, 64, 96, 14, 14, 1, 1, 1, 0, 1, 1, True),  # 1x1, H*W = 196 (a multiple of 4): 16-byte input copies
    (3, 37, 41, 7, 7, 1, 1, 1, 0, 1, 1, False),  # 1x1, H*W = 49: element copies; C and K off the tiles
    (1, 130, 200, 9, 11, 1, 1, 2, 0, 1, 1, True),  # 1x1 stride 2: gathered; K over one 128-row tile
    (2, 16, 24, 17, 13, 3, 3, 1, 1, 1, 1, True),  # 3x3, H != W, prime sizes
    (1, 24, 40, 19, 23, 3, 3, 2, 1, 1, 1, False),  # 3x3 stride 2: grad_input gathers only even positions
    (2, 3, 64, 31, 29, 7, 7, 2, 3, 1, 1, True),  # 7x7 stride 2 stem (runtime filter size)
    (1, 12, 20, 16, 15, 3, 5, 1, (2, 1), (2, 1), 1, True),  # non-square filter, dilation, asymmetric padding
    (2, 8, 12, 10, 9, 3, 3, (2, 1), 2, 1, 4, True),  # groups, asymmetric stride, padding 2
    (2, 16, 16, 12, 12, 3, 3, 1, 1, 1, 16, False),  # depthwise
    (4, 5, 3, 6, 5, 2, 2, 1, 0, 1, 1, True),  # even filter, K = 3
    (1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, False),  # one pixel
    # Strided grad_input runs once per output phase with the taps that reach it:
    (2, 6, 10, 13, 12, 3, 3, 2, 2, 2, 1, True),  # stride 2, dilation 2: odd phases receive nothing (zero)
    (1, 5, 7, 17, 16, 5, 5, 3, 1, 1, 1, False),  # stride 3, 5x5: 1-2 taps per phase and axis
    (2, 4, 6, 10, 11, 1, 1, 3, 0, 1, 1, True),  # 1x1 stride 3: 8 of 9 phases are zero
    (1, 3, 8, 35, 33, 11, 11, 4, 2, 1, 1, True),  # 11x11 stride 4: 121 taps forward (general gather), 3x3 per phase
]


def shape_id(s):
    return "N{}C{}K{}H{}W{}R{}S{}s{}p{}d{}g{}b{:d}".format(*s).replace(" ", "")


@pytest.fixture(params=VARIANTS)
def variant(request):
    with using_variant("gemm", request.param) as v:
        yield v


def check_forward_backward(shape, device, dtype, what):
    conftest_check("gemm", shape, device, dtype, what)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_cuda_variants_forward_backward(shape, dtype, variant):
    check_forward_backward(shape, "cuda", dtype, f"{variant} {shape_id(shape)}")


@needs_cuda
@pytest.mark.parametrize("filters", [64, 200, 300])
def test_cuda_tile_configs(filters, variant):
    """Grids of different sizes take the different tile configs (64 or 128 filters per block, 64 or
    128 columns): a large batch, and a small one with the same layer."""
    for n in (1, 16):
        check_forward_backward((n, 48, filters, 30, 28, 3, 3, 1, 1, 1, 1, True), "cuda", torch.float32,
                               f"{variant} N{n} K{filters}")


# The float32 config rules (csrc/cuda/gemm/gemm.cu) on shapes whose choice differs: a 1x1 launch of
# at most 256 rows on a grid short of the SMs, or with rows that medium's 64 would pad by half, runs
# narrow; grad_weight takes the tile of least padded area (tall for many filters on few taps, wide
# for few filters on many), unless the long-standing choice pads at most a quarter more.
RULE_CASES = [
    ((2, 29, 70, 20, 19, 1, 1, 1, 0, 1, 1, True), "narrow", "narrow", "tall"),
    ((2, 131, 24, 20, 19, 1, 1, 1, 0, 1, 1, False), "narrow", "narrow", "wide"),
    ((2, 64, 257, 12, 11, 1, 1, 1, 0, 1, 1, True), "medium", "narrow", "small"),
    ((2, 64, 64, 12, 11, 3, 3, 1, 1, 1, 1, False), "medium", "medium", "medium"),
    ((2, 32, 128, 12, 11, 3, 3, 1, 1, 1, 1, True), "medium", "medium", "large"),
]


@needs_cuda
@pytest.mark.parametrize("case", RULE_CASES, ids=lambda c: f"{shape_id(c[0])}-{c[3]}")
def test_cuda_config_rules(case):
    """Each rule's choice computes the convolution: forward and both gradients against float64."""
    shape, forward, grad_input, grad_weight = case
    with using_variant("gemm", "implicit"):
        check_forward_backward(shape, "cuda", torch.float32, f"rule {shape_id(shape)}")
        choice = torchconv.last_choice()
    assert choice.startswith(f"forward:{forward}/"), choice
    assert f"grad_input:{grad_input}/" in choice and f"grad_weight:{grad_weight}/" in choice, choice


# Where the float32 GEMM's filter operand comes from (last_choice's "/a="): a weight trained this call
# is read in place by the forward of the 1x1 and 3x3 kernels and by a 1x1 layer's grad_input (no
# re-laid copy, which would be rebuilt every call); a frozen weight, or any other kernel, uses the
# re-laid matrix, cached while the weight is unchanged. (shape, trained forward, trained grad_input)
OPERAND_CASES = [
    ((3, 29, 70, 5, 7, 1, 1, 1, 0, 1, 1, True), "weight", "weight"),  # C, K off the tiles; pointwise loader
    ((2, 24, 36, 9, 8, 1, 1, 2, 0, 1, 3, False), "weight", "weight"),  # groups, stride 2: one phase has the tap
    ((2, 5, 16, 15, 15, 3, 3, 2, 1, 1, 1, True), "weight", "matrix"),  # 3x3 grad_input is re-laid (not a stem: 5 channels)
    ((1, 6, 10, 11, 9, 5, 5, 1, 2, 1, 1, False), "matrix", "matrix"),  # 5x5: the runtime tap mask kernel
]


def operand_of(choice, pass_):
    return re.search(pass_ + r":\S+/a=(\w+)", choice).group(1)


@needs_cuda
@pytest.mark.parametrize("case", OPERAND_CASES, ids=lambda c: shape_id(c[0]))
def test_cuda_filter_operand_trained_and_frozen(case):
    """The same layer with a trained weight (read in place) and a frozen one (the cached matrix):
    forward and grad_input against float64 either way, and the operand each pass used."""
    shape, forward, grad_input = case
    n, c, k, h, w, r, s, stride, padding, dilation, groups, bias = shape
    x = torch.randn(n, c, h, w, dtype=torch.float64)
    wt = torch.randn(k, c // groups, r, s, dtype=torch.float64)
    b = torch.randn(k, dtype=torch.float64) if bias else None
    ref = F.conv2d(x, wt, b, stride, padding, dilation, groups)
    gy = torch.randn_like(ref)
    ref_gx = torch.nn.grad.conv2d_input(x.shape, wt, gy, stride, padding, dilation, groups)
    with using_variant("gemm", "implicit"):
        for trained in (True, False):
            xc = x.to("cuda", torch.float32).requires_grad_()
            wc = wt.to("cuda", torch.float32).requires_grad_(trained)
            bc = b.to("cuda", torch.float32) if bias else None
            out = torchconv.conv2d(xc, wc, bc, stride, padding, dilation, groups, algorithm="gemm")
            assert operand_of(torchconv.last_choice(), "forward") == (forward if trained else "matrix")
            (gx,) = torch.autograd.grad(out, (xc,), gy.to("cuda", torch.float32))
            assert operand_of(torchconv.last_choice(), "grad_input") == (grad_input if trained else "matrix")
            what = f"{shape_id(shape)} {'trained' if trained else 'frozen'}"
            assert_close_rel(out, ref, torch.float32, f"{what} forward")
            assert_close_rel(gx, ref_gx, torch.float32, f"{what} grad_input")


@needs_cuda
@pytest.mark.parametrize("shape", [(32, 40, 10, 1, 1, 1, 1, 1, 0, 1, 1, True), (3, 29, 70, 5, 7, 1, 1, 1, 0, 1, 1, False),
                                   (2, 12, 20, 4, 5, 3, 3, 1, 1, 1, 2, True)], ids=shape_id)
def test_cuda_weight_grad_of_one_split_is_written_in_place(shape):
    """A grad_weight reduction too short to split (squeeze-and-excitation's 1x1 planes: N columns)
    writes the gradient from the GEMM itself, with no workspace: right against float64."""
    with using_variant("gemm", "implicit"):
        check_forward_backward(shape, "cuda", torch.float32, f"one split {shape_id(shape)}")
        assert re.search(r"grad_weight:\w+/splits=1\b", torchconv.last_choice()), torchconv.last_choice()
        assert torchconv.last_workspace_bytes() == 0


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", [((2, 4, 6, 10, 11, 1, 1, 3, 0, 1, 1, True), 1),  # 8 of 9 phases receive nothing
                                  ((2, 6, 10, 13, 12, 3, 3, 2, 2, 2, 1, True), 1),  # odd phases receive nothing
                                  ((1, 24, 40, 19, 23, 3, 3, 2, 1, 1, 1, False), 0)],  # every phase has taps
                         ids=lambda c: shape_id(c[0]))
def test_strided_grad_input_zeroes_its_empty_phases_in_one_fill(case, dtype):
    """A strided grad_input whose phases are not all reached by a tap is zeroed whole by one fill
    before the phases' launches (not a fill per empty phase); the zeros themselves are checked by
    test_cuda_variants_forward_backward against poisoned outputs."""
    shape, fills = case
    n, c, k, h, w, r, s, stride, padding, dilation, groups, _ = shape
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype, requires_grad=True)
    wt = torch.randn(k, c // groups, r, s, device="cuda", dtype=dtype)
    y = torchconv.conv2d(x, wt, None, stride, padding, dilation, groups, algorithm="gemm")
    gy = torch.randn_like(y)
    torchconv._C.set_poison_outputs(False)  # no poisoning fills among the launches counted
    launches, (gx,) = cuda_kernel_launches(lambda: torch.autograd.grad(y, (x,), gy))
    assert sum(name.startswith("Memset") or "at::native::" in name for name in launches) == fills, launches
    ref = torch.nn.grad.conv2d_input(x.shape, wt.double(), gy.double(), stride, padding, dilation, groups)
    assert_close_rel(gx, ref, dtype, f"{shape_id(shape)} grad_input")


# The float32 grad_input of an RGB stem (one group of at most 4 channels, a filter of several taps)
# runs as one GEMM over all of the filter's (channel, tap) rows -- the columns, W^T gy, with the weight
# read in place, trained or frozen -- and a gather of each input pixel's taps from them; the columns
# are workspace, C x R x S planes of Ho x Wo an image. Strides, padding and dilation per axis, pixels
# that no tap reaches (zero), H != W, 1-4 channels, batch 1 and more.
# (N, C, K, H, W, R, S, stride, padding, dilation)
STEM_CASES = [
    (2, 3, 16, 23, 21, 7, 7, 2, 3, 1),  # a 7x7 stride-2 stem
    (1, 1, 5, 9, 11, 3, 3, 1, 1, 1),  # one channel
    (3, 4, 33, 17, 13, 5, 3, (2, 3), (1, 2), (2, 1)),  # per-axis stride, padding and dilation
    (2, 2, 7, 12, 10, 4, 4, 4, 0, 1),  # patches: each pixel one tap
    (2, 3, 8, 11, 10, 2, 2, 3, 0, 1),  # stride 3 over 2 taps: a third of the rows and columns get none
    (2, 3, 9, 19, 16, 5, 4, (4, 2), (3, 2), (2, 3)),  # stride and dilation sharing a factor, or not
]


def stem_case(case, trained):
    n, c, k, h, w, r, s, stride, padding, dilation = case
    x = torch.randn(n, c, h, w, dtype=torch.float64)
    wt = torch.randn(k, c, r, s, dtype=torch.float64)
    kw = dict(stride=stride, padding=padding, dilation=dilation)
    gy = torch.randn_like(F.conv2d(x, wt, None, **kw))
    ref = torch.nn.grad.conv2d_input(x.shape, wt, gy, **kw)
    xc = x.to("cuda", torch.float32).requires_grad_()
    wc = wt.to("cuda", torch.float32).requires_grad_(trained)
    return xc, wc, gy.to("cuda", torch.float32), kw, ref


@needs_cuda
@pytest.mark.parametrize("trained", [True, False], ids=["trained", "frozen"])
@pytest.mark.parametrize("case", STEM_CASES, ids=str)
def test_cuda_rgb_stem_grad_input_by_columns(case, trained):
    xc, wc, gy, kw, ref = stem_case(case, trained)
    n, c, k, h, w, r, s = case[:7]
    with using_variant("gemm", "implicit"):
        out = torchconv.conv2d(xc, wc, None, algorithm="gemm", **kw)
        (gx,) = torch.autograd.grad(out, (xc,), gy)
        assert operand_of(torchconv.last_choice(), "grad_input") == "weight", torchconv.last_choice()
        columns_bytes = n * c * r * s * out.shape[2] * out.shape[3] * 4
        assert torchconv.last_workspace_bytes() == columns_bytes
        assert_close_rel(gx, ref, torch.float32, f"stem {case}")
        (again,) = torch.autograd.grad(torchconv.conv2d(xc, wc, None, algorithm="gemm", **kw), (xc,), gy)
        assert torch.equal(gx, again)  # the taps' sums in a fixed order


@needs_cuda
def test_cuda_rgb_stem_columns_within_the_workspace_limit():
    """The stem's columns are made for as many images at a time as the workspace limit holds; below one
    image's the grad_input runs the phases' GEMMs (the weight re-laid, no workspace). The same answer
    each way."""
    case = (5, 3, 16, 20, 18, 3, 3, 2, 1, 1)
    xc, wc, gy, kw, ref = stem_case(case, trained=True)
    image_bytes = 3 * 9 * 10 * 9 * 4  # C x R x S planes of the 10 x 9 output
    old_limit = torchconv.get_workspace_limit()
    try:
        with using_variant("gemm", "implicit"):
            out = torchconv.conv2d(xc, wc, None, algorithm="gemm", **kw)
            for limit, workspace, operand in ((2 * image_bytes + 100, 2 * image_bytes, "weight"),
                                              (image_bytes - 1, 0, "matrix")):
                torchconv.set_workspace_limit(limit)
                (gx,) = torch.autograd.grad(out, (xc,), gy, retain_graph=True)
                assert torchconv.last_workspace_bytes() == workspace
                assert operand_of(torchconv.last_choice(), "grad_input") == operand, torchconv.last_choice()
                assert_close_rel(gx, ref, torch.float32, f"limit {limit}")
    finally:
        torchconv.set_workspace_limit(old_limit)


@needs_cuda
def test_cuda_rgb_stem_columns_gemm_does_not_split_past_the_limit():
    """A deep stem on a small grid (256 filters over 8 x 8 outputs: a GEMM of two blocks, which alone
    would split its reduction into slices of the columns' size) keeps the whole grad_input within the
    workspace limit: the columns only, the reduction unsplit."""
    case = (1, 3, 256, 8, 8, 3, 3, 1, 1, 1)
    xc, wc, gy, kw, ref = stem_case(case, trained=True)
    columns_bytes = 3 * 9 * 8 * 8 * 4
    old_limit = torchconv.get_workspace_limit()
    try:
        with using_variant("gemm", "implicit"):
            out = torchconv.conv2d(xc, wc, None, algorithm="gemm", **kw)
            torchconv.set_workspace_limit(5 * columns_bytes // 2)
            (gx,) = torch.autograd.grad(out, (xc,), gy)
            assert torchconv.last_workspace_bytes() == columns_bytes
            assert_close_rel(gx, ref, torch.float32, "deep stem")
    finally:
        torchconv.set_workspace_limit(old_limit)


@needs_cuda
def test_explicit_workspace_is_capped_and_reported():
    """The explicit variant unrolls chunks of columns within the workspace limit (here smaller than
    one image's unrolled matrix: 16*9 rows x 23*19 columns x 8 bytes = 503 kB) and reports what it used;
    the implicit variant uses at most the split-reduction slices, also within the limit. A limit
    below one tile of columns (64 x 144 x 8 bytes = 73.7 kB here) is a clear error, never exceeded."""
    x = torch.randn(3, 16, 23, 19, dtype=torch.float64, device="cuda")
    w = torch.randn(12, 16, 3, 3, dtype=torch.float64, device="cuda")
    ref = F.conv2d(x.cpu(), w.cpu(), None, 1, 1)
    old_limit, old_variant = torchconv.get_workspace_limit(), torchconv.get_variant("gemm")
    try:
        torchconv.set_variant("gemm", "explicit")
        torchconv.set_workspace_limit(100 * 1024)
        out = torchconv.conv2d(x, w, None, 1, 1, algorithm="gemm")
        used = torchconv.last_workspace_bytes()
        assert 0 < used <= 100 * 1024
        assert_close_rel(out, ref, torch.float64, "explicit, capped")
        torchconv.set_variant("gemm", "implicit")
        torchconv.conv2d(x, w, None, 1, 1, algorithm="gemm")
        assert torchconv.last_workspace_bytes() <= 100 * 1024  # split-reduction slices only
        torchconv.set_variant("gemm", "explicit")
        torchconv.set_workspace_limit(64 * 1024)
        with pytest.raises(ValueError, match="explicit variant unrolls at least one tile of 64 columns"):
            torchconv.conv2d(x, w, None, 1, 1, algorithm="gemm")
    finally:
        torchconv.set_workspace_limit(old_limit)
        torchconv.set_variant("gemm", old_variant)


@needs_cuda
def test_split_reduction_on_small_grids():
    """A grid too small to fill the GPU (one 7x7 image, 512 channels of 3x3 taps: a few blocks)
    splits the reduction across blocks into workspace slices, summed in a fixed order with the bias
    added once: right, bitwise repeatable, and the same answer when the limit leaves no room to split."""
    x = torch.randn(1, 512, 7, 7, device="cuda")
    w = torch.randn(100, 512, 3, 3, device="cuda")
    b = torch.randn(100, device="cuda")
    ref = F.conv2d(x.double(), w.double(), b.double(), 1, 1)
    old_limit, old_variant = torchconv.get_workspace_limit(), torchconv.get_variant("gemm")
    try:
        torchconv.set_variant("gemm", "implicit")
        out = torchconv.conv2d(x, w, b, 1, 1, algorithm="gemm")
        assert torchconv.last_workspace_bytes() >= 2 * out.numel() * 4  # at least two slices
        assert_close_rel(out, ref, torch.float32, "split")
        assert torch.equal(out, torchconv.conv2d(x, w, b, 1, 1, algorithm="gemm"))
        torchconv.set_workspace_limit(1)
        unsplit = torchconv.conv2d(x, w, b, 1, 1, algorithm="gemm")
        assert torchconv.last_workspace_bytes() == 0
        assert_close_rel(unsplit, ref, torch.float32, "unsplit")
    finally:
        torchconv.set_workspace_limit(old_limit)
        torchconv.set_variant("gemm", old_variant)


@needs_cuda
def test_backward_is_deterministic(variant):
    assert_backward_repeatable("gemm", stride=2)


@needs_cuda
def test_unaligned_input_view():
    """A 1x1 layer on an input whose storage starts off a 16-byte boundary takes element copies."""
    base = torch.randn(2 * 32 * 8 * 8 + 1, device="cuda")
    x = base[1:].view(2, 32, 8, 8)
    w = torch.randn(20, 32, 1, 1, device="cuda")
    out = torchconv.conv2d(x, w, algorithm="gemm")
    assert_close_rel(out, F.conv2d(x.double(), w.double()), torch.float32, "unaligned 1x1")


def test_variant_api():
    assert VARIANTS == ("implicit", "explicit")
    assert torchconv.get_variant("gemm") == "implicit"
    with pytest.raises(ValueError, match="variant must be one of 'implicit', 'explicit'"):
        torchconv.set_variant("gemm", "fused")
    assert torchconv.get_variant("gemm") == "implicit"


@pytest.mark.parametrize("shape", SHAPES[:4], ids=shape_id)
def test_cpu_ignores_the_variant(shape, variant):
    check_forward_backward(shape, "cpu", torch.float64, f"cpu {variant}")


@pytest.mark.parametrize("columns", [1, 5, 37])
@pytest.mark.parametrize("shape", [SHAPES[i] for i in (3, 4, 5, 6, 7, 11, 12)], ids=shape_id)
def test_cpu_column_chunks(shape, columns):
    """The CPU GEMM unrolls the output columns in chunks within the workspace limit, an output line's
    padding and inside found once a line: chunks of 1, 5 and 37 columns, which start and end inside
    output lines and span images, give the same answer forward and backward (float64)."""
    n, c, k, h, w, r, s, stride, padding, dilation, groups, bias = shape
    old_limit = torchconv.get_workspace_limit()
    try:
        torchconv.set_workspace_limit(columns * (c // groups * r * s) * 8)
        check_forward_backward(shape, "cpu", torch.float64, f"cpu chunks of {columns}")
    finally:
        torchconv.set_workspace_limit(old_limit)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("algorithm", ["gemm", "winograd"])
def test_cpu_matrix_product_bits_do_not_depend_on_the_thread_count(algorithm, dtype):
    """The CPU GEMM's and Winograd's products (csrc/cpu/matmul.h) sum each element on one thread in a fixed
    order, whatever blocks of rows the threads take: one thread and four give the same bits, forward and
    both gradients, on a layer whose products are deeper than one chunk (360 channel taps) and taller
    than one block of rows (250 filters), and on a 1x1 layer whose images are one batched product; and
    they match F.conv2d's float64 answer."""
    for shape in [(2, 40, 250, 9, 10, 3, 3), (3, 300, 250, 5, 7, 1, 1)]:
        n, c, k, h, w, r, s = shape
        if algorithm == "winograd" and r == 1:
            continue
        x = torch.randn(n, c, h, w, dtype=dtype)
        wt = torch.randn(k, c, r, s, dtype=dtype)
        gy = torch.randn(n, k, h, w, dtype=dtype)
        op = getattr(torch.ops.torchconv, f"conv2d_{algorithm}")
        backward = getattr(torch.ops.torchconv, f"conv2d_{algorithm}_backward")
        conv = ([1, 1], [r // 2, s // 2], [1, 1], 1)

        def passes():
            return (op(x, wt, None, *conv),) + tuple(backward(gy, x, wt, *conv, [True, True, False])[:2])

        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            one = passes()
            torch.set_num_threads(4)
            four = passes()
        finally:
            torch.set_num_threads(threads)
        for a, b in zip(one, four):
            assert torch.equal(a, b), shape
        xr, wr = x.double().requires_grad_(), wt.double().requires_grad_()
        ref = F.conv2d(xr, wr, None, *conv)
        refs = (ref,) + torch.autograd.grad(ref, (xr, wr), gy.double())
        for a, b, what in zip(one, refs, ("forward", "grad_input", "grad_weight")):
            assert_close_rel(a, b, dtype, f"{algorithm} {shape} {what}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(2, 40, 70, 9, 10, 3, 3, 2), (3, 24, 30, 7, 9, 1, 1, 3), (1, 12, 8, 5, 6, 3, 3, 1)],
                         ids=["3x3-groups2", "1x1-groups3", "3x3-small"])
def test_cpu_gemm_filters_packed_once_give_the_same_bits(shape, dtype):
    """The CPU GEMM packs a call's filters once for all its products (an image or a chunk of columns each)
    where they would be packed more than once, and keeps them so packed in the weight cache for a frozen
    weight (forward and grad_input: two entries); a trainable weight is packed every call, a small call's
    products pack their own. Every way gives the same bits, and F.conv2d's answer."""
    n, c, k, h, w, r, s, groups = shape
    x = torch.randn(n, c, h, w, dtype=dtype)
    wt = torch.randn(k, c // groups, r, s, dtype=dtype)
    conv = dict(stride=1, padding=(r // 2, s // 2), groups=groups)
    xr = x.detach().requires_grad_()
    y = torchconv.conv2d(xr, wt, **conv, algorithm="gemm")
    gy = torch.randn_like(y)

    def passes(weight):
        torchconv.clear_weight_cache()
        out = torchconv.conv2d(xr, weight, **conv, algorithm="gemm")
        return (out,) + torch.autograd.grad(out, (xr,), gy)

    frozen = passes(wt)
    small = n * h * w <= 256
    assert torchconv.weight_cache_size() == 2  # the packed filters and their transpose
    trainable = passes(wt.clone().requires_grad_())
    assert torchconv.weight_cache_size() == 0
    for a, b in zip(frozen, trainable):
        assert torch.equal(a, b), small
    x64, w64 = x.double().requires_grad_(), wt.double()
    ref = F.conv2d(x64, w64, **conv)
    refs = (ref,) + torch.autograd.grad(ref, (x64,), gy.double())
    for a, b, what in zip(frozen, refs, ("forward", "grad_input")):
        assert_close_rel(a, b, dtype, f"{shape} {what}")

def test_cpu_matrix_product_baseline_build():
    """The CPU GEMM's and Winograd's matrix product is built for the x86-64 baseline (16-byte vectors) and
    for AVX2 with FMA, the second run where the CPU has both; TORCHCONV_CPU_BASELINE=1 runs the first on
    this file's and test_winograd.py's CPU cases."""
    tests = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_gemm.py",
                          "test_winograd.py", "-k", "test_cpu and not baseline_build"], env=baseline_build_env(),
                         cwd=tests, capture_output=True, text=True)
    passed = re.search(r"(\d+) passed", run.stdout)
    assert run.returncode == 0 and passed and int(passed.group(1)) >= 100, run.stdout[-2000:]
