"""Winograd specifics. On CUDA three variants compute the same convolution: 'fused' (F(2x2,3x3) in
one kernel), 'staged' (F(2x2,3x3) with V and M in a workspace bounded by the workspace limit) and
'f4x4' (F(4x4,3x3), 6x6 input tiles and 36 point GEMMs, staged the same way, for the forward and
grad_input; its grad_weight is F(2x2)'s), and 'auto' (the default) picks one per call (see
test_auto_rule); all must match F.conv2d forward and backward on 3x3 stride-1 shapes with any
padding (negative padding inside grad_input included), groups, partial 2x2 and 4x4 tiles, C and K
off the 32-wide tiles, batch 1 and more, in float32 within 1e-5 and float64 within 1e-12. The
transformed filters are cached per weight and must follow in-place updates. The CPU kernel runs
F(4x4,3x3) for 'f4x4', F(2x2,3x3) for 'fused' and 'staged', and either for 'auto' (see
test_cpu_auto_rule); the variant API and its errors are tested there too."""
import contextlib
import re

import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import DEVICES, assert_backward_repeatable, assert_close_rel, cuda_kernel_names, rel_err, using_config, using_variant
from conftest import CudaTensorStandIn
from conftest import check_forward_backward as conftest_check
from test_parity import WINOGRAD_GRID, case_id
from test_precision import allowed_error

VARIANTS = torchconv.variants("winograd")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

# 3x3 stride-1 shapes beyond the random grid: (N, C, K, H, W, padding, groups, bias)
SHAPES = [
    (1, 1, 1, 1, 1, 1, 1, True),  # one pixel, one partial tile
    (2, 3, 5, 1, 9, 1, 1, False),  # H = 1
    (3, 37, 41, 9, 10, 0, 1, True),  # padding 0, C and K off the tile
    (1, 70, 67, 13, 11, 2, 1, True),  # padding 2, odd H and W
    (2, 8, 12, 7, 8, 3, 4, True),  # padding 3: grad_input runs with padding -1; groups
    (1, 64, 96, 29, 31, 1, 1, False),  # many tiles: several tile blocks and filter blocks
    (5, 16, 16, 6, 5, (1, 2), 2, True),  # asymmetric padding
    (4, 64, 72, 120, 118, 1, 1, True),  # enough 64-filter blocks for the tall fused config (H100 rule)
    # At most 4 channels per group reduce in the shallow kernel (one tile per thread, no GEMM; the
    # fused variant):
    (2, 3, 40, 18, 20, 1, 1, True),  # RGB stem, even Wo (paired stores); 40 filters: a partial filter block
    (3, 3, 32, 37, 45, 1, 1, True),  # odd H and W: partial tiles, unpaired stores
    (1, 2, 3, 5, 600, 0, 1, False),  # a row of 299 tiles: two tile blocks; grad_input reduces over K = 3
    (2, 12, 12, 11, 14, 1, 12, True),  # depthwise: one channel and one filter per group
    (2, 8, 4, 9, 9, 2, 2, True),  # 4 channels and 2 filters per group, padding 2
    # At most 4 filters per group run the narrow kernel (also grad_input of the shallow shapes above):
    (1, 150, 2, 9, 13, 0, 1, True),  # 150 channels: three refills of the filters in shared memory
    (2, 20, 6, 10, 7, 1, 2, False),  # 10 channels and 3 filters per group
    (2, 7, 9, 11, 6, 1, 1, True),  # 7 channels: the GEMM forward, grad_weight in 8-channel blocks
]


def shape_id(s):
    return "N{}C{}K{}H{}W{}p{}g{}b{:d}".format(*s).replace(" ", "")


@pytest.fixture(params=VARIANTS)
def variant(request):
    with using_variant("winograd", request.param) as v:
        yield v


def check_forward_backward(n, c, k, h, w, padding, groups, bias, device, dtype, what):
    conftest_check("winograd", (n, c, k, h, w, 3, 3, 1, padding, 1, groups, bias), device, dtype, what)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_cuda_variants_forward_backward(shape, dtype, variant):
    check_forward_backward(*shape, "cuda", dtype, f"{variant} {shape_id(shape)}")


@needs_cuda
@pytest.mark.parametrize("case", WINOGRAD_GRID, ids=case_id)
def test_cuda_variants_on_parity_grid(case, variant):
    padding = case["padding"]
    if padding in ("same", "valid"):
        padding = 1 if padding == "same" else 0
    check_forward_backward(case["N"], case["C"], case["K"], case["H"], case["W"], padding, case["groups"],
                           case["bias"], "cuda", torch.float32, f"{variant} {case_id(case)}")


@needs_cuda
@pytest.mark.parametrize("n, c, k, hw, choice", [
    (1, 256, 256, 7, "f4x4:staged"),  # C*K/(C+K) = 128: F(4x4) at any size
    (1, 128, 256, 9, "f4x4:staged"),  # 85
    (2, 128, 128, 9, "fused:"),  # 64, but (64 - 40) * 162 pixels is short of 80000
    (4, 128, 128, 30, "f4x4:staged"),  # (64 - 40) * 3600 pixels
    (2, 64, 128, 136, "f4x4:staged"),  # 42.7: 2.7 * 36992 pixels
    (1, 64, 128, 136, "fused:"),  # 2.7 * 18496
    (8, 64, 64, 56, "fused:"),  # 32, 25088 pixels: F(2x2) fused
    (12, 64, 64, 56, "fused:"),  # 32, 37632 pixels
    (13, 64, 64, 56, "f4x4:staged"),  # 32, 40768 pixels: from 30 up, 40000 pixels take F(4x4)
    (24, 58, 58, 56, "fused:"),  # 29, 75264 pixels
    (32, 32, 64, 68, "fused:"),  # 21.3, 147968 pixels: F(2x2) fused at any size
    (2, 3, 32, 20, "fused:shallow"),  # an RGB stem: the shallow kernel
])
def test_auto_rule(n, c, k, hw, choice):
    """auto runs F(4x4,3x3) (staged) where C*K/(C+K) >= 80 per group, or where it is over 40 and
    (C*K/(C+K) - 40) * N*Ho*Wo >= 80000, or where it is at least 30 and N*Ho*Wo >= 40000; else F(2x2,3x3)
    fused (the shallow and narrow kernels for thin reductions and outputs). float64 keeps F(2x2)."""
    x = torch.randn(n, c, hw, hw, device="cuda")
    w = torch.randn(k, c, 3, 3, device="cuda")
    out = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    assert torchconv.last_choice().startswith("forward:" + choice), torchconv.last_choice()
    assert_close_rel(out, F.conv2d(x.double(), w.double(), None, 1, 1), torch.float32, f"auto {c}x{k}")
    torchconv.conv2d(x[:1, :, :9, :9].double(), w.double(), None, 1, 1, algorithm="winograd")
    assert "f4x4" not in torchconv.last_choice()


@needs_cuda
def test_float32_error_on_a_resnet_layer(variant):
    """A ResNet-sized layer (C = K = 128, 28 x 28, batch 4): FP32 error under 1e-5 against float64."""
    check_forward_backward(4, 128, 128, 28, 28, 1, 1, True, "cuda", torch.float32, variant)


@pytest.mark.parametrize("device", DEVICES)
def test_filter_transform_cache_follows_the_weight(device):
    torchconv.clear_weight_cache()
    x = torch.randn(2, 16, 10, 9, device=device, dtype=torch.float64)
    w = torch.randn(24, 16, 3, 3, device=device, dtype=torch.float64)
    conv = lambda: torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    assert_close_rel(conv(), F.conv2d(x, w, None, 1, 1), torch.float64, "first call")
    size = torchconv.weight_cache_size()
    assert size >= 1
    conv()
    assert torchconv.weight_cache_size() == size, "a second call with the same weight must hit the cache"
    with torch.no_grad():
        w.mul_(-0.5).add_(1.0)  # in place: bumps the version counter
    assert_close_rel(conv(), F.conv2d(x, w, None, 1, 1), torch.float64, "after an in-place update")
    w2 = torch.randn_like(w)
    assert_close_rel(torchconv.conv2d(x, w2, None, 1, 1, algorithm="winograd"), F.conv2d(x, w2, None, 1, 1),
                     torch.float64, "another weight")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["fused", "f4x4"])
def test_cached_filters_of_one_weight_under_two_groupings(device, variant):
    """One frozen weight serves a layer of groups=1 (70 channels: more than one run of filter
    transforms) and one of groups=2 (35 channels a group): U's layout differs, so each must get its own."""
    torchconv.clear_weight_cache()
    w = torch.randn(6, 70, 3, 3, device=device, dtype=torch.float64)
    with using_variant("winograd", variant):
        for groups in (1, 2, 1):
            x = torch.randn(2, 70 * groups, 9, 11, device=device, dtype=torch.float64)
            out = torchconv.conv2d(x, w, None, 1, 1, 1, groups, algorithm="winograd")
            assert_close_rel(out, F.conv2d(x, w, None, 1, 1, 1, groups), torch.float64, f"groups={groups}")
    assert torchconv.weight_cache_size() >= 1


@pytest.mark.parametrize("device", DEVICES)
def test_filter_transform_cache_with_a_training_loop(device):
    """SGD steps update the weight in place; every step's output must use the current weight."""
    torch.manual_seed(0)
    layer = torchconv.Conv2d(8, 8, 3, padding=1, algorithm="winograd").to(device).double()
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = torch.randn(2, 8, 7, 6, device=device, dtype=torch.float64)
    for step in range(3):
        out = layer(x)
        assert_close_rel(out, F.conv2d(x, layer.weight, layer.bias, 1, 1), torch.float64, f"step {step}")
        opt.zero_grad()
        out.square().sum().backward()
        opt.step()


@pytest.mark.parametrize("device", DEVICES)
def test_trainable_weights_are_transformed_every_call(device):
    """A weight that requires grad (outside inference mode) may be written through .data, which no
    version counter sees (gradcheck does it): it is never served from the cache."""
    torchconv.clear_weight_cache()
    x = torch.randn(1, 8, 6, 7, device=device, dtype=torch.float64)
    w = torch.randn(8, 8, 3, 3, device=device, dtype=torch.float64, requires_grad=True)
    torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    assert torchconv.weight_cache_size() == 0
    w.data.add_(1.0)
    with torch.no_grad():
        out = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    assert_close_rel(out, F.conv2d(x, w.detach(), None, 1, 1), torch.float64, "after a .data write")


@pytest.mark.parametrize("device", DEVICES)
def test_inference_mode_caches_parameters_until_they_change(device):
    torchconv.clear_weight_cache()
    layer = torchconv.Conv2d(8, 16, 3, padding=1, algorithm="winograd").to(device).double().eval()
    x = torch.randn(2, 8, 9, 5, device=device, dtype=torch.float64)
    with torch.inference_mode():
        layer(x)
    assert torchconv.weight_cache_size() == 1
    other = torch.nn.Conv2d(8, 16, 3, padding=1).to(device).double()
    layer.load_state_dict(other.state_dict())  # copy_ under no_grad: bumps the version counter
    with torch.inference_mode():
        out = layer(x)
    assert_close_rel(out, other(x), torch.float64, "after load_state_dict")


@pytest.mark.parametrize("device", DEVICES)
def test_inference_tensors_are_not_cached(device):
    with torch.inference_mode():
        x = torch.randn(1, 8, 6, 6, device=device, dtype=torch.float64)
        w = torch.randn(8, 8, 3, 3, device=device, dtype=torch.float64)
        torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
        w.add_(1.0)  # inference tensors have no version counter to notice this
        out = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    assert_close_rel(out, F.conv2d(x, w, None, 1, 1), torch.float64, "inference tensor")


@needs_cuda
@pytest.mark.parametrize("staged_variant", ["staged", "f4x4"])
def test_staged_workspace_is_capped_and_reported(staged_variant):
    x = torch.randn(3, 16, 23, 19, device="cuda", dtype=torch.float64)
    w = torch.randn(12, 16, 3, 3, device="cuda", dtype=torch.float64)
    old_limit, old_variant = torchconv.get_workspace_limit(), torchconv.get_variant("winograd")
    try:
        torchconv.set_variant("winograd", staged_variant)
        torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
        full = torchconv.last_workspace_bytes()
        assert full > 0
        torchconv.set_workspace_limit(full // 4)
        out = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
        capped = torchconv.last_workspace_bytes()
        assert 0 < capped <= full // 4
        # grad_weight staged in chunks of tiles: later chunks add to the slices of the first.
        xs, ws = x.detach().requires_grad_(), w.detach().requires_grad_()
        gys = torch.randn(3, 12, 23, 19, device="cuda", dtype=torch.float64)
        grads = torch.autograd.grad(torchconv.conv2d(xs, ws, None, 1, 1, algorithm="winograd"), (xs, ws), gys)
        xr, wr = x.detach().cpu().requires_grad_(), w.detach().cpu().requires_grad_()
        refs = torch.autograd.grad(F.conv2d(xr, wr, None, 1, 1), (xr, wr), gys.cpu())
        for g, r, name in zip(grads, refs, ("grad_input", "grad_weight")):
            assert_close_rel(g, r, torch.float64, f"staged {name} in chunks")
        torchconv.set_variant("winograd", "fused")
        torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
        assert torchconv.last_workspace_bytes() == 0, "the fused variant needs no V / M workspace"
        xg = x.detach().requires_grad_()
        torch.autograd.grad(torchconv.conv2d(xg, w.requires_grad_(), None, 1, 1, algorithm="winograd").sum(), (xg, w))
        assert torchconv.last_workspace_bytes() > 0, "grad_weight's split slices are workspace (seen across threads)"
    finally:
        torchconv.set_workspace_limit(old_limit)
        torchconv.set_variant("winograd", old_variant)
    assert_close_rel(out, F.conv2d(x, w, None, 1, 1), torch.float64, "staged in chunks")


@needs_cuda
def test_backward_is_deterministic(variant):
    assert_backward_repeatable("winograd", stride=1)


def test_variant_api():
    assert VARIANTS == ("auto", "fused", "staged", "f4x4")
    assert torchconv.get_variant("winograd") == "auto"
    with pytest.raises(ValueError, match="variant must be one of 'auto', 'fused', 'staged', 'f4x4'"):
        torchconv.set_variant("winograd", "tiled")
    with pytest.raises(ValueError, match="algorithm must be one with variants"):
        torchconv.set_variant("csg", "fused")
    assert torchconv.get_variant("winograd") == "auto"


@pytest.mark.parametrize("shape", SHAPES[:3], ids=shape_id)
def test_cpu_variants(shape, variant):
    check_forward_backward(*shape, "cpu", torch.float64, f"cpu {variant}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_cpu_f4x4_forward_backward(shape, dtype):
    """F(4x4,3x3) on the CPU: partial 4x4 tiles, negative padding in grad_input, groups."""
    with using_variant("winograd", "f4x4"):
        check_forward_backward(*shape, "cpu", dtype, f"cpu f4x4 {shape_id(shape)}")


def f4x4_differs_from_f2x2(device):
    """Both variants meet the float32 bar, but they round differently: the f4x4 variant really runs
    other transforms (on CUDA the forward and grad_input also report it in last_choice)."""
    torch.manual_seed(0)
    x = torch.randn(2, 32, 13, 11, device=device)
    w = torch.randn(24, 32, 3, 3, device=device)
    ref = F.conv2d(x.double(), w.double(), None, 1, 1)
    outs = {}
    for v in ("staged", "f4x4"):
        with using_variant("winograd", v):
            outs[v] = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
            if device == "cuda":
                assert torchconv.last_choice().startswith("forward:" + ("f4x4:staged" if v == "f4x4" else "staged:"))
        assert_close_rel(outs[v], ref, torch.float32, v)
    assert not torch.equal(outs["staged"], outs["f4x4"])


def test_cpu_f4x4_is_another_algorithm():
    f4x4_differs_from_f2x2("cpu")


@pytest.mark.parametrize("n, c, k, hw, dtype, trainable, f4x4", [
    (1, 64, 64, 16, torch.float32, False, True),  # 16 F(4x4) tiles, the filter transform cached
    (1, 64, 64, 13, torch.float32, False, True),  # 16, partial tiles
    (1, 64, 64, 12, torch.float32, False, False),  # 9
    (3, 16, 24, 7, torch.float32, False, False),  # 12 over three images
    (1, 64, 64, 16, torch.float32, True, False),  # 16, filters transformed in the call
    (1, 64, 64, 28, torch.float32, True, True),  # 49
    (3, 16, 24, 16, torch.float32, True, True),  # 48 over three images
    (1, 64, 64, 28, torch.float64, False, False),  # float64 keeps F(2x2)
], ids=lambda v: str(v).replace("torch.", ""))
def test_cpu_auto_rule(n, c, k, hw, dtype, trainable, f4x4):
    """On the CPU, auto runs a float32 call on F(4x4,3x3) from 16 of its tiles (all images) where
    the filter transform is cached (a frozen weight, inference mode), from 48 where the call
    transforms the filters (a trainable weight's forward, and every grad_input), and on F(2x2,3x3)
    otherwise and in float64. Each answer is known by its bits: the forced variant's."""
    torch.manual_seed(0)
    x = torch.randn(n, c, hw, hw, dtype=dtype, requires_grad=trainable)
    w = torch.randn(k, c, 3, 3, dtype=dtype, requires_grad=trainable)
    gy = torch.randn(n, k, hw, hw, dtype=dtype)
    runs = {}
    for variant in ("auto", "fused", "f4x4"):
        with using_variant("winograd", variant), torch.set_grad_enabled(trainable):
            y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
            runs[variant] = (y, torch.autograd.grad(y, x, gy)[0]) if trainable else (y,)
    assert not torch.equal(runs["fused"][0], runs["f4x4"][0])
    expected = runs["f4x4" if f4x4 else "fused"]
    for got, want, what in zip(runs["auto"], expected, ("forward", "grad_input")):
        assert torch.equal(got, want), f"{what}: auto did not run {'F(4x4)' if f4x4 else 'F(2x2)'}"
    ref = F.conv2d(x.detach().double(), w.detach().double(), None, 1, 1)
    assert_close_rel(runs["auto"][0], ref, dtype, "auto")


@needs_cuda
def test_cuda_f4x4_is_another_algorithm():
    f4x4_differs_from_f2x2("cuda")
    x = torch.randn(1, 16, 9, 7, device="cuda", requires_grad=True)
    w = torch.randn(8, 16, 3, 3, device="cuda", requires_grad=True)
    with using_variant("winograd", "f4x4"):
        torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd").sum().backward()
        assert "grad_input:f4x4:staged" in torchconv.last_choice()


# TF32: a float32 call while torch.backends.cudnn.allow_tf32 is on runs the fused F(2x2) with its 16
# point GEMMs on tensor cores (forward and grad_input: U and V rounded to TF32; grad_weight: dM and V
# rounded to TF32; transforms, sums and the bias in FP32). Layers with at most 4 channels or 4 filters per group
# keep the shallow / narrow kernels, and the staged and F(4x4) variants and forced tile configs stay
# IEEE FP32 (F(4x4)'s error in TF32 would be several times cuDNN's). bfloat16 and float16 calls run
# these tiles too, whatever the switch says, on their own 16-bit tensors: bfloat16 with one TF32
# product per point product, float16 with its operands split into two bfloat16 parts and three
# bfloat16 products (3xBF16: the mma.sync tiles, the single wgmma block and the two-block staged-V
# cluster, test_float16_tiles_split_their_operands); test_16bit_calls_run_the_tensor_core_tiles below.
# The tensor-core tiles, forced by set_config: mma.sync's 32- and 64-filter blocks; on Hopper the
# wgmma block, the cluster of two blocks splitting its points, and the cluster with V staged
# (transformed once into a workspace by a kernel of its own instead of by every filter block) and
# copied by bulk copies: clusters of two, or of eight whose blocks multicast V to two filter blocks
# and U to two tile blocks.
VSTAGED_TILES = ["tf32-wgmma-cluster-vbulk", "tf32-wgmma-cluster-uvmulticast"]
WGMMA_TILES = ["tf32-wgmma", "tf32-wgmma-cluster"] + VSTAGED_TILES
TF32_TILES = ["tf32", "tf32-tall"] + WGMMA_TILES


def weight_plan(tile):
    """grad_weight's plan under a forced TF32 tile: the mma.sync tiles' own, the wgmma grad_weight block
    under every wgmma tile, and under the staged-V tiles dM and V staged too (staged:tf32-wgmma)."""
    if tile in VSTAGED_TILES:
        return "staged:tf32-wgmma"
    return "fused:tf32-wgmma" if tile.startswith("tf32-wgmma") else f"fused:{tile}"

# More output blocks than any GPU has SMs (543 of 64 filters x 32 tiles: 181 tile blocks, the last
# partial, x 3 filter blocks, the last with 2 filters; 2 chunks, the second partial): the single
# wgmma block is persistent, a grid of one block per SM walking them, so most blocks compute several
# and some one more than others.
PERSISTENT_WALK_SHAPE = (4, 20, 130, 75, 75, 1, 1, True)
# A walk with an odd count of chunks (3, the last partial: 273 output blocks): each block fills stage 0
# twice and stage 1 once, so the NCHW block's U copies (on the stages' mbarriers, whose phases every
# thread tracks across the blocks it walks) alternate unevenly between the two stages.
PERSISTENT_ODD_WALK_SHAPE = (2, 40, 130, 75, 75, 1, 1, True)

# Shapes: (N, C, K, H, W, padding, groups, bias).
TF32_SHAPES = [
    (3, 37, 41, 9, 10, 0, 1, True),  # padding 0; C and K off the 8-channel chunks and 32-filter blocks
    (1, 70, 67, 13, 11, 2, 1, True),  # padding 2 (grad_input padding 0), odd H and W
    (2, 16, 24, 8, 12, 3, 2, True),  # padding 3 (grad_input padding -1), groups
    (1, 64, 96, 29, 31, 1, 1, False),  # several tile blocks and filter blocks; grad_weight in 3 slices
    (2, 12, 20, 1, 9, 1, 1, True),  # H = 1: partial tiles only
    (3, 40, 36, 30, 2, 1, 1, True),  # one tile per row: grad_weight's 8-tile steps wrap rows and images
]


@needs_cuda
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("tile", TF32_TILES)
@pytest.mark.parametrize("shape", TF32_SHAPES + [
    (2, 24, 130, 11, 9, 1, 1, True),  # 130 filters: 64-filter blocks, the last with 2
    (2, 45, 70, 19, 17, 1, 1, True),  # wgmma: 3 chunks of 16 channels, the last partial; 2 filter blocks
    (2, 24, 42, 11, 9, 1, 2, True),  # 21 filters a group of 42: a pair of filters would straddle groups
    PERSISTENT_WALK_SHAPE,
    PERSISTENT_ODD_WALK_SHAPE,
], ids=shape_id)
def test_tf32_runs_the_point_gemms_on_tensor_cores(shape, tile, layout):
    """The tiles of the tensor-core kernels (32 and 64 filters per block on mma.sync, 64 on Hopper's
    wgmma, alone or split by points over a cluster of two blocks; the wgmma tiles' grad_weight runs
    grad_weight's wgmma block, tf32-wgmma), forced, in both memory formats: channels_last operands are read and written as they
    are (last_choice's /a=nhwc), with no NCHW copy, and the outputs and gradients come back
    channels_last. The cluster tile's 64-tile blocks are partial on every shape here (H = 1: 10
    tiles, all in the first block's half)."""
    if tile.startswith("tf32-wgmma") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    n, c, k, h, w, padding, groups, bias = shape
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(n, c, h, w, device="cuda").contiguous(memory_format=fmt).requires_grad_(True)
    wt = torch.randn(k, c // groups, 3, 3, device="cuda", requires_grad=True)
    b = torch.randn(k, device="cuda") if bias else None
    kw = dict(stride=1, padding=padding, dilation=1, groups=groups)
    nhwc = "/a=nhwc" if layout == "nhwc" else ""
    with using_config("winograd", tile):
        y = torchconv.conv2d(x, wt, b, algorithm="winograd", **kw)
        assert torchconv.last_choice() == f"forward:fused:{tile}/splits=1{nhwc}", torchconv.last_choice()
        gy = torch.randn_like(y)
        gx, gw = torch.autograd.grad(y, (x, wt), gy)
        _, grad_input, grad_weight = torchconv.last_choice().split()
        assert grad_input == f"grad_input:fused:{tile}/splits=1{nhwc}", grad_input
        assert re.fullmatch(rf"grad_weight:{weight_plan(tile)}/splits=\d+{nhwc}", grad_weight), grad_weight
        # The slices of the tile reduction are summed in a fixed order: the same bits every call.
        assert torch.equal(torch.autograd.grad(torchconv.conv2d(x, wt, b, algorithm="winograd", **kw), wt, gy)[0], gw)
    assert y.is_contiguous(memory_format=fmt) and gx.is_contiguous(memory_format=fmt)

    xd, wd = x.detach().double().requires_grad_(True), wt.detach().double().requires_grad_(True)
    ref = F.conv2d(xd, wd, b.double() if bias else None, **kw)
    ref_gx, ref_gw = torch.autograd.grad(ref, (xd, wd), gy.double())
    cudnn = F.conv2d(x, wt, b, **kw)
    cudnn_gx, cudnn_gw = torch.autograd.grad(cudnn, (x, wt), gy)
    assert rel_err(y, ref) <= allowed_error(rel_err(cudnn, ref), torch.float32)
    assert rel_err(gx, ref_gx) <= allowed_error(rel_err(cudnn_gx, ref_gx), torch.float32)
    assert rel_err(gw, ref_gw) <= allowed_error(rel_err(cudnn_gw, ref_gw), torch.float32)
    assert rel_err(gw, ref_gw) > 1e-6  # TF32 operands, not IEEE


# Walks of the persistent wgmma block (more output blocks than any GPU has SMs) whose consecutive
# blocks share their U (the same group and filter block) or do not: shapes (N, C, K, H, W, padding,
# groups, bias).
WGMMA_WALK_SHAPES = [
    (4, 16, 64, 75, 75, 1, 1, True),  # one chunk, one filter block: every block finds its U held
    (2, 16, 75, 75, 75, 1, 1, True),  # 75 filters: channels_last outputs one filter a store, not pairs
    (2, 64, 100, 75, 75, 1, 1, True),  # 4 chunks (an even count), 2 filter blocks: 182 blocks
    (2, 80, 140, 75, 75, 1, 2, False),  # groups of 40 channels (3 chunks) and 70 filters: 364 blocks
    (1, 32, 300, 75, 75, 1, 1, True),  # 5 filter blocks: whether a block's U is held varies along a walk
]


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["tf32", "bf16", "fp16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", WGMMA_WALK_SHAPES, ids=shape_id)
def test_wgmma_walk_reuses_u_of_the_block_before(shape, layout, dtype):
    """The persistent wgmma block on NCHW operands keeps an output block's last two chunks of U in its
    stages (its epilogue stages past them); the next block of its walk with the same group and filter
    block runs its chunks in the opposite order and starts with those two, copying none for blocks of
    at most two chunks. On channels_last operands it walks that way where a block has at most two
    chunks (16 and 32 channels) and without elsewhere (its stages placed
    as before).
    Forced, forward and grad_input (the same kernel on the rotated filters), against float64 within
    twice cuDNN's error at the same precision, and the same bits on a second call."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    n, c, k, h, w, padding, groups, bias = shape
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(n, c, h, w, device="cuda").to(dtype).contiguous(memory_format=fmt).requires_grad_(True)
    wt = torch.randn(k, c // groups, 3, 3, device="cuda").div(3 * (c // groups) ** 0.5).to(dtype)
    b = torch.randn(k, device="cuda").to(dtype) if bias else None
    kw = dict(stride=1, padding=padding, dilation=1, groups=groups)
    tiles = n * -(-(h + 2 * padding - 2) // 2) * -(-(w + 2 * padding - 2) // 2)
    assert -(-tiles // 32) * -(-(k // groups) // 64) * groups > torch.cuda.get_device_properties(0).multi_processor_count
    with using_config("winograd", "tf32-wgmma"):
        y = torchconv.conv2d(x, wt, b, algorithm="winograd", **kw)
        gy = torch.randn_like(y)
        (gx,) = torch.autograd.grad(y, x, gy)
        block = "3xbf16-wgmma" if dtype == torch.float16 else "tf32-wgmma"  # float16: split operands
        assert torchconv.last_choice().split()[1].startswith(f"grad_input:fused:{block}/"), torchconv.last_choice()
        y2 = torchconv.conv2d(x, wt, b, algorithm="winograd", **kw)
        assert torch.equal(y2, y) and torch.equal(torch.autograd.grad(y2, x, gy)[0], gx)
    xd, wd = x.detach().double().requires_grad_(True), wt.double()
    ref = F.conv2d(xd, wd, b.double() if bias else None, **kw)
    (ref_gx,) = torch.autograd.grad(ref, xd, gy.double())
    xc = x.detach().requires_grad_(True)
    cudnn = F.conv2d(xc, wt, b, **kw)
    (cudnn_gx,) = torch.autograd.grad(cudnn, xc, gy)
    assert rel_err(y, ref) <= allowed_error(rel_err(cudnn, ref), dtype)
    assert rel_err(gx, ref_gx) <= allowed_error(rel_err(cudnn_gx, ref_gx), dtype)


@needs_cuda
@pytest.mark.parametrize("allow_tf32", [False, True], ids=["tf32_off", "tf32_on"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [
    (2, 40, 72, 13, 11, 1, 1, True),  # 72 filters: the 64-filter tiles (wgmma on Hopper for bfloat16)
    (1, 24, 20, 9, 10, 0, 2, False),  # groups of 12 channels and 10 filters: the 32-filter tile
], ids=shape_id)
def test_16bit_calls_run_the_tensor_core_tiles(shape, dtype, layout, allow_tf32):
    """bfloat16 and float16 calls run the TF32 tensor-core tiles for the forward and both gradients
    whatever PyTorch's TF32 switch says. bfloat16 values are exact in TF32, and rounding the
    transformed operands to TF32's 10 bits keeps the error under a bfloat16 convolution's. float16
    values keep TF32's 10 bits already, and V rounded to them would be about 2.5x cuDNN's float16
    error (docs/winograd.md), so float16 calls split each operand into two bfloat16 parts and run
    three bfloat16 products per point product ('3xbf16', '3xbf16-tall' on mma.sync, '3xbf16-wgmma'
    on Hopper's wgmma). Each pass within 2x of cuDNN's error at the call's dtype (no floor), in the call's
    dtype and memory format; channels_last read and written as it is."""
    n, c, k, h, w, padding, groups, bias = shape
    torch.backends.cudnn.allow_tf32 = allow_tf32  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(n, c, h, w, device="cuda", dtype=torch.float64).to(dtype).contiguous(memory_format=fmt)
    wt = (torch.randn(k, c // groups, 3, 3, device="cuda", dtype=torch.float64) / (9 * c // groups) ** 0.5).to(dtype)
    b = torch.randn(k, device="cuda", dtype=torch.float64).to(dtype) if bias else None
    x.requires_grad_(True), wt.requires_grad_(True)
    kw = dict(stride=1, padding=padding, dilation=1, groups=groups)
    y = torchconv.conv2d(x, wt, b, algorithm="winograd", **kw)
    gy = torch.randn_like(y)
    gx, gw = torch.autograd.grad(y, (x, wt), gy)
    plans = torchconv.last_choice().split()
    assert [p.split(":")[0] for p in plans] == ["forward", "grad_input", "grad_weight"], plans
    for plan in plans:
        assert (":tf32" if dtype == torch.bfloat16 else ":3xbf16") in plan, plan
        assert plan.endswith("/a=nhwc") == (layout == "nhwc"), plan
    assert y.dtype == gx.dtype == gw.dtype == dtype
    assert y.is_contiguous(memory_format=fmt) and gx.is_contiguous(memory_format=fmt)

    xd, wd = x.detach().double().requires_grad_(True), wt.detach().double().requires_grad_(True)
    ref = F.conv2d(xd, wd, b.double() if bias else None, **kw)
    refs = (ref,) + torch.autograd.grad(ref, (xd, wd), gy.double())
    xr, wr = x.detach().requires_grad_(True), wt.detach().requires_grad_(True)
    cudnn = F.conv2d(xr, wr, b, **kw)
    theirs = (cudnn,) + torch.autograd.grad(cudnn, (xr, wr), gy)
    for name, ours, r, pt in zip(("output", "grad_input", "grad_weight"), (y, gx, gw), refs, theirs):
        err, pt_err = rel_err(ours, r), rel_err(pt, r)
        assert err <= 2 * pt_err, f"{name}: error {err:.2e}, cuDNN's {pt_err:.2e}"


def half_and_float32_passes(shape, layout, tile=None, dtype=torch.bfloat16):
    """Forward, grad_input and grad_weight of one layer in `dtype` (bfloat16 or float16; fresh random
    values), and of the same values in float32 -- under TF32 for bfloat16 (the same tiles), in IEEE
    FP32 for float16 (what its split operands approach) -- with `tile` forced, if given; plus
    last_choice of the 16-bit passes and a CPU profile of them (input shapes recorded)."""
    n, c, k, h, w, padding, groups, bias = shape
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(n, c, h, w, device="cuda").to(dtype).contiguous(memory_format=fmt)
    wt = torch.randn(k, c // groups, 3, 3, device="cuda").to(dtype)
    b = torch.randn(k, device="cuda").to(dtype) if bias else None
    gy = torch.randn(n, k, h + 2 * padding - 2, w + 2 * padding - 2, device="cuda").to(dtype)
    gy = gy.contiguous(memory_format=fmt)
    kw = dict(stride=1, padding=padding, dilation=1, groups=groups, algorithm="winograd")

    def passes(dtype, profile):
        xx, ww = x.detach().to(dtype).requires_grad_(True), wt.detach().to(dtype).requires_grad_(True)
        bb = b.to(dtype) if bias else None
        activities = [torch.profiler.ProfilerActivity.CPU]
        with (torch.profiler.profile(activities=activities, record_shapes=True) if profile
              else contextlib.nullcontext()) as prof:
            y = torchconv.conv2d(xx, ww, bb, **kw)
            gx, gw = torch.autograd.grad(y, (xx, ww), gy.to(dtype))
        return (y, gx, gw), torchconv.last_choice().split(), prof

    with contextlib.ExitStack() as stack:
        if tile is not None:
            stack.enter_context(using_config("winograd", tile))
        torch.backends.cudnn.allow_tf32 = True  # conftest restores it
        ours, plans, prof = passes(dtype, True)
        torch.backends.cudnn.allow_tf32 = dtype == torch.bfloat16
        widened, _, _ = passes(torch.float32, False)
    return ours, widened, plans, prof, (x, gy)


def assert_rounded_ieee(got, ref, name):
    """A float16 result of split operands (3xBF16) against the IEEE FP32 result `ref` of the same
    values: hi + lo keeps 16 bits of each operand, so the two float32 values differ by about 2^-16 of
    the terms summed, a few hundredths of a float16 unit; their roundings to float16 agree but for
    the few elements near a rounding boundary (at most 5%), and the error is the rounding's (within
    5% of the rounded IEEE result's, against a float64 reference of the same values). One product
    per point product, TF32 or bfloat16, or a split without one of its three products, would miss
    on most elements, at twice the rounding's error or more."""
    assert got.dtype == torch.float16, name
    rounded = ref.to(torch.float16)
    differ = (got != rounded).float().mean().item()
    assert differ <= 0.05, f"{name}: {differ:.3f} of the elements round differently"
    err, ieee_err = rel_err(got, ref), rel_err(rounded, ref)
    assert err <= 1.05 * ieee_err, f"{name}: error {err:.3e} against the float32 result, its rounding's {ieee_err:.3e}"


@needs_cuda
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("tile", TF32_TILES)
@pytest.mark.parametrize("shape", TF32_SHAPES[:3] + [
    (2, 45, 70, 19, 17, 1, 1, True),  # wgmma: 3 chunks of 16 channels, the last partial; 2 filter blocks
    PERSISTENT_WALK_SHAPE,
], ids=shape_id)
def test_bfloat16_tiles_read_and_write_bfloat16(shape, tile, layout):
    """bfloat16 calls of the tensor-core tiles read the input and grad_output and write the output and
    grad_input in bfloat16 themselves: the profile holds no cast or copy of a tensor of those shapes
    (only the small weight is widened). Their arithmetic is the float32 call's, so each pass gives
    the bits of the same tile run on the values in float32, rounded to bfloat16 -- odd sizes,
    partial tiles, groups, both memory formats."""
    if tile.startswith("tf32-wgmma") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    ours, widened, plans, prof, (x, gy) = half_and_float32_passes(shape, layout, tile)
    nhwc = "/a=nhwc" if layout == "nhwc" else ""
    assert plans[0] == f"forward:fused:{tile}/splits=1{nhwc}" and plans[1] == f"grad_input:fused:{tile}/splits=1{nhwc}"
    assert re.fullmatch(rf"grad_weight:{weight_plan(tile)}/splits=\d+{nhwc}", plans[2]), plans
    for name, got, ref in zip(("output", "grad_input", "grad_weight"), ours, widened):
        assert got.dtype == torch.bfloat16 and torch.equal(got, ref.to(torch.bfloat16)), name
    assert_read_and_written_as_they_are(ours, prof, x, gy, layout)


def assert_read_and_written_as_they_are(ours, prof, x, gy, layout):
    """The outputs come in the call's memory format, and the profile holds no cast or copy of a tensor
    of the input's or grad_output's shape."""
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    assert ours[0].is_contiguous(memory_format=fmt) and ours[1].is_contiguous(memory_format=fmt)
    activations = {tuple(x.shape), tuple(gy.shape)}
    copies = [(e.key, e.input_shapes) for e in prof.key_averages(group_by_input_shape=True)
              if e.key in ("aten::_to_copy", "aten::copy_", "aten::clone")
              and any(tuple(s) in activations for s in e.input_shapes)]
    assert not copies, copies


@needs_cuda
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("tile", ["tf32", "tf32-tall"] + WGMMA_TILES)
@pytest.mark.parametrize("shape", TF32_SHAPES[:3] + [
    (2, 45, 70, 19, 17, 1, 1, True),  # 3 chunks of 16 channels, the last partial; 2 filter blocks
    (1, 64, 96, 29, 31, 1, 1, False),  # several tile and filter blocks; grad_weight in slices
    PERSISTENT_WALK_SHAPE,
], ids=shape_id)
def test_float16_tiles_split_their_operands(shape, tile, layout):
    """float16 calls of the tensor-core tiles split U, V (and grad_weight's dM) into bfloat16 hi and lo
    parts and run three bfloat16 products per point product: on mma.sync '3xbf16' (32 filters per
    block, one 8-channel step per MMA) and '3xbf16-tall' (64 filters; the forward's two steps per
    16-channel MMA), and on Hopper's wgmma the single block, '3xbf16-wgmma' (a chunk's 16 channels one
    bfloat16 k-step, hi and lo in the TF32 words' space), which a forced fused cluster tile becomes
    too (it loads its own patches in TF32 words), and the two-block staged-V cluster,
    '3xbf16-wgmma-cluster-vbulk' (V transformed once into a workspace as hi and lo halves), which
    either staged-V tile becomes (the clusters of eight share float16 words only); grad_weight runs
    its own wgmma block under a forced wgmma tile, '3xbf16-wgmma' too, with dM and V staged under the
    staged-V tiles.
    They read the input and grad_output and write the output and grad_input in float16 themselves
    (no copy of those shapes in the profile). Each pass is the IEEE FP32 result rounded to float16,
    but for rare elements one float16 unit off (assert_rounded_ieee) -- odd sizes, partial tiles,
    groups, a persistent walk, both memory formats."""
    if tile.startswith("tf32-wgmma") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    ours, ieee, plans, prof, (x, gy) = half_and_float32_passes(shape, layout, tile, torch.float16)
    nhwc = "/a=nhwc" if layout == "nhwc" else ""
    staged = tile in VSTAGED_TILES
    split = {"tf32": "3xbf16", "tf32-tall": "3xbf16-tall"}.get(tile, "3xbf16-wgmma")
    weight_split = ("staged:" if staged else "fused:") + split
    if staged:
        split += "-cluster-vbulk"
    assert plans[0] == f"forward:fused:{split}/splits=1{nhwc}" and plans[1] == f"grad_input:fused:{split}/splits=1{nhwc}"
    assert re.fullmatch(rf"grad_weight:{weight_split}/splits=\d+{nhwc}", plans[2]), plans
    for name, got, ref in zip(("output", "grad_input", "grad_weight"), ours, ieee):
        assert_rounded_ieee(got, ref, name)
    assert_read_and_written_as_they_are(ours, prof, x, gy, layout)


# grad_weight with dM and V staged: shapes (N, C, K, H, W, padding, groups, bias).
STAGED_WEIGHT_GRAD_SHAPES = [
    (2, 40, 72, 13, 17, 1, 1, True),  # one channel tile and two filter tiles of 64, all partial
    (3, 66, 74, 11, 9, 1, 2, False),  # groups of 33 channels and 37 filters
    (1, 33, 130, 7, 6, 2, 1, True),  # padding 2, partial tiles, three filter tiles
    (4, 20, 130, 75, 75, 1, 1, True),  # 5776 tiles: 361 chunks of 16 over several slices
]


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", STAGED_WEIGHT_GRAD_SHAPES, ids=shape_id)
def test_staged_grad_weight_on_wgmma(shape, layout, dtype):
    """grad_weight with dM and V transformed once into a workspace (in the MMAs' core-matrix layout:
    the TF32-rounded values as float16 words under scales, or bfloat16 hi and lo in TF32 words' space
    for float16's split) and reduced by blocks of 64 filters x 64 channels x 8 points that stream them
    by bulk copies -- under the staged-V configs, and by the rule on deep layers. bfloat16 gives the
    bits of the float32 call under TF32 rounded to bfloat16, float16 the IEEE FP32 result rounded
    (assert_rounded_ieee); odd sizes, partial tiles, groups, both memory formats."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    ours, widened, plans, _, _ = half_and_float32_passes(shape, layout, "tf32-wgmma-cluster-vbulk", dtype)
    nhwc = "/a=nhwc" if layout == "nhwc" else ""
    products = "tf32" if dtype == torch.bfloat16 else "3xbf16"
    assert re.fullmatch(rf"grad_weight:staged:{products}-wgmma/splits=\d+{nhwc}", plans[2]), plans
    if dtype == torch.bfloat16:
        assert ours[2].dtype == torch.bfloat16 and torch.equal(ours[2], widened[2].to(torch.bfloat16))
    else:
        assert_rounded_ieee(ours[2], widened[2], "grad_weight")


def staged_weight_grad_pass_limit(plan, full, groups, kg, cg):
    """A workspace limit under which the staged grad_weight of `plan` (its splits, at least two), which
    took `full` bytes, keeps its slices and runs them in passes: its partial sums (a slice: 16 points x
    the group's filters and channels, each padded to 64, in float32) and two thirds of the rest (one
    slice's operands or more)."""
    splits = int(re.search(r"splits=(\d+)", plan).group(1))
    assert splits >= 2, plan
    partial = splits * groups * 16 * -(-kg // 64) * 64 * -(-cg // 64) * 64 * 4
    return partial + (full - partial) * 2 // 3


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("c, k, hw", [(128, 256, 68), (256, 512, 34)], ids=["Y8", "Y12"])
def test_staged_grad_weight_passes_fill_the_gpu_under_the_default_limit(c, k, hw, dtype):
    """On the YOLO layers at N = 32, whose staged operands reach or pass the default workspace limit,
    the slice count is chosen so that the passes' reductions -- 2 x 64-filter tiles x 64-channel
    tiles blocks a slice, one an SM -- fill the waves they take: a count that left a pass a few
    slices of a few blocks idled up to half the SMs. The passes are the caller's: as many
    slices as fit beside the partial sums (and the float16 words' maxima), each slice's operands 16
    points x 16 tiles a chunk x the padded filters and channels, in two-byte words (one product) or
    four (float16's split halves)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    n = 32
    x = torch.randn(n, c, hw, hw, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(k, c, 3, 3, device="cuda") / (9 * c) ** 0.5).to(dtype).requires_grad_()
    y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    torch.autograd.grad(y, w, torch.randn_like(y))
    plan = torchconv.last_choice().split()[-1]
    products = "tf32" if dtype == torch.bfloat16 else "3xbf16"
    assert re.fullmatch(rf"grad_weight:staged:{products}-wgmma/splits=\d+/a=nhwc", plan), plan
    splits = int(re.search(r"splits=(\d+)", plan).group(1))
    k_tiles, c_tiles, word = -(-k // 64), -(-c // 64), 2 if dtype == torch.bfloat16 else 4
    chunks = -(-n * (hw // 2) ** 2 // 16)
    per_split = -(-chunks // splits)
    assert -(-chunks // per_split) == splits
    slice_bytes = 16 * k_tiles * 64 * c_tiles * 64 * 4
    chunk_bytes = (k_tiles + c_tiles) * 64 * 16 * 16 * word
    maxima = (k_tiles + c_tiles) * 64 * 4 if word == 2 else 0
    room = torchconv.get_workspace_limit() - splits * slice_bytes - maxima
    per_pass = min(max(room // (per_split * chunk_bytes), 1), splits)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    passes = [per_pass] * (splits // per_pass) + ([splits % per_pass] if splits % per_pass else [])
    blocks = [2 * k_tiles * c_tiles * p for p in passes]
    waves = sum(-(-b // sms) for b in blocks)
    assert sum(blocks) / (waves * sms) >= 0.9, (plan, passes, blocks, sms)


@needs_cuda
@pytest.mark.parametrize("n, c, k, h, w, groups", [
    (3, 48, 136, 30, 34, 1),  # 136 filters: three filter blocks of 64, the last padded
    (3, 48, 136, 30, 34, 2),  # groups of 24 channels and 68 filters (two filter blocks each)
    (4, 300, 72, 30, 34, 1),  # 300 channels: bfloat16 channels_last by single values, not 16-byte vectors
    (2, 24, 64, 96, 100, 1),  # 9600 pixels a plane: an NCHW plane's maximum over several blocks
    (2, 1040, 64, 32, 32, 1),  # float32 channels_last: 260 16-byte vectors a pixel, two blocks' worth
], ids=["C48K136", "C48K136g2", "C300K72", "C24K64H96W100", "C1040K64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["tf32", "bf16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_staged_grad_weight_carries_tf32_values_in_float16_under_per_filter_and_per_channel_scales(
        layout, dtype, n, c, k, h, w, groups):
    """The staged grad_weight of one-product calls (float32 under TF32, bfloat16) moves dM and V as
    float16 words: the TF32-rounded values under a power of two per filter (dM) and per channel (V),
    each from its channel's largest |grad_output| or |input| (4 times it bounds the transformed
    values), which the reduction multiplies back
    exactly. So input channels scaled by 2^-40 .. 2^40 and grad_output's filters by 2^40 .. 2^-40
    (one of each zeroed) -- 2^80 apart, where one scale for a whole operand would flush most of
    them -- give the unscaled call's grad_weight times both scales, bit for bit; and so do its
    slices run in passes under a small workspace limit."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    cg, kg = c // groups, k // groups
    c_scale = 2.0 ** torch.linspace(-40, 40, c, device="cuda").round()
    k_scale = 2.0 ** torch.linspace(40, -40, k, device="cuda").round()
    c_scale[5], k_scale[7] = 0.0, 0.0
    gen = torch.Generator(device="cuda").manual_seed(11)
    x0 = torch.randn(n, c, h, w, device="cuda", generator=gen).to(dtype)
    gy0 = torch.randn(n, k, h, w, device="cuda", generator=gen).to(dtype)
    wt = torch.randn(k, cg, 3, 3, device="cuda", generator=gen).to(dtype).requires_grad_()

    def grad_weight(x, gy):
        y = torchconv.conv2d(x.contiguous(memory_format=fmt), wt, None, padding=1, groups=groups, algorithm="winograd")
        (gw,) = torch.autograd.grad(y, wt, gy.contiguous(memory_format=fmt))
        plan = torchconv.last_choice().split()[-1]
        assert re.fullmatch(r"grad_weight:staged:tf32-wgmma/splits=\d+(/a=nhwc)?", plan), plan
        return gw, torchconv.last_workspace_bytes(), plan

    xs, gys = x0 * c_scale.view(1, c, 1, 1).to(dtype), gy0 * k_scale.view(1, k, 1, 1).to(dtype)
    old_limit = torchconv.get_workspace_limit()
    with using_config("winograd", "tf32-wgmma-cluster-vbulk"):
        gw0, _, _ = grad_weight(x0, gy0)
        gw, full, plan = grad_weight(xs, gys)
        limit = staged_weight_grad_pass_limit(plan, full, groups, kg, cg)
        try:
            torchconv.set_workspace_limit(limit)
            passes, capped, plan_capped = grad_weight(xs, gys)
        finally:
            torchconv.set_workspace_limit(old_limit)
    assert plan_capped == plan and 0 < capped <= limit < full, (plan, plan_capped, capped, limit, full)
    channel = (torch.arange(k, device="cuda") // kg).view(k, 1) * cg + torch.arange(cg, device="cuda").view(1, cg)
    scale = (k_scale.double().view(k, 1) * c_scale.double()[channel]).view(k, cg, 1, 1)
    assert torch.isfinite(gw).all() and gw.abs().max() > 0
    assert torch.equal(gw.double(), gw0.double() * scale)
    assert torch.equal(passes, gw)
    assert (gw[7] == 0).all() and (gw[(channel == 5)] == 0).all()


@needs_cuda
def test_staged_grad_weight_runs_its_slices_in_passes_within_the_workspace_limit():
    """Under a workspace limit the staged grad_weight transforms and reduces its slices in passes of
    as many as fit beside the partial sums: the same slices, so the same bits, in less workspace."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(4, 64, 40, 40, device="cuda", generator=gen)
    w = (torch.randn(64, 64, 3, 3, device="cuda", generator=gen) / 24).requires_grad_()
    y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    gy = torch.randn(y.shape, device="cuda", generator=gen)

    def run():
        (gw,) = torch.autograd.grad(y, w, gy, retain_graph=True)
        return gw, torchconv.last_workspace_bytes(), torchconv.last_choice().split()[-1]

    old_limit = torchconv.get_workspace_limit()
    with using_config("winograd", "tf32-wgmma-cluster-vbulk"):
        whole, full, plan = run()
        limit = staged_weight_grad_pass_limit(plan, full, 1, 64, 64)
        try:
            torchconv.set_workspace_limit(limit)
            passes, capped, plan_capped = run()
        finally:
            torchconv.set_workspace_limit(old_limit)
    assert plan.startswith("grad_weight:staged:tf32-wgmma/") and plan_capped == plan, (plan, plan_capped)
    assert 0 < capped <= limit < full
    assert torch.equal(passes, whole)
    wd = w.detach().double().requires_grad_()
    (ref,) = torch.autograd.grad(F.conv2d(x.double(), wd, None, 1, 1), wd, gy.double())
    (cudnn,) = torch.autograd.grad(F.conv2d(x, w, None, 1, 1), w, gy)
    assert rel_err(whole, ref) <= allowed_error(rel_err(cudnn, ref), torch.float32)


@needs_cuda
@pytest.mark.parametrize("dtype, n, c, k, hw, staged", [
    (torch.float32, 2, 256, 256, 64, True),  # 256 channels and filters over 2048 tiles: 2^27 products
    (torch.float32, 1, 256, 256, 64, True),  # 1024 tiles: 2^26
    (torch.float32, 3, 128, 128, 64, True),  # 128 channels and filters, 3072 tiles: 3 x 2^24, the least
    (torch.float32, 2, 128, 128, 64, False),  # 2048 tiles: 2^25, the launches and round trip weigh more
    (torch.float32, 2, 256, 128, 64, True),  # 128 filters: each V transformed twice fused, each dM 8 times
    (torch.float32, 2, 64, 256, 64, False),  # 64 channels: each dM twice only
    (torch.float32, 4, 256, 64, 64, False),  # 64 filters: each V once only
    (torch.bfloat16, 2, 128, 256, 64, True),  # bfloat16 as float32's TF32 products: float16 words too
    (torch.bfloat16, 2, 256, 256, 32, False),  # 512 tiles (R12's count at 512 channels): 2^25
    (torch.bfloat16, 2, 512, 512, 32, True),  # and at 512 channels, 2^27
    (torch.float16, 2, 128, 256, 64, True),  # float16's split, twice the words: from 2^19 products
    (torch.float16, 2, 64, 256, 64, False),
    (torch.float16, 1, 256, 256, 32, True),  # 256 tiles
    (torch.float16, 1, 128, 128, 16, True),  # 64 tiles: 2^20
    (torch.float16, 1, 128, 128, 8, False),  # 16 tiles: 2^18
], ids=lambda v: str(v).replace("torch.", ""))
def test_grad_weight_stages_its_operands_on_deep_layers(dtype, n, c, k, hw, staged):
    """The rule: grad_weight stages dM and V from 128 filters per group (below, the fused block
    transforms each V once) and 128 channels per group (below, each dM at most twice) where the point
    products' size, channels x filters x tiles, reaches 3 x 2^24 while they travel as float16 words
    (one product: float32 under TF32, bfloat16) and 2^19 where float16's split operands take TF32
    words (twice the bytes, but the fused block splits every operand it transforms); the result
    within twice cuDNN's error either way."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    x = torch.randn(n, c, hw, hw, device="cuda").to(dtype)
    w = (torch.randn(k, c, 3, 3, device="cuda") / (9 * c) ** 0.5).to(dtype).requires_grad_()
    y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    gy = torch.randn_like(y)
    (gw,) = torch.autograd.grad(y, w, gy)
    plan = torchconv.last_choice().split()[-1]
    products = "3xbf16" if dtype == torch.float16 else "tf32"
    assert plan.startswith(f"grad_weight:{'staged' if staged else 'fused'}:{products}-wgmma/"), plan
    wd = w.detach().double().requires_grad_()
    (ref,) = torch.autograd.grad(F.conv2d(x.double(), wd, None, 1, 1), wd, gy.double())
    (cudnn,) = torch.autograd.grad(F.conv2d(x, w, None, 1, 1), w, gy)
    assert rel_err(gw, ref) <= allowed_error(rel_err(cudnn, ref), dtype)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_tensor_core_tiles_read_a_16bit_weight_without_a_float32_copy(dtype):
    """The tensor-core tiles' filter transforms (forward and grad_input) read a bfloat16 or float16
    weight themselves, and grad_weight's last kernel writes the weight's dtype: a training step with
    a trainable weight casts nothing of the weight's shape."""
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    x = torch.randn(2, 64, 12, 10, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(96, 64, 3, 3, device="cuda").to(dtype)
    x.requires_grad_(True), w.requires_grad_(True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        y = torchconv.conv2d(x, w, None, padding=1, algorithm="winograd")
        gx, gw = torch.autograd.grad(y, (x, w), torch.randn_like(y))
    plans = torchconv.last_choice().split()
    assert len(plans) == 3 and all(re.search(r"(tf32|bf16)-wgmma|:tf32|:3xbf16", p) for p in plans), plans
    casts = sum(e.count for e in prof.key_averages(group_by_input_shape=True)
                if e.key == "aten::_to_copy" and list(w.shape) in [list(s) for s in e.input_shapes])
    assert casts == 0, casts
    wd = w.detach().double().requires_grad_()
    xd = x.detach().double().requires_grad_()
    yd = F.conv2d(xd, wd, None, 1, 1)
    assert rel_err(y, yd) <= allowed_error(rel_err(F.conv2d(x, w, None, 1, 1), yd), dtype)


@needs_cuda
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_thread_tile_kernels_read_a_16bit_weight_without_a_float32_copy(dtype, channels_last):
    """An RGB stem's forward (the shallow kernel) and grad_input (the narrow kernel) at 16 bits: their
    filter transform reads the bfloat16 or float16 weight itself, so a trainable weight is not cast to
    float32 first, and the results stay within 2x of cuDNN's error against float64."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(2, 3, 19, 14, device="cuda").to(dtype).contiguous(memory_format=fmt)
    w = (torch.randn(32, 3, 3, 3, device="cuda") / 5).to(dtype)
    gy = torch.randn(2, 32, 19, 14, device="cuda").to(dtype).contiguous(memory_format=fmt)
    x.requires_grad_(True), w.requires_grad_(True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        y = torchconv.conv2d(x, w, None, padding=1, algorithm="winograd")
        (gx,) = torch.autograd.grad(y, x, gy)
    plans = torchconv.last_choice().split()
    assert plans[0].startswith("forward:fused:shallow") and plans[1].startswith("grad_input:fused:narrow"), plans
    casts = sum(e.count for e in prof.key_averages(group_by_input_shape=True)
                if e.key == "aten::_to_copy" and list(w.shape) in [list(s) for s in e.input_shapes])
    assert casts == 0, casts
    xd, wd = x.detach().double().requires_grad_(), w.detach().double()
    yd = F.conv2d(xd, wd, None, 1, 1)
    (gxd,) = torch.autograd.grad(yd, xd, gy.double())
    xc = x.detach().requires_grad_()
    yc = F.conv2d(xc, w.detach(), None, 1, 1)
    (gxc,) = torch.autograd.grad(yc, xc, gy)
    assert rel_err(y, yd) <= allowed_error(rel_err(yc, yd), dtype)
    assert rel_err(gx, gxd) <= allowed_error(rel_err(gxc, gxd), dtype)


@needs_cuda
@pytest.mark.parametrize("layout", ["channels_last", "sliced"])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16"])
def test_filter_transforms_read_the_weight_in_place(precision, layout):
    """The filter transforms (IEEE, tensor-core and float16-word U) read the weight through its
    strides (FilterLayout::w): a trainable channels_last weight, or every other filter of a larger one,
    gives the contiguous weight's bits in the forward and both gradients (grad_input's transform reads
    the filters rotated) and launches the same kernels -- no copy of the weight first."""
    torch.backends.cudnn.allow_tf32 = precision == "tf32"  # conftest restores it
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = torch.randn(2, 40, 11, 9, device="cuda").to(dtype).contiguous(memory_format=fmt)
    w = (torch.randn(72, 40, 3, 3, device="cuda") / 19).to(dtype)
    if layout == "channels_last":
        strided = w.contiguous(memory_format=torch.channels_last)
    else:
        strided = torch.zeros(144, 40, 3, 3, device="cuda", dtype=dtype)[::2]
        strided.copy_(w)
    gy = torch.randn(2, 72, 11, 9, device="cuda").to(dtype).contiguous(memory_format=fmt)
    results = []
    for weight in (strided, w):
        xi, wi = x.detach().requires_grad_(), weight.detach().requires_grad_()

        def passes():
            y = torchconv.conv2d(xi, wi, None, 1, 1, algorithm="winograd")
            return [y] + list(torch.autograd.grad(y, (xi, wi), gy))

        results.append(cuda_kernel_names(passes))
    (names, outs), (contiguous_names, contiguous_outs) = results
    assert names == contiguous_names, names ^ contiguous_names
    for ours, contiguous in zip(outs, contiguous_outs):
        assert torch.equal(ours, contiguous)


@needs_cuda
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("n, c, k, hw, groups, kernel", [
    (2, 37, 70, (13, 11), 1, "fused"),  # 37 channels: a warp's 8 (filter, channel) pairs span filters
    (2, 80, 80, (9, 14), 2, "fused"),  # groups (40 filters each: the wgmma block's 64-filter tile)
    (3, 128, 128, (64, 64), 1, "staged"),  # dM and V staged (3 x 2^24 products)
    (2, 3, 16, (17, 10), 1, "shallow"),  # 3 channels: the shallow kernel
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_grad_weight_is_written_in_the_weights_dtype_and_layout(n, c, k, hw, groups, kernel, dtype, channels_last):
    """grad_weight's float32 sums reach the weight's dtype and the call's layout in the kernels' last
    step (KCRS, or KRSC under channels_last): the gradient a 16-bit weight gets is of its dtype and
    format, rounded once from the float32 result (within twice cuDNN's error)."""
    if kernel != "shallow" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma grad_weight kernels run on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(n, c, *hw, device="cuda").to(dtype).contiguous(memory_format=fmt)
    w = (torch.randn(k, c // groups, 3, 3, device="cuda") / (9 * c // groups) ** 0.5).to(dtype)
    w = w.contiguous(memory_format=fmt).requires_grad_()
    y = torchconv.conv2d(x, w, None, 1, 1, 1, groups, algorithm="winograd")
    gy = torch.randn_like(y)
    (gw,) = torch.autograd.grad(y, w, gy)
    plan = torchconv.last_choice().split()[-1]
    prefix = {"fused": "grad_weight:fused:", "staged": "grad_weight:staged:", "shallow": "grad_weight:fused:shallow/"}
    assert plan.startswith(prefix[kernel]) and (kernel == "shallow") != ("wgmma" in plan), plan
    assert gw.dtype == dtype and gw.is_contiguous(memory_format=fmt), (gw.dtype, gw.stride())
    wd = w.detach().double().requires_grad_()
    (ref,) = torch.autograd.grad(F.conv2d(x.double(), wd, None, 1, 1, 1, groups), wd, gy.double())
    (cudnn,) = torch.autograd.grad(F.conv2d(x, w, None, 1, 1, 1, groups), w, gy)
    assert rel_err(gw, ref) <= allowed_error(rel_err(cudnn, ref), dtype)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["tf32", "bf16", "fp16"])
def test_grad_output_in_another_layout_is_copied_once(dtype):
    """A channels_last call whose grad_output comes in NCHW: grad_input and grad_weight both read it
    channels_last on the tensor-core tiles, and share one copy of it."""
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    x = torch.randn(2, 40, 13, 11, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(72, 40, 3, 3, device="cuda").to(dtype)
    x.requires_grad_(True), wt.requires_grad_(True)
    y = torchconv.conv2d(x, wt, None, padding=1, algorithm="winograd")
    gy = torch.randn(y.shape, device="cuda").to(dtype)  # NCHW
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.autograd.grad(y, (x, wt), gy)
    plans = torchconv.last_choice().split()
    assert all(p.endswith("/a=nhwc") for p in plans[1:]), plans
    copies = sum(e.count for e in prof.key_averages(group_by_input_shape=True)
                 if e.key == "aten::clone" and [int(v) for v in gy.shape] in [list(s) for s in e.input_shapes])
    assert copies == 1, copies


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape, native", [
    ((2, 6, 40, 11, 9, 1, 1, True), [True, True, False]),  # 6 channels: grad_weight's narrow IEEE tile
    ((1, 40, 3, 9, 13, 1, 1, False), [False, False, False]),  # 3 filters: grad_weight on the IEEE GEMM tile
], ids=lambda v: shape_id(v) if isinstance(v, tuple) and len(v) == 8 else None)
def test_16bit_passes_no_kernel_takes_are_widened(shape, native, layout, dtype):
    """A bfloat16 or float16 pass that neither a tensor-core tile nor a one-tile-per-thread kernel
    takes (grad_weight of more than 4 channels per group on the narrow IEEE tile, or of at most 4
    filters on the IEEE GEMM tile) runs widened to float32, in IEEE FP32: the other passes of the same
    call still run on the 16-bit tensors (here the tiles, or the 3-filter layer's narrow forward and
    shallow grad_input). Either way each bfloat16 pass gives the bits of the float32 call under TF32,
    rounded, and each float16 pass the IEEE FP32 result rounded (assert_rounded_ieee)."""
    ours, widened, plans, _, _ = half_and_float32_passes(shape, layout, dtype=dtype)
    assert [(":tf32" if dtype == torch.bfloat16 else ":3xbf16") in p for p in plans] == native, plans
    for name, got, ref in zip(("output", "grad_input", "grad_weight"), ours, widened):
        if dtype == torch.bfloat16:
            assert got.dtype == torch.bfloat16 and torch.equal(got, ref.to(torch.bfloat16)), name
        else:
            assert_rounded_ieee(got, ref, name)


# Layers of at most 4 channels per group (shapes (N, C, K, H, W, padding, groups, bias)): every pass
# on a one-tile-per-thread kernel -- the shallow forward, the narrow grad_input (at most 4 outputs: the
# layer's channels), the shallow grad_weight; with at most 4 filters per group the grad_input is a
# shallow reduction instead.
THREAD_TILE_SHAPES = [
    (2, 3, 24, 12, 10, 1, 1, True),  # an RGB stem: one partial filter block
    (1, 3, 40, 19, 23, 1, 1, True),  # odd H and W: partial tiles; two filter blocks, the second partial
    (2, 6, 20, 13, 11, 2, 2, True),  # groups: 3 channels and 10 filters each, padding 2
    (3, 2, 7, 1, 9, 1, 1, False),  # H = 1: partial tiles only
    (1, 4, 3, 9, 13, 1, 1, False),  # 4 channels, 3 filters: grad_input a shallow reduction too
    (1, 2, 66, 31, 130, 0, 2, True),  # 1 channel and 33 filters a group: several staged batches of grad_weight
    (2, 3, 32, 20, 22, 1, 1, True),  # 32 filters: grad_input's lanes take channel runs of 4 (channels_last)
    (1, 3, 72, 9, 10, 1, 1, False),  # 72 filters: grad_input refills them in shared memory
]


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", THREAD_TILE_SHAPES, ids=shape_id)
def test_16bit_shallow_layers_run_on_the_16bit_tensors(shape, layout, dtype):
    """bfloat16 and float16 calls of a layer of at most 4 channels per group (an RGB stem) run the
    shallow and narrow kernels on the 16-bit tensors themselves: loads widened exactly, IEEE FP32
    arithmetic, each result rounded once. So every pass gives the bits of the float32 call, which runs
    the same kernels, rounded to the dtype -- and the profile holds no cast or copy of a tensor of the
    input's or grad_output's shape: channels_last operands are read and written as they are."""
    ours, ref, plans, prof, (x, gy) = half_and_float32_passes(shape, layout, dtype=dtype)
    nhwc = "/a=nhwc" if layout == "nhwc" else ""
    n, c, k, h, w, padding, groups, bias = shape
    grad_input = "shallow" if k // groups <= 4 else "narrow"
    assert plans[0] == f"forward:fused:shallow/splits=1{nhwc}", plans
    assert plans[1] == f"grad_input:fused:{grad_input}/splits=1{nhwc}", plans
    assert re.fullmatch(rf"grad_weight:fused:shallow/splits=\d+{nhwc}", plans[2]), plans
    for name, got, want in zip(("output", "grad_input", "grad_weight"), ours, ref):
        assert got.dtype == dtype and torch.equal(got, want.to(dtype)), name
    assert_read_and_written_as_they_are(ours, prof, x, gy, layout)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["tf32", "fp16"])
@pytest.mark.parametrize("tile", VSTAGED_TILES)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_staged_v_within_the_workspace_limit(layout, tile, dtype):
    """The staged-V tile keeps V of all tile blocks in a workspace when it fits the workspace limit
    (16 points x tiles x channels, padded to 16: in float16 words, 2 bytes a value, beside the bounds
    of V's scales, 4 bytes a pixel and a tile; for float16 calls split into two bfloat16 halves, 4
    bytes a value, no scales), and otherwise transform and reduce the tile blocks in slices that fit it
    (at least one tile block: a limit below that is exceeded by the one block's V, never failed) --
    the same bits either way, forward and grad_input."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    n, c, k, h, w = 3, 40, 72, 23, 17  # 3 x 12 x 9 = 324 tiles: 6 blocks of 64; 48 channels padded
    x = torch.randn(n, c, h, w, device="cuda").to(dtype).contiguous(memory_format=fmt).requires_grad_(True)
    wt = torch.randn(k, c, 3, 3, device="cuda").div(3 * c ** 0.5).to(dtype)
    b = torch.randn(k, device="cuda").to(dtype)
    tiles_per_block = 64
    split = dtype == torch.float16
    block_bytes = 16 * tiles_per_block * 48 * (4 if split else 2)
    scale_bytes = 0 if split else (n * h * w + 324) * 4
    old_limit = torchconv.get_workspace_limit()
    try:
        with using_config("winograd", tile):
            y = torchconv.conv2d(x, wt, b, padding=1, algorithm="winograd")
            expected = "3xbf16-wgmma-cluster-vbulk" if split else tile
            assert torchconv.last_choice().startswith(f"forward:fused:{expected}/"), torchconv.last_choice()
            assert torchconv.last_workspace_bytes() == -(-324 // tiles_per_block) * block_bytes + scale_bytes
            gy = torch.randn_like(y)
            (gx,) = torch.autograd.grad(y, x, gy)
            for limit, blocks in ((3 * block_bytes + scale_bytes - 1, 2), (3 * block_bytes + scale_bytes, 3), (1, 1)):
                torchconv.set_workspace_limit(limit)
                y_sliced = torchconv.conv2d(x, wt, b, padding=1, algorithm="winograd")
                assert torchconv.last_workspace_bytes() == blocks * block_bytes + scale_bytes
                assert torch.equal(y_sliced, y)
                assert torch.equal(torch.autograd.grad(y_sliced, x, gy)[0], gx)
    finally:
        torchconv.set_workspace_limit(old_limit)
    ref = F.conv2d(x.detach().double(), wt.double(), b.double(), padding=1)
    cudnn = F.conv2d(x.detach(), wt, b, padding=1)
    assert rel_err(y, ref) <= allowed_error(rel_err(cudnn, ref), dtype)


@needs_cuda
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", [
    (2, 200, 200, 19, 23, 1, 1),  # 13 chunks: every stage's mbarriers go through several phases
    (3, 33, 130, 17, 15, 0, 1),  # 3 filter blocks and 5 tile blocks: the clusters' last pairs padded
    (2, 40, 72, 9, 9, 1, 2),  # groups
], ids=lambda s: "N{}C{}K{}H{}W{}p{}g{}".format(*s))
def test_multicast_tile_gives_the_two_block_clusters_bits(shape, layout):
    """The clusters of eight (two filter blocks x two tile blocks sharing V and U by multicast) copy
    the same operands into the same stages as the two-block clusters and run the same MMAs in the
    same order, so their outputs are those bits exactly: forward and grad_input, whole and in
    workspace slices (3 tile blocks in the forward: odd slices pad the tile pairs), with padded
    filter and tile blocks storing nothing."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    n, c, k, h, w, padding, groups = shape
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(n, c, h, w, device="cuda").contiguous(memory_format=fmt).requires_grad_(True)
    wt = torch.randn(k, c // groups, 3, 3, device="cuda")
    b = torch.randn(k, device="cuda")
    kw = dict(padding=padding, groups=groups, algorithm="winograd")

    def run(config):
        with using_config("winograd", config):
            y = torchconv.conv2d(x, wt, b, **kw)
            assert torchconv.last_choice().startswith(f"forward:fused:{config}/"), torchconv.last_choice()
            (gx,) = torch.autograd.grad(y, x, gy)
        return y, gx

    gy = torch.randn_like(F.conv2d(x.detach(), wt, b, padding=padding, groups=groups))
    expected = run("tf32-wgmma-cluster-vbulk")
    got = run("tf32-wgmma-cluster-uvmulticast")
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    old_limit = torchconv.get_workspace_limit()
    try:
        # The forward's V of 3 tile blocks (16 points x 64 tiles x the padded channels of each group, in
        # float16) and the bounds of V's scales (a float per pixel and per tile of each group).
        tiles = n * -(-(h + 2 * padding - 2) // 2) * -(-(w + 2 * padding - 2) // 2)
        torchconv.set_workspace_limit(3 * 16 * 64 * groups * (-(-(c // groups) // 16) * 16) * 2
                                      + groups * (n * h * w + tiles) * 4)
        sliced = run("tf32-wgmma-cluster-uvmulticast")
    finally:
        torchconv.set_workspace_limit(old_limit)
    assert torch.equal(sliced[0], expected[0]) and torch.equal(sliced[1], expected[1])


@needs_cuda
@pytest.mark.parametrize("tile", VSTAGED_TILES)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_staged_v_carries_tf32_values_in_float16_under_per_filter_and_per_tile_scales(layout, tile):
    """The staged-V tiles move U and V as float16 words: the TF32-rounded values under a power of two
    per filter (U) and per tile (V), which the epilogue multiplies back exactly. So images scaled by
    2^-40 .. 2^40 and filters by 2^-40 .. 2^40 -- far outside float16's range, and 2^80 apart, where
    one scale for the whole tensor would flush most of them -- give the unscaled call's outputs times
    both scales, bit for bit, forward and grad_input (images scaled in grad_output); zero images and
    filters give zeros; and the unscaled call keeps TF32's error."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    n, c, k, h, w = 5, 48, 136, 14, 18  # 136 filters: three filter blocks (the last padded)
    x_scale = torch.tensor([2.0 ** -40, 1.0, 2.0 ** 40, 0.0, 2.0 ** 17], device="cuda").view(n, 1, 1, 1)
    w_scale = (2.0 ** torch.linspace(-40, 40, k, device="cuda").round()).view(k, 1, 1, 1)
    w_scale[7] = 0.0
    x0, w0 = torch.randn(n, c, h, w, device="cuda"), torch.randn(k, c, 3, 3, device="cuda")
    with using_config("winograd", tile):
        def forward(x, wt):
            y = torchconv.conv2d(x.contiguous(memory_format=fmt), wt, None, padding=1, algorithm="winograd")
            assert torchconv.last_choice().startswith(f"forward:fused:{tile}/"), torchconv.last_choice()
            return y

        def grad_input(gy, wt):
            x = x0.contiguous(memory_format=fmt).requires_grad_(True)
            y = torchconv.conv2d(x, wt, None, padding=1, algorithm="winograd")
            return torch.autograd.grad(y, x, gy.contiguous(memory_format=fmt))[0]

        y0 = forward(x0, w0)
        y = forward(x0 * x_scale, w0 * w_scale)
        gy0 = torch.randn_like(y0)
        gx0 = grad_input(gy0, w0 * w_scale)
        gx = grad_input(gy0 * x_scale.view(n, 1, 1, 1), w0 * w_scale)
    assert torch.isfinite(y).all() and torch.isfinite(gx).all()
    scale = x_scale.double().view(n, 1, 1, 1) * w_scale.double().view(1, k, 1, 1)
    assert torch.equal(y.double(), y0.double() * scale)
    assert (y[3] == 0).all() and (y[:, 7] == 0).all()
    assert torch.equal(gx.double(), gx0.double() * x_scale.double().view(n, 1, 1, 1))
    ref = F.conv2d(x0.double(), w0.double(), None, padding=1)
    cudnn = F.conv2d(x0, w0, None, padding=1)
    assert rel_err(y0, ref) <= allowed_error(rel_err(cudnn, ref), torch.float32)


@needs_cuda
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_staged_v_scales_tiles_of_inputs_near_float32s_smallest_normals(layout):
    """A tile whose inputs lie near float32's smallest normals (2^-120, with 7-bit values in [2^-6, 1]
    so that they stay normal and exact) takes a V scale above 2^127, which the transform applies as two
    factors: the outputs are still the unit image's times 2^-120, bit for bit."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    signs = torch.randint(0, 2, (2, 48, 14, 18), device="cuda") * 2 - 1
    x0 = (torch.randint(1, 65, (2, 48, 14, 18), device="cuda") * signs).float() / 64
    w0 = torch.randn(136, 48, 3, 3, device="cuda") * 2.0 ** 60  # outputs near 2^-60: normal
    with using_config("winograd", "tf32-wgmma-cluster-vbulk"):
        y0 = torchconv.conv2d(x0.contiguous(memory_format=fmt), w0, None, padding=1, algorithm="winograd")
        y = torchconv.conv2d((x0 * 2.0 ** -120).contiguous(memory_format=fmt), w0, None, padding=1, algorithm="winograd")
        assert torchconv.last_choice().startswith("forward:fused:tf32-wgmma-cluster-vbulk/"), torchconv.last_choice()
    assert torch.isfinite(y).all() and y.abs().max() > 0
    assert torch.equal(y.double(), y0.double() * 2.0 ** -120)


@needs_cuda
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_staged_v_scales_each_group_and_image_by_its_own_pixels(layout):
    """V's tile scales come from each pixel's largest |input| over its group's channels only: images
    and groups scaled by 2^-40 .. 2^40 (and one zeroed) give the unscaled call's outputs times their
    own scale, bit for bit, forward and grad_input (groups of 40 channels and 66 filters, not whole
    warps of either; 72 000 pixels of a group and image, more than one pass of the maxima's grid on
    a GPU of up to 140 SMs)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    n, groups, cg, kg, h, w = 3, 2, 40, 66, 120, 100
    exponents = torch.tensor([[-40.0, 0.0, 40.0], [17.0, -23.0, 9.0]], device="cuda")
    scale = (2.0 ** exponents).t().contiguous()  # [image][group]
    scale[1, 1] = 0.0

    def per_group(t, channels):  # t's channels of group g in image i scaled by scale[i, g]
        return t * scale.repeat_interleave(channels, dim=1).view(n, groups * channels, 1, 1)

    x0 = torch.randn(n, groups * cg, h, w, device="cuda")
    wt = torch.randn(groups * kg, cg, 3, 3, device="cuda")
    gy0 = torch.randn(n, groups * kg, h, w, device="cuda")

    def run(x, gy):
        x = x.contiguous(memory_format=fmt).requires_grad_(True)
        y = torchconv.conv2d(x, wt, None, padding=1, groups=groups, algorithm="winograd")
        assert torchconv.last_choice().startswith("forward:fused:tf32-wgmma-cluster-vbulk/"), torchconv.last_choice()
        return y, torch.autograd.grad(y, x, gy.contiguous(memory_format=fmt))[0]

    with using_config("winograd", "tf32-wgmma-cluster-vbulk"):
        y0, gx0 = run(x0, gy0)
        y, gx = run(per_group(x0, cg), per_group(gy0, kg))
    assert torch.isfinite(y).all() and torch.isfinite(gx).all()
    assert torch.equal(y.double(), per_group(y0.double(), kg))
    assert torch.equal(gx.double(), per_group(gx0.double(), cg))


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["tf32", "fp16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_staged_v_kernels_wait_for_the_kernels_before_them(layout, dtype):
    """The staged-V call's kernels start while the kernel before each finishes (dependent launches),
    and each waits for its inputs -- the first of them (the pixel maxima, or for float16's split the
    transform) for the kernel that wrote x: a call whose input is the output of the call just before
    it, with nothing between them, gives the bits the same call gives after a device synchronization;
    and the chain captured in a CUDA graph replays on new inputs with the eager calls' bits."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(4, 64, 30, 26, device="cuda").to(dtype).contiguous(memory_format=fmt)
    w1 = (torch.randn(64, 64, 3, 3, device="cuda") / 24).to(dtype)
    w2 = (torch.randn(72, 64, 3, 3, device="cuda") / 24).to(dtype)
    tile = "3xbf16-wgmma-cluster-vbulk" if dtype == torch.float16 else "tf32-wgmma-cluster-vbulk"

    def chain(inp):
        return torchconv.conv2d(torchconv.conv2d(inp, w1, None, padding=1, algorithm="winograd"), w2, None,
                                padding=1, algorithm="winograd")

    with using_config("winograd", "tf32-wgmma-cluster-vbulk"):
        for _ in range(3):
            y = chain(x)
        assert torchconv.last_choice().startswith(f"forward:fused:{tile}/"), torchconv.last_choice()
        y1 = torchconv.conv2d(x, w1, None, padding=1, algorithm="winograd")
        torch.cuda.synchronize()
        expected = torchconv.conv2d(y1.clone(), w2, None, padding=1, algorithm="winograd")
        assert torch.equal(y, expected)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            chain(x)  # warm-up on the capture stream
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y_graph = chain(x)
        for _ in range(2):
            x.copy_(torch.randn_like(x))
            graph.replay()
            assert torch.equal(y_graph, chain(x))


def assert_staged_whole_equals_sliced(run, x, wt, dtype):
    """`run()` -- a staged-V forward and grad_input of x and wt at padding 1, under the staged-V config
    -- gives the same bits whole and in slices of one tile block (a workspace limit below one block's
    V), and the whole call's output stays within the error bar at `dtype`."""
    old_limit = torchconv.get_workspace_limit()
    try:
        with using_config("winograd", "tf32-wgmma-cluster-vbulk"):
            whole = run()
            torchconv.set_workspace_limit(1)
            sliced = run()
    finally:
        torchconv.set_workspace_limit(old_limit)
    assert torch.equal(whole[0], sliced[0]) and torch.equal(whole[1], sliced[1])
    ref = F.conv2d(x.detach().double(), wt.double(), None, padding=1)
    cudnn = F.conv2d(x.detach(), wt, None, padding=1)
    assert rel_err(whole[0], ref) <= allowed_error(rel_err(cudnn, ref), dtype)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["tf32", "fp16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_staged_v_transform_gives_the_same_bits_for_any_chunks_per_thread(layout, dtype):
    """The staged-V input transform gives each thread several consecutive chunks where its launch has
    threads to spare -- a call of 265 tile blocks and 5 chunks (9 in grad_input) takes 2 or 4 a thread
    on a GPU of up to 265 SMs, the last span short -- and one where it has few: the same call in slices
    of one tile block (a workspace limit below one block). Same V, so the same bits, forward and
    grad_input."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(4, 80, 130, 130, device="cuda").to(dtype).contiguous(memory_format=fmt).requires_grad_(True)
    wt = torch.randn(130, 80, 3, 3, device="cuda").div(27).to(dtype)
    gy = torch.randn(4, 130, 130, 130, device="cuda").to(dtype).contiguous(memory_format=fmt)
    tile = "3xbf16-wgmma-cluster-vbulk" if dtype == torch.float16 else "tf32-wgmma-cluster-vbulk"

    def run():
        y = torchconv.conv2d(x, wt, None, padding=1, algorithm="winograd")
        assert torchconv.last_choice().startswith(f"forward:fused:{tile}/"), torchconv.last_choice()
        return y, torch.autograd.grad(y, x, gy)[0]

    assert_staged_whole_equals_sliced(run, x, wt, dtype)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["tf32", "bf16", "fp16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("c", [16, 24, 40, 56, 72], ids=["C16", "C24", "C40", "C56", "C72"])
def test_staged_v_clusters_walk_their_tile_blocks_with_the_bits_of_one_each(c, layout, dtype):
    """The two-block staged-V clusters of float16 words (float32 under TF32, bfloat16) are persistent:
    as many as the GPU holds walk the tile blocks, each copying its next block's first chunks while it
    finishes the one before, and waiting for its partner to read one block's partial outputs before
    sending the next. A call of 265 tile blocks x 2 filter blocks (several a cluster) gives the bits of
    the same call in one-block slices (a block or two a cluster), forward and grad_input, with 1 to 5
    chunks a block (fewer than, as many as and more than the chunks copied ahead: three through the
    float16 words' four stages, two through float16's split's three); float16's split, a block per
    tile block, alike."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(4, c, 130, 130, device="cuda").to(dtype).contiguous(memory_format=fmt).requires_grad_(True)
    wt = torch.randn(72, c, 3, 3, device="cuda").div(3 * c ** 0.5).to(dtype)
    gy = torch.randn(4, 72, 130, 130, device="cuda").to(dtype).contiguous(memory_format=fmt)
    tile = "3xbf16-wgmma-cluster-vbulk" if dtype == torch.float16 else "tf32-wgmma-cluster-vbulk"

    def run():
        y = torchconv.conv2d(x, wt, None, padding=1, algorithm="winograd")
        assert torchconv.last_choice().startswith(f"forward:fused:{tile}/"), torchconv.last_choice()
        (gx,) = torch.autograd.grad(y, x, gy)
        assert f"grad_input:fused:{tile}/" in torchconv.last_choice(), torchconv.last_choice()
        return y, gx

    assert_staged_whole_equals_sliced(run, x, wt, dtype)


def channels_last_off_16_bytes(t):
    """`t`'s values in a channels_last tensor that starts one element past a 16-byte boundary: its
    pixels' channels are not whole 16-byte words of memory."""
    n, c, h, w = t.shape
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(n, h, w, c).permute(0, 3, 1, 2)
    view.copy_(t)
    assert view.is_contiguous(memory_format=torch.channels_last) and view.data_ptr() % 16 != 0
    return view


def assert_words_and_values_agree(conv, choice, words_kernel, x0, gy0):
    """Runs `conv` forward and grad_input (as `choice`) on x0 channels_last, where the transform reads
    16-byte words (`words_kernel` runs), and on x0 one element past a 16-byte boundary (it does not):
    the same bits. Returns the output."""

    def run(place):
        x = place(x0).requires_grad_(True)
        y = conv(x)
        assert torchconv.last_choice().startswith(f"forward:{choice}/"), torchconv.last_choice()
        (gx,) = torch.autograd.grad(y, x, place(gy0))
        assert f"grad_input:{choice}/" in torchconv.last_choice(), torchconv.last_choice()
        return y, gx

    words, (y, gx) = cuda_kernel_names(lambda: run(lambda t: t.contiguous(memory_format=torch.channels_last)))
    values, (y_odd, gx_odd) = cuda_kernel_names(lambda: run(channels_last_off_16_bytes))
    assert any(words_kernel in name for name in words), words
    assert not any(words_kernel in name for name in values), values
    assert torch.equal(y, y_odd) and torch.equal(gx, gx_odd)
    return y


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape, tiles", [
    ((2, 24, 20, 9, 10, 0, 2), ("mma", "mma")),  # groups of 12 channels and 10 filters
    ((3, 16, 32, 14, 18, 2, 1), ("mma", "mma")),  # padding 2, partial tiles
    ((2, 37, 30, 7, 9, 1, 1), ("mma", "wgmma")),  # 37 channels: the last pair past the group, element loads
    ((1, 30, 37, 8, 6, 1, 1), ("wgmma", "mma")),  # 37 filters: grad_input's element loads
], ids=lambda s: "N{}C{}K{}H{}W{}p{}g{}".format(*s) if len(s) == 7 else "-".join(s))
def test_mma_tile_reads_16bit_channels_last_pairs_with_the_same_bits(shape, tiles, dtype):
    """The mma.sync tile (passes of at most 32 outputs a group) on 16-bit channels_last tensors: each
    lane loads half of a patch (two of its four columns) for two neighbouring channels, each pixel's
    pair one 4-byte word where the group's channel count and the tensor's are even and the tensor is
    aligned to a pair, two elements otherwise, and meets the other half's column it needs by a
    shuffle. Both loads give the same values, so the same input one element past an aligned boundary
    gives the same bits, forward and grad_input (grad_output's filters as its channels); with odd
    channel counts (a pair past the group's last channel) each pass is within 2x of cuDNN's error."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the single wgmma block beside it runs on sm_90a")
    n, c, k, h, w, padding, groups = shape
    x0 = torch.randn(n, c, h, w, device="cuda").to(dtype)
    wt = (torch.randn(k, c // groups, 3, 3, device="cuda") / (3 * (c // groups) ** 0.5)).to(dtype)
    gy0 = torch.randn_like(F.conv2d(x0.float(), wt.float(), None, padding=padding, groups=groups)).to(dtype)
    kw = dict(padding=padding, groups=groups)

    def run(place):
        x = place(x0).requires_grad_(True)
        y = torchconv.conv2d(x, wt, None, algorithm="winograd", **kw)
        (gx,) = torch.autograd.grad(y, x, place(gy0))
        plans = torchconv.last_choice().split()
        return y, gx, [next(p for p in plans if p.startswith(name + ":")) for name in ("forward", "grad_input")]

    y, gx, plans = run(lambda t: t.contiguous(memory_format=torch.channels_last))
    for plan, tile in zip(plans, tiles):
        assert plan.endswith("/a=nhwc") and (":tf32" in plan or ":3xbf16" in plan), plan
        assert (tile == "wgmma") == ("wgmma" in plan), (plan, tile)
    y_odd, gx_odd, _ = run(channels_last_off_16_bytes)
    assert torch.equal(y, y_odd) and torch.equal(gx, gx_odd)

    xd = x0.double().requires_grad_(True)
    ref = F.conv2d(xd, wt.double(), None, **kw)
    (ref_gx,) = torch.autograd.grad(ref, xd, gy0.double())
    xc = x0.contiguous(memory_format=torch.channels_last).requires_grad_(True)
    cudnn = F.conv2d(xc, wt, None, **kw)
    (cudnn_gx,) = torch.autograd.grad(cudnn, xc, gy0.contiguous(memory_format=torch.channels_last))
    assert rel_err(y, ref) <= allowed_error(rel_err(cudnn, ref), dtype)
    assert rel_err(gx, ref_gx) <= allowed_error(rel_err(cudnn_gx, ref_gx), dtype)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [
    (2, 40, 72, 23, 17, 1, 1),  # 40 channels: 5 octets of 6 padded (a short last pass of octets)
    (3, 64, 136, 14, 18, 2, 1),  # padding 2, partial tiles, 3 filter blocks, a partial tile block
    (2, 48, 80, 9, 13, 0, 2),  # groups of 24 channels and 40 filters, no padding
    (1, 128, 64, 34, 34, 1, 1),  # 16 octets: four passes of four octets a thread
], ids=lambda s: "N{}C{}K{}H{}W{}p{}g{}".format(*s))
def test_staged_v_reads_16bit_channels_last_words_with_the_same_bits(shape, dtype):
    """16-bit channels_last inputs whose pixels' group channels are whole 16-byte words (C and the
    channels per group multiples of 8, the tensor 16-byte aligned) are transformed for the staged-V
    tiles by a kernel that loads and stores 16 bytes a lane; other inputs take the kernel that loads a
    value a lane. Both write the same V, so the same input one element past a 16-byte boundary gives
    the same bits, forward and grad_input (grad_output's filters as the channels), with partial tiles,
    padded channels and groups."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    n, c, k, h, w, padding, groups = shape
    tile = "3xbf16-wgmma-cluster-vbulk" if dtype == torch.float16 else "tf32-wgmma-cluster-vbulk"
    x0 = torch.randn(n, c, h, w, device="cuda").to(dtype)
    wt = (torch.randn(k, c // groups, 3, 3, device="cuda") / (3 * (c // groups) ** 0.5)).to(dtype)
    b = torch.randn(k, device="cuda").to(dtype)
    gy0 = torch.randn_like(F.conv2d(x0.float(), wt.float(), None, padding=padding, groups=groups)).to(dtype)

    def conv(x):
        return torchconv.conv2d(x, wt, b, padding=padding, groups=groups, algorithm="winograd")

    with using_config("winograd", "tf32-wgmma-cluster-vbulk"):
        y = assert_words_and_values_agree(conv, f"fused:{tile}", "input_transform_words_kernel", x0, gy0)
    ref = F.conv2d(x0.double(), wt.double(), b.double(), padding=padding, groups=groups)
    cudnn = F.conv2d(x0, wt, b, padding=padding, groups=groups)
    assert rel_err(y, ref) <= allowed_error(rel_err(cudnn, ref), dtype)


@needs_cuda
@pytest.mark.parametrize("shape", [
    (2, 40, 72, 23, 17, 1, 1, False),  # 40 channels, 72 filters: row tiles of 64 partly past the group's rows
    (3, 64, 136, 14, 18, 2, 1, False),  # padding 2, partial tiles, three filter tiles
    (2, 48, 80, 9, 13, 0, 2, False),  # groups of 24 channels and 40 filters, no padding
    (1, 64, 8, 3, 5, 1, 1, False),  # 6 tiles: one chunk, most of it past the image; 8 filters
    (4, 16, 64, 75, 75, 1, 1, True),  # 5776 tiles: 361 chunks over several slices, in passes under a limit
], ids=lambda s: "N{}C{}K{}H{}W{}p{}g{}{}".format(*s[:7], "-passes" if s[7] else ""))
def test_staged_grad_weight_reads_16bit_channels_last_words_with_the_same_bits(shape):
    """The staged grad_weight of bfloat16 channels_last x and grad_output whose pixels' group channels
    and filters are whole 16-byte words (the channels and filters per group multiples of 8, both
    tensors 16-byte aligned) copies a run's pixels into shared memory 16 bytes at a time before it
    transforms them into dM and V (the operand tiles kernel); other tensors take the rows kernel,
    which loads a value a lane. Both write the same operands under the same scales, so the same
    tensors one element past a 16-byte boundary give the same bits -- with partial tiles, rows past
    the group's, groups, and passes that start past the first chunk."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    n, c, k, h, w, padding, groups, passes = shape
    dtype = torch.bfloat16
    x0 = torch.randn(n, c, h, w, device="cuda").to(dtype)
    wt = (torch.randn(k, c // groups, 3, 3, device="cuda") / (3 * (c // groups) ** 0.5)).to(dtype)
    gy0 = torch.randn(n, k, h + 2 * padding - 2, w + 2 * padding - 2, device="cuda").to(dtype)

    def run(place):
        ww = wt.clone().requires_grad_(True)
        y = torchconv.conv2d(place(x0), ww, None, padding=padding, groups=groups, algorithm="winograd")
        (gw,) = torch.autograd.grad(y, ww, place(gy0))
        plan = torchconv.last_choice().split()[-1]
        assert re.fullmatch(r"grad_weight:staged:tf32-wgmma/splits=\d+/a=nhwc", plan), plan
        return gw, plan, torchconv.last_workspace_bytes()

    aligned = lambda t: t.contiguous(memory_format=torch.channels_last)
    with using_config("winograd", "tf32-wgmma-cluster-vbulk"):
        words, (gw, plan, full) = cuda_kernel_names(lambda: run(aligned))
        values, (gw_odd, _, _) = cuda_kernel_names(lambda: run(channels_last_off_16_bytes))
        if passes:
            old_limit = torchconv.get_workspace_limit()
            limit = staged_weight_grad_pass_limit(plan, full, groups, k // groups, c // groups)
            try:
                torchconv.set_workspace_limit(limit)
                in_passes, _, capped = run(aligned)
            finally:
                torchconv.set_workspace_limit(old_limit)
            assert 0 < capped <= limit < full
            assert torch.equal(in_passes, gw)
    assert any("operand_tiles_kernel" in name for name in words), words
    assert not any("operand_rows_kernel" in name for name in words), words
    assert any("operand_rows_kernel" in name for name in values), values
    assert not any("operand_tiles_kernel" in name for name in values), values
    assert torch.equal(gw, gw_odd)
    wd = wt.double().requires_grad_(True)
    (ref,) = torch.autograd.grad(F.conv2d(x0.double(), wd, None, padding=padding, groups=groups), wd, gy0.double())
    wc = wt.clone().requires_grad_(True)
    (cudnn,) = torch.autograd.grad(F.conv2d(x0, wc, None, padding=padding, groups=groups), wc, gy0)
    assert rel_err(gw, ref) <= allowed_error(rel_err(cudnn, ref), dtype)


def odd_offset_copy(t):
    """`t`'s values in a contiguous tensor that starts one element past a boundary of two (4 bytes past
    an 8-byte boundary for float32, 2 past a 4-byte one for 16-bit types): a view at an odd storage
    offset."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    assert view.is_contiguous() and view.data_ptr() % (2 * t.element_size()) == t.element_size()
    return view


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["tf32", "bf16"])
@pytest.mark.parametrize("tile", TF32_TILES)
@pytest.mark.parametrize("shape", [
    (2, 37, 70, 13, 11, 1),  # odd W (rows alternate alignment), odd H * W (so do channel planes)
    (3, 20, 40, 10, 16, 2),  # even planes, padding 2: every patch row starts at an even column
    (2, 21, 40, 9, 14, 1),  # even W, padding 1: every patch row starts at an odd column
    (2, 18, 36, 7, 7, 0),  # 4 x 4 tiles per image: a warp's tiles cross rows and images
], ids=lambda s: "N{}C{}K{}H{}W{}p{}".format(*s))
def test_tf32_reads_nchw_inputs_at_any_alignment(shape, tile, dtype):
    """The tensor-core kernels make no assumption about the alignment of an NCHW input or grad_output
    beyond its element size: one that starts an element past a two-element boundary (a view at an
    odd storage offset) gives the same bits as an aligned copy of it, with rows and channel planes of
    either parity and patch rows starting at odd or even columns. (Where W is even, the aligned copy's
    patch rows load as pairs of elements, the odd one's element by element.)"""
    if tile.startswith("tf32-wgmma") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    n, c, k, h, w, padding = shape
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
    wt = torch.randn(k, c, 3, 3, device="cuda", dtype=dtype)
    b = torch.randn(k, device="cuda", dtype=dtype)
    with using_config("winograd", tile):
        y = torchconv.conv2d(x, wt, b, padding=padding, algorithm="winograd")
        assert torchconv.last_choice() == f"forward:fused:{tile}/splits=1", torchconv.last_choice()
        gy = torch.randn_like(y)
        x_odd = odd_offset_copy(x).requires_grad_(True)
        y_odd = torchconv.conv2d(x_odd, wt, b, padding=padding, algorithm="winograd")
        (gx_odd,) = torch.autograd.grad(y_odd, x_odd, odd_offset_copy(gy))
        x_even = x.clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(torchconv.conv2d(x_even, wt, b, padding=padding, algorithm="winograd"), x_even, gy)
    assert torch.equal(y_odd, y) and torch.equal(gx_odd, gx)
    ref = F.conv2d(x.double(), wt.double(), b.double(), padding=padding)
    cudnn = F.conv2d(x, wt, b, padding=padding)
    assert rel_err(y_odd, ref) <= allowed_error(rel_err(cudnn, ref), dtype)


@needs_cuda
def test_tf32_follows_the_switch_and_the_call_dtype():
    """The same layer: TF32 error with the switch on, IEEE FP32 error with it off; an explicit staged
    or F(4x4) variant takes TF32 tensor cores for its point GEMMs with the switch on
    (test_staged_variants_run_tf32_tensor_cores_on_request); float16 inputs run 3xBF16 with the
    switch on or off, within 2x of cuDNN's float16 error."""
    x = torch.randn(2, 64, 20, 20, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda") / 24
    ref = F.conv2d(x.double(), w.double(), None, 1, 1)
    torch.backends.cudnn.allow_tf32 = True
    y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    assert torchconv.last_choice().startswith("forward:fused:tf32")
    assert 1e-5 < rel_err(y, ref) < 1e-3  # TF32 operands, not IEEE
    for v, choice in (("staged", "forward:staged:tf32"), ("f4x4", "forward:f4x4:staged-tf32")):
        with using_variant("winograd", v):
            assert 1e-5 < rel_err(torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd"), ref) < 1e-2
            assert torchconv.last_choice().startswith(choice)
    xh, wh = x.half(), w.half()
    ref_h = F.conv2d(xh.double(), wh.double(), None, 1, 1)
    yh = torchconv.conv2d(xh, wh, None, 1, 1, algorithm="winograd")
    split = "forward:fused:3xbf16-wgmma" if torch.cuda.get_device_capability() == (9, 0) else "forward:fused:3xbf16-tall"
    assert torchconv.last_choice().startswith(split)
    assert rel_err(yh, ref_h) <= 2 * rel_err(F.conv2d(xh, wh, None, 1, 1), ref_h)
    torch.backends.cudnn.allow_tf32 = False
    assert rel_err(torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd"), ref) < 1e-5
    assert "tf32" not in torchconv.last_choice()
    assert torch.equal(torchconv.conv2d(xh, wh, None, 1, 1, algorithm="winograd"), yh)
    assert torchconv.last_choice().startswith(split)


# (N, C, K, H, W, padding, groups): odd channel and filter counts, partial tiles, H != W, groups.
STAGED_TF32_SHAPES = [
    (1, 40, 72, 13, 17, 1, 1),
    (3, 66, 74, 11, 9, 1, 2),
    (2, 64, 96, 30, 26, 0, 1),
    (1, 33, 5, 7, 6, 2, 1),
]


@needs_cuda
@pytest.mark.parametrize("variant", ["staged", "f4x4"])
@pytest.mark.parametrize("shape", STAGED_TF32_SHAPES, ids=lambda s: "N{}C{}K{}H{}W{}p{}g{}".format(*s))
def test_staged_variants_run_tf32_tensor_cores_on_request(variant, shape):
    """The staged and f4x4 variants of a float32 call while the TF32 switch is on run their point GEMMs
    on TF32 tensor cores: forward and grad_input, and the staged variant's grad_weight (F(4x4)'s
    grad_weight is F(2x2)'s, and stays IEEE FP32 under this variant). Their error is TF32's:
    over the IEEE result's, under 2e-2, and the IEEE result of the same call with the switch off
    differs from theirs by about that error. Staged F(2x2) rounds the same U and V to TF32 as the
    fused mma.sync tile, so the two agree to FP32 summation order. F(4x4)'s error is several times a
    direct TF32 convolution's (docs/winograd.md), which is why auto never takes it."""
    n, c, k, h, w, padding, groups = shape
    gen = torch.Generator(device="cuda").manual_seed(19)
    x = torch.randn(n, c, h, w, device="cuda", generator=gen)
    wt = torch.randn(k, c // groups, 3, 3, device="cuda", generator=gen) / (3 * (c // groups) ** 0.5)
    b = torch.randn(k, device="cuda", generator=gen)
    gy = torch.randn(n, k, h + 2 * padding - 2, w + 2 * padding - 2, device="cuda", generator=gen)
    x64, w64 = x.double().requires_grad_(), wt.double().requires_grad_()
    ref = F.conv2d(x64, w64, b.double(), 1, padding, 1, groups)
    ref_gx, ref_gw = torch.autograd.grad(ref, (x64, w64), gy.double())

    def run():
        xs, ws = x.detach().requires_grad_(), wt.detach().requires_grad_()
        y = torchconv.conv2d(xs, ws, b, 1, padding, 1, groups, algorithm="winograd")
        gx, gw = torch.autograd.grad(y, (xs, ws), gy)
        return y.detach(), gx, gw, torchconv.last_choice()

    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    with using_variant("winograd", variant):
        y, gx, gw, choice = run()
    with using_variant("winograd", "fused"), using_config("winograd", "tf32"):
        y_fused, gx_fused, _, choice_fused = run()
    torch.backends.cudnn.allow_tf32 = False
    with using_variant("winograd", variant):
        y_ieee, gx_ieee, gw_ieee, choice_ieee = run()
    tf32_choice = {"staged": "staged:tf32", "f4x4": "f4x4:staged-tf32"}[variant]
    assert f"forward:{tf32_choice}" in choice and f"grad_input:{tf32_choice}" in choice, choice
    assert "forward:fused:tf32/" in choice_fused and "tf32" not in choice_ieee, (choice_fused, choice_ieee)
    for ours, fused, ieee, exact in ((y, y_fused, y_ieee, ref), (gx, gx_fused, gx_ieee, ref_gx)):
        assert torch.isfinite(ours).all()
        err = rel_err(ours, exact)
        assert rel_err(ieee, exact) < 1e-5 < err < 2e-2, (err, rel_err(ieee, exact))
        assert rel_err(ours, ieee) < 2 * err
        if variant == "staged":
            assert rel_err(ours, fused) < 1e-5, (rel_err(ours, fused), err)
    if variant == "staged":
        assert "grad_weight:staged:tf32/" in choice, choice
        err = rel_err(gw, ref_gw)
        assert 1e-5 < err < 2e-2 and rel_err(gw, gw_ieee) < 2 * err, (err, rel_err(gw, gw_ieee))
    else:
        assert "tf32" not in choice.split()[2], choice
        assert rel_err(gw, ref_gw) < 1e-5  # IEEE FP32


@needs_cuda
def test_staged_tf32_in_workspace_chunks():
    """Under a workspace limit the staged TF32 GEMMs run the batch's tiles in chunks (grad_weight's
    later chunks add to the first's slices): the same TF32 roundings of the same V, M and dM, so the
    result is the unchunked call's but for FP32 summation order, forward and both gradients."""
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(3, 40, 23, 19, device="cuda", generator=gen)
    w = torch.randn(36, 40, 3, 3, device="cuda", generator=gen) / 20
    gy = torch.randn(3, 36, 23, 19, device="cuda", generator=gen)

    def run():
        xs, ws = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = torchconv.conv2d(xs, ws, None, 1, 1, algorithm="winograd")
        full = torchconv.last_workspace_bytes()
        return (y.detach(),) + torch.autograd.grad(y, (xs, ws), gy), full, torchconv.last_choice()

    old_limit = torchconv.get_workspace_limit()
    with using_variant("winograd", "staged"):
        whole, full, choice = run()
        assert all(p.startswith(("forward:staged:tf32/", "grad_input:staged:tf32/", "grad_weight:staged:tf32/"))
                   for p in choice.split()), choice
        try:
            torchconv.set_workspace_limit(full // 4)
            chunked, capped, _ = run()
        finally:
            torchconv.set_workspace_limit(old_limit)
    assert 0 < capped <= full // 4
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    ref = F.conv2d(xd, wd, None, 1, 1)
    refs = (ref,) + torch.autograd.grad(ref, (xd, wd), gy.double())
    for name, a, b, r in zip(("output", "grad_input", "grad_weight"), whole, chunked, refs):
        assert 1e-5 < rel_err(a, r) < 2e-2, name
        assert rel_err(b, a) < 1e-5, (name, rel_err(b, a))


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("variant", ["staged", "f4x4"])
@pytest.mark.parametrize("shape", [
    (2, 40, 72, 13, 17, 1, 1, True),
    (3, 66, 74, 11, 9, 1, 2, False),  # groups of 33 channels and 37 filters
    (1, 33, 48, 7, 6, 2, 1, True),  # partial tiles, padding 2
], ids=shape_id)
def test_16bit_calls_of_the_staged_variants(shape, variant, dtype):
    """bfloat16 and float16 NCHW calls of the staged and f4x4 variants run widened to float32, their
    point GEMMs on tensor cores (channels_last bfloat16 calls of the f4x4 variant on Hopper run
    F(4x4)'s cluster on the bfloat16 tensors: test_f4x4_wgmma_cluster). bfloat16's in TF32, as a
    float32 call under the TF32 switch (its values are exact in TF32; TF32's rounding of U and V,
    F(4x4)'s too, stays within 2x of a bfloat16 convolution's error): each pass is that call's result
    rounded to bfloat16, bit for bit, and within 2x of cuDNN's bfloat16 error. float16's staged F(2x2)
    in 3xBF16 (TF32 rounding of V would cost float16 2.5x its error), forward and both gradients, and
    its F(4x4) in IEEE FP32: each pass is the IEEE result rounded, but for rare elements one float16
    unit off (assert_rounded_ieee)."""
    with using_variant("winograd", variant):
        ours, widened, plans, _, (x, gy) = half_and_float32_passes(shape, "nchw", dtype=dtype)
    tf32 = {"staged": "staged:tf32/", "f4x4": "f4x4:staged-tf32/"}[variant]
    gemms_on_tensor_cores = [tf32 in p for p in plans]
    if dtype == torch.float16:
        if variant == "staged":
            assert all(p.startswith(("forward:staged:3xbf16/", "grad_input:staged:3xbf16/", "grad_weight:staged:3xbf16/"))
                       for p in plans), plans
        else:
            assert not any("tf32" in p or "3xbf16" in p for p in plans), plans
        for name, got, ref in zip(("output", "grad_input", "grad_weight"), ours, widened):
            assert_rounded_ieee(got, ref, name)
        return
    # F(4x4)'s grad_weight is F(2x2)'s, in IEEE FP32 under this variant
    assert gemms_on_tensor_cores == [True, True, variant == "staged"], plans
    for name, got, ref in zip(("output", "grad_input", "grad_weight"), ours, widened):
        assert got.dtype == torch.bfloat16 and torch.equal(got, ref.to(torch.bfloat16)), name
    n, c, k, h, w, padding, groups, bias = shape
    wt = (torch.randn(k, c // groups, 3, 3, device="cuda") / (9 * c // groups) ** 0.5).to(dtype)
    kw = dict(stride=1, padding=padding, dilation=1, groups=groups)
    xd, wd = x.detach().double().requires_grad_(True), wt.double().requires_grad_(True)
    ref = F.conv2d(xd, wd, None, **kw)
    refs = (ref,) + torch.autograd.grad(ref, (xd, wd), gy.double())
    xr, wr = x.detach().requires_grad_(True), wt.detach().requires_grad_(True)
    cudnn = F.conv2d(xr, wr, None, **kw)
    theirs = (cudnn,) + torch.autograd.grad(cudnn, (xr, wr), gy)
    xs, ws = x.detach().requires_grad_(True), wt.detach().requires_grad_(True)
    with using_variant("winograd", variant):
        y = torchconv.conv2d(xs, ws, None, algorithm="winograd", **kw)
        mine = (y,) + torch.autograd.grad(y, (xs, ws), gy)
    for name, got, r, pt in zip(("output", "grad_input", "grad_weight"), mine, refs, theirs):
        assert rel_err(got, r) <= 2 * rel_err(pt, r), (name, rel_err(got, r), rel_err(pt, r))


# (N, C, K, H, W, padding, groups): partial 4x4 tiles (H and W not multiples of 4, H != W), channels
# and filters not multiples of 16 or 64, several filter blocks, tile blocks of 64 tiles and chunks of
# 16 channels, groups, batch 1, padding 0 and 2.
F4X4_CLUSTER_SHAPES = [
    (1, 40, 72, 13, 17, 1, 1),
    (3, 66, 74, 11, 9, 1, 2),
    (2, 64, 136, 30, 26, 0, 1),
    (1, 33, 5, 7, 6, 2, 1),
    (4, 96, 64, 19, 23, 1, 1),
]


@needs_cuda
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "tf32"])
@pytest.mark.parametrize("shape", F4X4_CLUSTER_SHAPES, ids=lambda s: "N{}C{}K{}H{}W{}p{}g{}".format(*s))
def test_f4x4_wgmma_cluster(shape, dtype, layout):
    """On Hopper the f4x4 variant's forward and grad_input of channels_last calls on TF32 tensor cores
    (bfloat16; float32 under the TF32 switch) run F(4x4) on the staged-V wgmma cluster where a group
    has 16 channels or more (grad_input's: the filters): U and V as float16 words under power-of-two
    scales (TF32's precision), the 36 points on a cluster of three blocks, x and y read and written as
    they are; NCHW calls and groups of fewer channels keep the staged pipeline's TF32 GEMMs
    (bfloat16 widened to float32). bfloat16 within 2x of cuDNN's bfloat16 error (F(4x4) at TF32's
    precision is about 1.6x it, docs/winograd.md), forward and grad_input, bias included; float32 at
    F(4x4)'s TF32 error (several times a direct TF32 convolution's), under 2e-2. grad_weight stays
    F(2x2)'s in IEEE FP32, as the variant's elsewhere."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma: Hopper only")
    n, c, k, h, w, padding, groups = shape
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    gen = torch.Generator(device="cuda").manual_seed(29)
    x = torch.randn(n, c, h, w, device="cuda", generator=gen).to(dtype).contiguous(memory_format=fmt)
    wt = (torch.randn(k, c // groups, 3, 3, device="cuda", generator=gen) / (3 * (c // groups) ** 0.5)).to(dtype)
    b = torch.randn(k, device="cuda", generator=gen).to(dtype)
    gy = torch.randn(n, k, h + 2 * padding - 2, w + 2 * padding - 2, device="cuda", generator=gen).to(dtype)
    gy = gy.contiguous(memory_format=fmt)
    kw = dict(stride=1, padding=padding, dilation=1, groups=groups)
    xd, wd = x.double().requires_grad_(), wt.double().requires_grad_()
    ref = F.conv2d(xd, wd, b.double(), **kw)
    refs = (ref,) + torch.autograd.grad(ref, (xd, wd), gy.double())
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    xs, ws = x.detach().requires_grad_(), wt.detach().requires_grad_()
    with using_variant("winograd", "f4x4"):
        y = torchconv.conv2d(xs, ws, b, algorithm="winograd", **kw)
        ours = (y,) + torch.autograd.grad(y, (xs, ws), gy)
        choice = torchconv.last_choice()
    cluster, pipeline = "f4x4:tf32-wgmma-cluster/", "f4x4:staged-tf32/"
    runs = cluster if layout == "nhwc" else pipeline
    # grad_input reduces over the filters: fewer than 16 a group take the pipeline.
    runs_back = runs if k // groups >= 16 else pipeline
    assert f"forward:{runs}" in choice and f"grad_input:{runs_back}" in choice, choice
    assert "tf32" not in choice.split()[2], choice  # grad_weight: F(2x2), IEEE FP32
    for t in ours:
        assert t.dtype == dtype and torch.isfinite(t).all()
    if layout == "nhwc":
        assert ours[0].is_contiguous(memory_format=torch.channels_last)
        assert ours[1].is_contiguous(memory_format=torch.channels_last)
    if dtype == torch.bfloat16:
        xr, wr = x.detach().requires_grad_(), wt.detach().requires_grad_()
        cudnn = F.conv2d(xr, wr, b, **kw)
        theirs = (cudnn,) + torch.autograd.grad(cudnn, (xr, wr), gy)
        for name, got, r, pt in zip(("output", "grad_input"), ours, refs, theirs):
            assert rel_err(got, r) <= 2 * rel_err(pt, r), (name, rel_err(got, r), rel_err(pt, r))
    else:
        for name, got, r in zip(("output", "grad_input"), ours, refs):
            assert 1e-5 < rel_err(got, r) < 2e-2, (name, rel_err(got, r))
    assert rel_err(ours[2], refs[2]) < (2e-2 if dtype == torch.bfloat16 else 1e-5)


@needs_cuda
def test_f4x4_wgmma_cluster_in_workspace_slices():
    """Under a workspace limit the F(4x4) cluster transforms and reduces the tile blocks in slices: the
    same V, U and MMAs per tile, so the same bits as one slice."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma: Hopper only")
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(4, 48, 37, 41, device="cuda", generator=gen).to(torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    w = (torch.randn(80, 48, 3, 3, device="cuda", generator=gen) / 20).to(torch.bfloat16)
    old_limit = torchconv.get_workspace_limit()
    with using_variant("winograd", "f4x4"):
        whole = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
        full = torchconv.last_workspace_bytes()
        assert torchconv.last_choice().startswith("forward:f4x4:tf32-wgmma-cluster/")
        try:
            torchconv.set_workspace_limit(full // 4)
            sliced = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
            capped = torchconv.last_workspace_bytes()
        finally:
            torchconv.set_workspace_limit(old_limit)
    assert 0 < capped < full
    assert torch.equal(sliced, whole)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "tf32"])
@pytest.mark.parametrize("shape", [
    (2, 48, 72, 23, 17, 1, 1),  # 6 octets: the last pass of four octets half empty
    (3, 64, 136, 14, 18, 2, 1),  # padding 2, partial tiles, 3 filter blocks, a partial tile block
    (2, 48, 80, 9, 13, 0, 2),  # groups of 24 channels (an octet of padding) and 40 filters
    (1, 20, 64, 11, 10, 1, 1),  # 20 channels: float32's words of 4, an octet half past the channels
], ids=lambda s: "N{}C{}K{}H{}W{}p{}g{}".format(*s))
def test_f4x4_cluster_reads_channels_last_words_with_the_same_bits(shape, dtype):
    """The F(4x4) cluster's input transform of channels_last x whose pixels' group channels are whole
    16-byte words (8 bfloat16 or 4 float32 channels) loads and stores 16 bytes a lane; other inputs take
    the kernel that loads a value a lane. Both write the same V, so the same input one element past a
    16-byte boundary gives the same bits, forward and grad_input (grad_output's filters as the
    channels), with partial tiles, padding, padded channels and groups."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma: Hopper only")
    n, c, k, h, w, padding, groups = shape
    if dtype == torch.bfloat16 and (c // groups) % 8:
        pytest.skip("bfloat16 words: 8 channels")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    gen = torch.Generator(device="cuda").manual_seed(41)
    x0 = torch.randn(n, c, h, w, device="cuda", generator=gen).to(dtype)
    wt = (torch.randn(k, c // groups, 3, 3, device="cuda", generator=gen) / (3 * (c // groups) ** 0.5)).to(dtype)
    b = torch.randn(k, device="cuda", generator=gen).to(dtype)
    gy0 = torch.randn_like(F.conv2d(x0.float(), wt.float(), None, padding=padding, groups=groups)).to(dtype)

    def conv(x):
        return torchconv.conv2d(x, wt, b, padding=padding, groups=groups, algorithm="winograd")

    with using_variant("winograd", "f4x4"):
        y = assert_words_and_values_agree(conv, "f4x4:tf32-wgmma-cluster", "f4x4_input_transform_words_kernel", x0,
                                          gy0)
    ref = F.conv2d(x0.double(), wt.double(), b.double(), padding=padding, groups=groups)
    assert 0 < rel_err(y, ref) < 2e-2


@needs_cuda
@pytest.mark.parametrize("n, c, k, hw, forward, grad_input", [
    (32, 256, 256, 14, True, True),  # R9: 256 channels and filters, 32 clusters of three (96 blocks)
    (28, 256, 256, 14, False, False),  # 28 clusters (84 blocks): less than two thirds of the SMs
    (32, 512, 512, 7, False, False),  # R12: 16 clusters
    (32, 128, 256, 68, True, True),  # Y8: 128 channels, 4 filter blocks, 1740 blocks (13 waves)
    (8, 128, 256, 68, False, True),  # 444 blocks, under four waves; grad_input reduces 256 filters
    (32, 128, 128, 28, False, False),  # R6: 128 channels and filters on 150 blocks
    (32, 64, 128, 136, True, False),  # Y4: 64 channels, 2 filter blocks on 26 waves; grad_input: one filter block
    (16, 64, 128, 136, True, False),  # 13 waves
    (2, 64, 128, 136, False, False),  # 222 blocks: under four waves
    (32, 64, 64, 56, False, False),  # R2: 64 filters, one filter block
    (16, 256, 128, 40, True, False),  # 50 clusters of two filter blocks; grad_input reduces 128 filters
], ids=lambda v: str(v))
def test_auto_takes_the_f4x4_cluster_for_bfloat16_channels_last(n, c, k, hw, forward, grad_input):
    """Under auto, bfloat16 channels_last forwards and grad_inputs run the F(4x4) cluster, whose error
    is within 2x a bfloat16 cuDNN convolution's, where a group has at least 256 channels (the
    reduction: grad_input's are the filters) and the clusters of three blocks fill two thirds of the
    SMs, or at least 64 channels and 128 outputs and the blocks take four waves of the SMs; the others
    keep F(2x2)'s tiles. grad_weight stays auto's. Block counts are those of a 132-SM GPU."""
    if torch.cuda.get_device_capability() != (9, 0) or torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("wgmma, and the cases' block counts: a 132-SM Hopper GPU")
    gen = torch.Generator(device="cuda").manual_seed(43)
    x = torch.randn(n, c, hw, hw, device="cuda", generator=gen).to(torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    w = (torch.randn(k, c, 3, 3, device="cuda", generator=gen) / (3 * c ** 0.5)).to(torch.bfloat16)
    gy = torch.randn(n, k, hw, hw, device="cuda", generator=gen).to(torch.bfloat16)
    gy = gy.contiguous(memory_format=torch.channels_last)
    y = torchconv.conv2d(x, w, None, padding=1, algorithm="winograd")
    (gx,) = torch.autograd.grad(y, x, gy)
    choice = torchconv.last_choice()
    f4x4 = "f4x4:tf32-wgmma-cluster/"
    assert (f"forward:{f4x4}" in choice) == forward and (f"grad_input:{f4x4}" in choice) == grad_input, choice
    xd, wd = x.detach().double().requires_grad_(), w.double()
    ref = F.conv2d(xd, wd, None, padding=1)
    (ref_gx,) = torch.autograd.grad(ref, xd, gy.double())
    xc = x.detach().requires_grad_()
    cudnn = F.conv2d(xc, w, None, padding=1)
    (cudnn_gx,) = torch.autograd.grad(cudnn, xc, gy)
    assert rel_err(y, ref) <= allowed_error(rel_err(cudnn, ref), torch.bfloat16)
    assert rel_err(gx, ref_gx) <= allowed_error(rel_err(cudnn_gx, ref_gx), torch.bfloat16)


@needs_cuda
@pytest.mark.parametrize("case", ["nchw", "float16", "tf32", "fused-variant", "forced-config"])
def test_auto_keeps_f2x2_where_the_f4x4_cluster_is_not_bfloat16_channels_last_under_auto(case):
    """R9's layer, which bfloat16 channels_last calls run on the F(4x4) cluster under auto, keeps F(2x2)
    in NCHW, in float16 (whose split products the cluster does not run), in float32 under TF32
    (F(4x4)'s TF32 error is several times cuDNN's), under the fused variant and under a forced config."""
    if torch.cuda.get_device_capability() != (9, 0) or torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("wgmma, and the case's block counts: a 132-SM Hopper GPU")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    dtype = {"float16": torch.float16, "tf32": torch.float32}.get(case, torch.bfloat16)
    fmt = torch.contiguous_format if case == "nchw" else torch.channels_last
    x = torch.randn(32, 256, 14, 14, device="cuda").to(dtype).contiguous(memory_format=fmt)
    w = (torch.randn(256, 256, 3, 3, device="cuda") / 48).to(dtype)
    variant = "fused" if case == "fused-variant" else "auto"
    config = using_config("winograd", "tf32-wgmma") if case == "forced-config" else contextlib.nullcontext()
    with using_variant("winograd", variant), config:
        torchconv.conv2d(x, w, None, padding=1, algorithm="winograd")
    assert "f4x4" not in torchconv.last_choice(), torchconv.last_choice()


# 3x3 stride-1 layers that "auto" sends to Winograd at TF32 in NCHW (as many output positions as channels),
# the second on 3 x 3 planes of 8 channels (a layer whose F(4x4) TF32 error was 18x cuDNN's, which
# kept FP32), and an RGB stem (Winograd's shallow kernels at every precision).
TF32_WINOGRAD_LAYERS = [(2, 64, 64, 14, 14), (1, 8, 16, 3, 3), (2, 3, 32, 20, 18)]


@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layer", TF32_WINOGRAD_LAYERS, ids=lambda l: "x".join(map(str, l)))
def test_auto_leaves_f4x4_tf32_tiles_to_a_request(monkeypatch, layer, variant, tf32):
    """The f4x4 variant's TF32 tiles err about 7x a direct TF32 convolution, past the 2x bar: under
    that variant "auto" (the rule, benchmark mode's candidates and both memos) leaves Winograd out of
    TF32 calls, and keeps it at IEEE FP32 (F(4x4) within 1e-5) and under the other variants."""
    n, c, k, h, w = layer
    x, wt = CudaTensorStandIn(n, c, h, w), torch.empty(k, c, 3, 3)
    monkeypatch.setattr(torchconv.selection, "candidate_algorithms", lambda *a, **kw: list(torchconv.ALGORITHMS))
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    with using_variant("winograd", "auto"):
        before = torchconv.selection.auto_algorithm(x, wt, None, (1, 1), (1, 1), (1, 1), 1, measure=False)
        with using_variant("winograd", variant):
            chosen = torchconv.selection.auto_algorithm(x, wt, None, (1, 1), (1, 1), (1, 1), 1, measure=False)
            ruled = torchconv.select_algorithm(x, wt, (1, 1), (1, 1), 1, padding=(1, 1))
            within = torchconv.selection.winograd_within_bars(torchconv.tuning.precision(x))
    assert before == "winograd"  # the layers' choice under the default variant
    assert within == (variant != "f4x4" or not tf32)
    assert chosen == ruled == ("winograd" if within else "gemm")


@needs_cuda
@pytest.mark.parametrize("layer", TF32_WINOGRAD_LAYERS, ids=lambda l: "x".join(map(str, l)))
def test_auto_under_the_f4x4_variant_keeps_tf32_calls_within_the_bar(layer):
    """At TF32 under the f4x4 variant, "auto" (functional, and a module whose choice was remembered
    under the default variant) runs the GEMM, within 2x cuDNN TF32's error; Winograd asked for by
    name still runs."""
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    n, c, k, h, w = layer
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(n, c, h, w, device="cuda", generator=gen)
    conv = torchconv.Conv2d(c, k, 3, padding=1).cuda()
    remembered = lambda: conv.__dict__["_auto_memo"][1]  # noqa: E731 -- the module's choice
    with torch.no_grad():
        conv(x)
        assert remembered() == "winograd"
        with using_variant("winograd", "f4x4"):
            y = torchconv.conv2d(x, conv.weight, conv.bias, padding=1)
            chosen = torchconv.selection.auto_algorithm(x, conv.weight, conv.bias, (1, 1), (1, 1), (1, 1), 1)
            y_module = conv(x)
            assert chosen == remembered() == "gemm"
            asked = torchconv.conv2d(x, conv.weight, conv.bias, padding=1, algorithm="winograd")
        ref = F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1)
        cudnn = F.conv2d(x, conv.weight, conv.bias, padding=1)
    bar = allowed_error(rel_err(cudnn, ref), torch.float32)
    assert rel_err(y, ref) <= bar and rel_err(y_module, ref) <= bar
    assert rel_err(asked, ref) < 1e-2  # Winograd by name still runs, F(4x4) as asked


@needs_cuda
def test_f4x4_cluster_leaves_groups_of_fewer_than_16_channels_to_the_pipeline():
    """A chunk of the F(4x4) cluster is 16 channels: groups of fewer (an RGB stem's 3) run the f4x4
    variant's staged pipeline; from 16 channels a group, the cluster."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma: Hopper only")
    x = torch.randn(2, 16, 20, 20, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(64, 8, 3, 3, device="cuda") / 8).to(torch.bfloat16)
    with using_variant("winograd", "f4x4"):
        for groups, runs in ((2, "f4x4:staged-tf32/"), (1, "f4x4:tf32-wgmma-cluster/")):
            wg = w if groups == 2 else torch.cat([w, w], 1)
            y = torchconv.conv2d(x, wg, None, padding=1, groups=groups, algorithm="winograd")
            assert torchconv.last_choice().startswith(f"forward:{runs}"), (groups, torchconv.last_choice())
            ref = F.conv2d(x.double(), wg.double(), None, padding=1, groups=groups)
            cudnn = F.conv2d(x, wg, None, padding=1, groups=groups)
            assert rel_err(y, ref) <= allowed_error(rel_err(cudnn, ref), torch.bfloat16)


@needs_cuda
@pytest.mark.parametrize("n, c, k, hw, choice", [
    (1, 256, 256, 14, "TALL"),  # C*K/(C+K) = 128: the IEEE rule's F(4x4); 64-filter blocks
    (4, 256, 256, 64, "BULK"),  # 256 channels, 512 blocks: staged V, clusters of 2
    (2, 128, 64, 20, "TALL"),  # 128 channels, 64 filters
    (2, 128, 32, 20, "fused:tf32/"),  # 32 filters: one 32-filter block holds them
    (2, 64, 33, 20, "TALL"),  # 33 filters: more than one 32-filter block
    (2, 16, 128, 136, "TALL"),  # few channels, many pixels
    (8, 256, 512, 40, "BULK"),  # 256 channels, 800 blocks: staged V, clusters of 2
    (8, 256, 136, 40, "BULK"),  # 136 filters (three filter blocks): 300 blocks, more than one wave
    (8, 256, 128, 40, "TALL"),  # 128 filters, two filter blocks, 200 blocks: V staged would not repay
    (32, 256, 128, 40, "BULK"),  # the same over 800 blocks (two waves): staged V in float16 words
    (32, 128, 128, 40, "TALL"),  # 128 filters over 128 channels: the single block however many blocks
    (4, 512, 72, 64, "TALL"),  # 72 filters: the single wgmma block however long the reduction
    (32, 512, 512, 7, "BULK"),  # 128 blocks, one wave: staged V, clusters of 2
    (11, 256, 192, 16, "BULK"),  # 66 blocks, half the GPU
    (10, 256, 192, 16, "TALL"),  # 60 blocks: the single wgmma block
    (8, 255, 512, 40, "BULK"),  # 255 channels: staged V from 128 channels on
    (8, 128, 512, 40, "BULK"),  # 128 channels, 800 blocks: staged V
    (8, 127, 512, 40, "TALL"),  # fewer channels: the single wgmma block
    (10, 128, 192, 16, "TALL"),  # 128 channels, 60 blocks: the single wgmma block
    (2, 256, 512, 10, "TALL"),  # 16 blocks: a fraction of one wave
    (2, 3, 32, 20, "fused:shallow"),  # an RGB stem keeps the shallow kernel (IEEE FP32)
    (2, 32, 4, 20, "fused:narrow"),  # 4 filters: the narrow kernel (IEEE FP32)
])
def test_auto_rule_under_tf32(n, c, k, hw, choice):
    """With TF32 on, auto runs the tensor-core fused F(2x2) on every layer but those of the shallow and
    narrow kernels: never IEEE F(4x4), which the tensor-core kernel outran on every 3x3 suite layer.
    Its tile has 64 filters where a group has more than 32 filters (TALL): on Hopper's wgmma, else
    mma.sync's tf32-tall (channels_last calls: test_channels_last_tile_rule_under_tf32). From 128
    channels and more than 128 filters per group a wgmma cluster tile with V staged (the input
    transformed once, where each filter block would load it from NCHW) where the two-block clusters'
    grid fills half the GPU, however many waves (BULK: the clusters of eight that share V and U by
    multicast are a forced config only); with at most 128 filters (two filter blocks) V staged would
    not repay its round trip, but for 128 filters over at least 256 channels on a grid that fills the
    GPU twice (test_grad_input_takes_staged_v_only_on_grids_of_two_waves).
    Block counts are those of a 132-SM GPU (H100, H200)."""
    torch.backends.cudnn.allow_tf32 = True
    hopper = torch.cuda.get_device_capability() == (9, 0)
    if hopper and torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the cases' block counts are a 132-SM GPU's")
    tall = "fused:tf32-wgmma/" if hopper else "fused:tf32-tall/"
    choice = choice.replace("BULK", "fused:tf32-wgmma-cluster-vbulk/" if hopper else "TALL")
    x = torch.randn(n, c, hw, hw, device="cuda")
    w = torch.randn(k, c, 3, 3, device="cuda")
    torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    assert torchconv.last_choice().startswith("forward:" + choice.replace("TALL", tall)), torchconv.last_choice()


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["tf32", "fp16"])
@pytest.mark.parametrize("n, c, k, hw, forward, grad_input", [
    (32, 512, 512, 7, "BULK", "SINGLE"),  # R12: 128 blocks either way, one wave
    (32, 256, 256, 14, "BULK", "SINGLE"),  # R9: 200 blocks, less than two waves
    (8, 256, 256, 40, "BULK", "BULK"),  # 400 blocks: more than two waves
    (8, 192, 128, 40, "SINGLE", "BULK"),  # 128 filters: the forward single; grad_input reduces them into 192 outputs
    (8, 96, 256, 40, "SINGLE", "SINGLE"),  # 96 channels: the forward single, and grad_input's 96 outputs
    # 128 outputs (two filter blocks) over 256 filters, 580 blocks: staged in float16 words, not split
    (8, 128, 256, 68, "BULK", "WORDS"),
    (8, 128, 128, 68, "SINGLE", "SINGLE"),  # 128 outputs over 128 filters: the single block
    (2, 128, 256, 40, "BULK", "SINGLE"),  # 128 outputs over 256 filters, 52 blocks: under two waves
])
def test_grad_input_takes_staged_v_only_on_grids_of_two_waves(n, c, k, hw, forward, grad_input, dtype):
    """An NCHW grad_input under TF32 takes the staged-V cluster tile where its two-block clusters'
    grid fills the GPU twice, and the single wgmma block below that, where the forward already
    takes staged V from half the GPU on (test_auto_rule_under_tf32): a backward leaves the GPU
    waiting on its host work between launches, and the staged chain adds launches. float16 calls
    follow the same rule on their split operands (3xbf16-wgmma-cluster-vbulk, 3xbf16-wgmma), but
    for calls of two filter blocks (128 outputs) over at least 256 channels: those take staged V
    in float16 words only (WORDS: float32 under TF32 staged, float16's split on the single block).
    Block counts of a 132-SM GPU; grad_input within cuDNN's error bar at the call's precision."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma runs on sm_90a")
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the cases' block counts are a 132-SM GPU's")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    products = "3xbf16" if dtype == torch.float16 else "tf32"
    names = {"BULK": f"fused:{products}-wgmma-cluster-vbulk/", "SINGLE": f"fused:{products}-wgmma/"}
    names["WORDS"] = names["SINGLE" if dtype == torch.float16 else "BULK"]
    x = torch.randn(n, c, hw, hw, device="cuda").to(dtype).requires_grad_(True)
    w = (torch.randn(k, c, 3, 3, device="cuda") / (9 * c) ** 0.5).to(dtype)
    y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    gy = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, gy)
    choice = torchconv.last_choice()
    assert choice.startswith("forward:" + names[forward]) and "grad_input:" + names[grad_input] in choice, choice
    xd = x.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(F.conv2d(xd, w.double(), None, 1, 1), xd, gy.double())
    (cudnn,) = torch.autograd.grad(F.conv2d(x, w, None, 1, 1), x, gy)
    assert rel_err(gx, ref) <= allowed_error(rel_err(cudnn, ref), dtype)


@needs_cuda
@pytest.mark.parametrize("n, c, k, hw, splits, wgmma_splits", [
    (32, 64, 128, 68, 66, 65),  # Y4: 4 blocks; two grids' worth, 264 blocks, fill two waves exactly
    # Y8: 16 blocks; two grids' worth (17 slices) leave a third wave of 8 blocks, 23 fill it to 93%. On
    # Hopper dM and V are staged there, in passes under the workspace limit, and the slices are
    # chosen for the passes (test_staged_grad_weight_passes_fill_the_gpu_under_the_default_limit):
    # 16, two passes of 8 slices, 128 blocks each
    (32, 128, 256, 68, 23, 16),
    # Y12: 64 blocks; 5 slices fill three waves to 81%, 6 to 97%; staged on Hopper: 2, one pass of 128 blocks
    (32, 256, 512, 34, 6, 2),
    # R9: 32 blocks x 12 slices, 97% of three waves; staged on Hopper (6 x 2^24 products): 4 slices
    (32, 256, 256, 14, 12, 4),
])
def test_tf32_grad_weight_slices_fill_their_waves(n, c, k, hw, splits, wgmma_splits):
    """grad_weight on tensor cores splits the tiles it reduces over into slices, one block per (filter
    block, channel block, slice), each summed into its own workspace slice: at least two grids' worth
    of blocks, and the fewest slices from there whose blocks fill the waves they take to 90% (a
    block's slice is its whole work, so a partial last wave idles the rest of the GPU). A slice's
    tiles are whole chunks, 8 tiles on mma.sync and 16 on Hopper's wgmma block, whose rounding can
    leave one slice fewer (wgmma_splits); the staged grad_weight chooses its own (wgmma_splits).
    Counts of a 132-SM GPU (H100, H200) under the default workspace limit."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the cases' slice counts are a 132-SM GPU's")
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    limit = torchconv.get_workspace_limit()
    torchconv.set_workspace_limit(256 << 20)
    try:
        x = torch.randn(n, c, hw, hw, device="cuda")
        w = torch.randn(k, c, 3, 3, device="cuda", requires_grad=True)
        y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
        torch.autograd.grad(y, w, torch.randn_like(y))
    finally:
        torchconv.set_workspace_limit(limit)
    if torch.cuda.get_device_capability() == (9, 0):
        splits = wgmma_splits  # 64 filters a block either way
        # dM and V staged from 128 channels and filters over 3 x 2^24 products (float16 words)
        staged = c >= 128 and k >= 128 and c * k * n * (hw // 2) ** 2 >= 3 << 24
        tile = "staged:tf32-wgmma" if staged else "fused:tf32-wgmma"
    else:
        tile = "fused:tf32-tall"
    assert torchconv.last_choice().split()[-1] == f"grad_weight:{tile}/splits={splits}", torchconv.last_choice()


# Relative error bars of a grad_weight against float64 of the same input values: IEEE FP32 (or TF32
# products, under TF32), bfloat16's rounding of the result (2^-9), float16's (2^-11, its products split).
ROUNDED_GRAD_WEIGHT_BAR = {torch.float32: 2e-3, torch.bfloat16: 1e-2, torch.float16: 2e-3}


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["tf32", "bf16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_tensor_core_grad_weight_keeps_nans(dtype, layout):
    """A NaN in the input or grad_output reaches every grad_weight entry PyTorch makes non-finite,
    through the tensor-core grad_weight blocks' TF32 rounding: a NaN that a transform computes is
    float32's 0x7FFFFFFF, which the rounding's add of half a TF32 unit would carry into the sign bit
    (a zero to the MMA), so NaNs and infinities pass unrounded (tf32_bits_for_mma). Forced tiles: the
    fused mma.sync and wgmma grad_weight blocks (sm_90a) and the default."""
    torch.backends.cudnn.allow_tf32 = True  # conftest restores it
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(2, 40, 13, 11, dtype=torch.float64)
    gy = torch.randn(2, 72, 13, 11, dtype=torch.float64)
    x[1, 7, 5, 4] = float("nan")
    gy[0, 50, 8, 2] = float("nan")
    w = torch.randn(72, 40, 3, 3, dtype=torch.float64, requires_grad=True)
    (ref,) = torch.autograd.grad(F.conv2d(x, w, None, 1, 1), w, gy)
    bad_ref = ~torch.isfinite(ref)
    assert bad_ref[:, 7].all() and bad_ref[50].all()
    tiles = ["tf32"] + (["tf32-wgmma"] if torch.cuda.get_device_capability() == (9, 0) else []) + [None]
    for tile in tiles:
        xx = x.to(dtype).cuda().contiguous(memory_format=fmt)
        ww = w.detach().to(dtype).cuda().requires_grad_(True)
        with using_config("winograd", tile) if tile else contextlib.nullcontext():
            y = torchconv.conv2d(xx, ww, None, 1, 1, algorithm="winograd")
            (gw,) = torch.autograd.grad(y, ww, gy.to(dtype).cuda().contiguous(memory_format=fmt))
        if tile:
            assert "grad_weight:fused:" + tile + "/" in torchconv.last_choice(), torchconv.last_choice()
        bad = ~torch.isfinite(gw.double().cpu())
        assert bad[bad_ref].all(), f"{tile}: a grad_weight entry PyTorch makes NaN is finite in ours"
        good = ~bad
        err = rel_err(gw.double().cpu()[good], ref[good])
        assert err < ROUNDED_GRAD_WEIGHT_BAR[dtype], f"{tile}: finite grad_weight entries off by {err:.2e}"


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_grad_weight_finish_of_many_slices(dtype):
    """grad_weight of a layer with few (filter, channel) pairs and many tiles: its slices (8 to 63,
    which the finishing kernel reads itself, four slices' loads in flight a lane, the last few one
    at a time: 35 slices on the IEEE FP32 kernel, 18 on Hopper's wgmma block) are all summed --
    against float64, and the same bits twice."""
    torch.backends.cudnn.allow_tf32 = False  # conftest restores it
    # float64 of the values the call sees
    x = torch.randn(1, 24, 107, 92, device="cuda").to(dtype).double()
    gy = torch.randn(1, 40, 107, 92, device="cuda").to(dtype).double()
    w = torch.randn(40, 24, 3, 3, device="cuda", dtype=torch.float64, requires_grad=True)
    (ref,) = torch.autograd.grad(F.conv2d(x, w, None, 1, 1), w, gy)
    ww = w.detach().to(dtype).requires_grad_(True)
    grads = []
    for _ in range(2):
        y = torchconv.conv2d(x.to(dtype), ww, None, 1, 1, algorithm="winograd")
        grads.append(torch.autograd.grad(y, ww, gy.to(dtype))[0])
    splits = int(re.search(r"grad_weight:\S*/splits=(\d+)", torchconv.last_choice()).group(1))
    assert 8 <= splits < 64 and (splits - 1) % 4 != 0, torchconv.last_choice()
    assert torch.equal(grads[0], grads[1])
    err = rel_err(grads[0], ref)
    bar = 1e-5 if dtype == torch.float32 else ROUNDED_GRAD_WEIGHT_BAR[dtype]  # IEEE FP32 (TF32 off)
    assert err < bar, f"grad_weight off by {err:.2e}"


@needs_cuda
@pytest.mark.parametrize("tile", WGMMA_TILES)
def test_tf32_wgmma_forced_off_hopper_is_a_value_error(tile):
    """The wgmma tiles run on sm_90a only: forced elsewhere, a TF32 call raises a ValueError naming
    the config."""
    if torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("wgmma runs here")
    torch.backends.cudnn.allow_tf32 = True
    x, w = torch.randn(1, 16, 8, 8, device="cuda"), torch.randn(64, 16, 3, 3, device="cuda")
    with using_config("winograd", tile), pytest.raises(ValueError, match=f"'{tile}' .* sm_90a"):
        torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")


@needs_cuda
@pytest.mark.parametrize("n, hw, c, k, groups, choice", [
    (2, (11, 13), 256, 192, 1, "CLUSTER"),  # 256 channels, 192 filters: the cluster tile (on Hopper)
    (2, (11, 13), 512, 168, 1, "CLUSTER"),  # and beyond; 168 filters: a partial filter block
    (2, (11, 13), 512, 128, 1, "SINGLE"),  # 128 filters: the single 64-filter wgmma block
    (2, (11, 13), 256, 64, 1, "SINGLE"),  # 64 filters, one block: the same
    (2, (11, 13), 255, 64, 1, "SINGLE"),  # fewer channels: the single 64-filter wgmma block
    (2, (11, 13), 256, 128, 2, "SINGLE"),  # 256 channels in 2 groups: a group's 128 count
    (2, (11, 13), 512, 32, 1, "fused:tf32/"),  # 32 filters: one 32-filter block holds them
    (32, (14, 14), 256, 256, 1, "BULK"),  # 200 blocks: half the GPU, staged V
    (8, (14, 14), 256, 256, 1, "CLUSTER"),  # 56 blocks: less than half the GPU
    (8, (14, 14), 192, 256, 1, "SINGLE"),  # 56 blocks of 192 channels: the fused cluster from 256 only
    (32, (14, 14), 128, 256, 1, "BULK"),  # 128 channels, 200 blocks: staged V
    (32, (17, 17), 256, 512, 1, "BULK"),  # 656 blocks: staged V, clusters of 2
])
def test_channels_last_tile_rule_under_tf32(n, hw, c, k, groups, choice):
    """channels_last calls under TF32 with more than 32 filters per group take Hopper's wgmma cluster
    tile (64 filters x 64 tiles, the points split over two blocks) from 129 filters per group on, and
    the single wgmma block (64 filters x 32 tiles) below; off Hopper mma.sync's 64-filter tile. Where
    the two-block clusters' grid fills half the GPU (block counts of a 132-SM GPU) and a group has at
    least 128 channels, as in NCHW, V is staged and the two-block clusters read it
    (tf32-wgmma-cluster-vbulk); on smaller grids the fused cluster from 256 channels, the single block
    below. The output matches cuDNN's TF32 error bar."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    if hopper and torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the cases' block counts are a 132-SM GPU's")
    choice = choice.replace("BULK", "fused:tf32-wgmma-cluster-vbulk/" if hopper else "fused:tf32-tall/")
    choice = choice.replace("CLUSTER", "fused:tf32-wgmma-cluster/" if hopper else "fused:tf32-tall/")
    choice = choice.replace("SINGLE", "fused:tf32-wgmma/" if hopper else "fused:tf32-tall/")
    torch.backends.cudnn.allow_tf32 = True
    x = torch.randn(n, c, *hw, device="cuda").contiguous(memory_format=torch.channels_last)
    w = torch.randn(k, c // groups, 3, 3, device="cuda") / 30
    y = torchconv.conv2d(x, w, None, 1, 1, 1, groups, algorithm="winograd")
    assert torchconv.last_choice() == f"forward:{choice}splits=1/a=nhwc", torchconv.last_choice()
    ref = F.conv2d(x.double(), w.double(), None, 1, 1, 1, groups)
    cudnn_err = rel_err(F.conv2d(x, w, None, 1, 1, 1, groups), ref)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert rel_err(y, ref) <= allowed_error(cudnn_err, torch.float32)


@needs_cuda
@pytest.mark.parametrize("c, k, groups, variant, choice", [
    (64, 64, 1, "auto", "fused:tf32-tall/"),  # more than 32 filters: 64-filter blocks (on wgmma on Hopper)
    (64, 32, 1, "auto", "fused:tf32/"),  # 32 filters
    (48, 96, 3, "fused", "fused:tf32/"),  # groups of 32 filters
    (8, 64, 1, "auto", "fused:narrow/"),  # at most 8 channels per group: the narrow IEEE tile
    (64, 4, 1, "auto", "fused:default/"),  # 4 filters: IEEE FP32, like the forward's narrow kernel
    (64, 64, 1, "staged", "staged:tf32/"),  # an explicit staged variant: its own GEMM on TF32 tensor cores
    (6, 64, 1, "staged", "staged:narrow/"),  # ... but for the narrow IEEE tile's layers
])
def test_grad_weight_under_tf32(c, k, groups, variant, choice):
    """With TF32 on, grad_weight runs its point GEMMs on tensor cores where the forward would, but for
    the layers of the narrow IEEE tile and those of at most 4 filters; each choice within 2x of cuDNN's
    error at its precision (TF32 for the tensor-core tiles, else IEEE FP32's bar)."""
    torch.backends.cudnn.allow_tf32 = True
    x = torch.randn(2, c, 18, 17, device="cuda")
    w = torch.randn(k, c // groups, 3, 3, device="cuda", requires_grad=True)
    with using_variant("winograd", variant):
        y = torchconv.conv2d(x, w, None, 1, 1, 1, groups, algorithm="winograd")
        gy = torch.randn_like(y)
        (gw,) = torch.autograd.grad(y, (w,), gy)
    if choice == "fused:tf32-tall/" and torch.cuda.get_device_capability() == (9, 0):
        choice = "fused:tf32-wgmma/"  # grad_weight's wgmma block, the same 64-filter blocks
    assert "grad_weight:" + choice in torchconv.last_choice(), torchconv.last_choice()
    wd = w.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(F.conv2d(x.double(), wd, None, 1, 1, 1, groups), (wd,), gy.double())
    if "tf32" in choice:
        (cudnn,) = torch.autograd.grad(F.conv2d(x, w, None, 1, 1, 1, groups), (w,), gy)
        assert rel_err(gw, ref) <= allowed_error(rel_err(cudnn, ref), torch.float32)
    else:
        assert rel_err(gw, ref) <= 1e-5


@needs_cuda
@pytest.mark.parametrize("tf32", [False, True])
@pytest.mark.parametrize("shape", [
    (2, 3, 32, 19, 23, 1, 1, True),  # an RGB stem, one 32-filter block
    (1, 4, 40, 9, 8, 0, 1, False),  # two filter blocks, the second partial
    (2, 6, 20, 13, 11, 2, 2, True),  # groups: 3 channels and 10 filters each
    (3, 2, 7, 1, 9, 1, 1, True),  # H = 1: partial tiles only (one channel would be NCHW and channels_last alike)
    (1, 2, 33, 31, 30, 1, 1, True),  # 240 tiles: two 128-tile blocks
], ids=shape_id)
def test_shallow_kernel_reads_channels_last(shape, tf32):
    """Layers of at most 4 channels per group (the shallow kernel, IEEE FP32 with TF32 on or off) read
    and write channels_last operands themselves in float32 (last_choice's /a=nhwc, no NCHW copies),
    with the NCHW kernel's result; so do their grad_weight (the NCHW call's bits: the same sums in the
    same order) and the forward and grad_input of a layer of at most 4 filters (the narrow kernel and
    a shallow reduction). float64 keeps the NCHW copies."""
    n, c, k, h, w, padding, groups, bias = shape
    torch.backends.cudnn.allow_tf32 = tf32  # conftest restores it
    x = torch.randn(n, c, h, w, device="cuda")
    wt = torch.randn(k, c // groups, 3, 3, device="cuda")
    b = torch.randn(k, device="cuda") if bias else None
    kw = dict(padding=padding, groups=groups, algorithm="winograd")
    y_nchw = torchconv.conv2d(x, wt, b, **kw)
    y = torchconv.conv2d(x.contiguous(memory_format=torch.channels_last), wt, b, **kw)
    assert torchconv.last_choice() == "forward:fused:shallow/splits=1/a=nhwc", torchconv.last_choice()
    assert y.is_contiguous(memory_format=torch.channels_last)
    ref = F.conv2d(x.double(), wt.double(), b.double() if bias else None, padding=padding, groups=groups)
    assert rel_err(y, y_nchw) <= 1e-6 and rel_err(y, ref) <= 1e-5

    wg = wt.detach().requires_grad_(True)
    gy = torch.randn_like(y)
    (gw,) = torch.autograd.grad(torchconv.conv2d(x.contiguous(memory_format=torch.channels_last), wg, b, **kw), wg, gy)
    assert re.fullmatch(r"grad_weight:fused:shallow/splits=\d+/a=nhwc", torchconv.last_choice().split()[-1])
    (gw_nchw,) = torch.autograd.grad(torchconv.conv2d(x, wg, b, **kw), wg, gy.contiguous())
    assert torch.equal(gw, gw_nchw)
    wd = wt.double().requires_grad_(True)
    (ref_gw,) = torch.autograd.grad(F.conv2d(x.double(), wd, None, padding=padding, groups=groups), wd, gy.double())
    assert rel_err(gw, ref_gw) <= 1e-5

    # A narrow layer (at most 4 filters per group): the narrow forward, its grad_input a shallow
    # reduction over them.
    xs = torch.randn(n, 8 * groups, h, w, device="cuda").contiguous(memory_format=torch.channels_last)
    xs.requires_grad_(True)
    wn = torch.randn(c, 8, 3, 3, device="cuda")
    yn = torchconv.conv2d(xs, wn, None, **kw)
    assert torchconv.last_choice() == "forward:fused:narrow/splits=1/a=nhwc", torchconv.last_choice()
    assert yn.is_contiguous(memory_format=torch.channels_last)
    assert rel_err(yn, F.conv2d(xs.detach().double(), wn.double(), None, padding=padding, groups=groups)) <= 1e-5
    gy = torch.randn_like(yn)
    (gx,) = torch.autograd.grad(yn, xs, gy)
    assert "grad_input:fused:shallow/splits=1/a=nhwc" in torchconv.last_choice(), torchconv.last_choice()
    assert gx.is_contiguous(memory_format=torch.channels_last)
    xd = xs.detach().double().requires_grad_(True)
    (ref_gx,) = torch.autograd.grad(F.conv2d(xd, wn.double(), None, padding=padding, groups=groups), xd, gy.double())
    assert rel_err(gx, ref_gx) <= 1e-5

    xd = x.double().contiguous(memory_format=torch.channels_last)
    yd = torchconv.conv2d(xd, wt.double(), b.double() if bias else None, **kw)
    assert torchconv.last_choice() == "forward:fused:shallow/splits=1", torchconv.last_choice()
    assert yd.is_contiguous() and rel_err(yd, ref) <= 1e-12  # float64 on CUDA: NCHW, as PyTorch returns it


@needs_cuda
def test_channels_last_under_tf32_and_ieee():
    """A channels_last call (the input's format or the weight's, as PyTorch decides the output's) runs
    the tensor-core kernels on its NHWC operands under TF32; the staged variant (its batched GEMM on
    TF32 tensor cores) and the IEEE kernels (TF32 off) compute it through NCHW copies. Every output
    comes back channels_last."""
    single = "tf32-wgmma" if torch.cuda.get_device_capability() == (9, 0) else "tf32-tall"
    x = torch.randn(2, 48, 15, 14, device="cuda")
    w = torch.randn(40, 48, 3, 3, device="cuda") / 20
    ref = F.conv2d(x.double(), w.double(), None, 1, 1)
    cudnn_err = rel_err(F.conv2d(x.contiguous(memory_format=torch.channels_last), w, None, 1, 1), ref)
    torch.backends.cudnn.allow_tf32 = True
    for xs, ws in ((x.contiguous(memory_format=torch.channels_last), w),
                   (x, w.contiguous(memory_format=torch.channels_last))):
        y = torchconv.conv2d(xs, ws, None, 1, 1, algorithm="winograd")
        assert torchconv.last_choice() == f"forward:fused:{single}/splits=1/a=nhwc", torchconv.last_choice()
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert rel_err(y, ref) <= allowed_error(cudnn_err, torch.float32)
    xs = x.contiguous(memory_format=torch.channels_last)
    with using_variant("winograd", "staged"):
        y = torchconv.conv2d(xs, w, None, 1, 1, algorithm="winograd")
    assert torchconv.last_choice().startswith("forward:staged:tf32") and "nhwc" not in torchconv.last_choice()
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert rel_err(y, ref) <= allowed_error(cudnn_err, torch.float32)
    torch.backends.cudnn.allow_tf32 = False
    y = torchconv.conv2d(xs, w, None, 1, 1, algorithm="winograd")
    assert "tf32" not in torchconv.last_choice() and "nhwc" not in torchconv.last_choice()
    assert y.is_contiguous(memory_format=torch.channels_last) and rel_err(y, ref) < 1e-5


@pytest.mark.parametrize("tiles", [1, 7, 100])
@pytest.mark.parametrize("variant_name, points", [("staged", 16), ("f4x4", 36)])
@pytest.mark.parametrize("shape", [SHAPES[i] for i in (2, 3, 4, 6, 11)], ids=shape_id)
def test_cpu_tile_chunks(shape, variant_name, points, tiles):
    """The CPU Winograd transforms and multiplies its tiles in chunks (within the workspace limit and
    a core's cache): chunks of 1, 7 and 100 tiles, which end inside tile rows and span images, give
    the same answer forward and backward (float64)."""
    n, c, k, h, w, padding, groups, bias = shape
    old_limit = torchconv.get_workspace_limit()
    try:
        torchconv.set_workspace_limit(tiles * (points * (c + k) // groups * 8 + 40))
        with using_variant("winograd", variant_name):
            check_forward_backward(*shape, "cpu", torch.float64, f"cpu {variant_name} chunks of {tiles}")
    finally:
        torchconv.set_workspace_limit(old_limit)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("variant_name", ["staged", "f4x4"])
def test_cpu_neighbouring_tiles_transformed_together_keep_each_tiles_bits(variant_name, dtype):
    """The CPU transforms take 32 bytes' worth of tiles at once (a tile a vector lane), each lane
    running the scalar transform's operations -- F(2x2) neighbouring tiles along a row inside the
    input (and, for the output, inside the output), F(4x4) any consecutive tiles: a 40-wide plane's
    outputs equal, bit for bit, those of the same rows cut to 20 columns (too narrow for F(2x2)'s
    runs of lanes), forward and grad_input."""
    x = torch.randn(2, 9, 11, 40, dtype=dtype)
    w = torch.randn(7, 9, 3, 3, dtype=dtype)
    with using_variant("winograd", variant_name):
        wide = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
        narrow = torchconv.conv2d(x[..., :20].contiguous(), w, None, 1, 1, algorithm="winograd")
        # grad_input is a forward over grad_output with the turned filters: the same transforms.
        gy = torch.randn_like(wide)
        backward = torch.ops.torchconv.conv2d_winograd_backward
        gx_wide = backward(gy, x, w, [1, 1], [1, 1], [1, 1], 1, [True, False, False])[0]
        gx_narrow = backward(gy[..., :20].contiguous(), x[..., :20].contiguous(), w, [1, 1], [1, 1], [1, 1], 1,
                             [True, False, False])[0]
    assert torch.equal(wide[..., :16], narrow[..., :16])
    assert torch.equal(gx_wide[..., :16], gx_narrow[..., :16])
    ref = torch.nn.functional.conv2d(x.double(), w.double(), None, 1, 1)
    assert_close_rel(wide, ref.to(dtype), dtype, variant_name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("variant_name", ["staged", "f4x4"])
def test_cpu_tiles_in_lanes_across_rows_and_images_keep_each_tiles_bits(variant_name, dtype):
    """An image of fewer tiles than a vector has lanes (F(4x4): 2 x 3 tiles of 8 x 11 outputs) runs
    every tile alone; the same image three times in a batch has F(4x4)'s lanes take tiles of
    different rows, images and edges together: each image's outputs are the lone image's, bit for
    bit, forward and grad_input."""
    x1, w = torch.randn(1, 9, 8, 11, dtype=dtype), torch.randn(7, 9, 3, 3, dtype=dtype)
    gy1 = torch.randn(1, 7, 8, 11, dtype=dtype)
    backward = torch.ops.torchconv.conv2d_winograd_backward
    with using_variant("winograd", variant_name):
        alone = torchconv.conv2d(x1, w, None, 1, 1, algorithm="winograd")
        gx_alone = backward(gy1, x1, w, [1, 1], [1, 1], [1, 1], 1, [True, False, False])[0]
        batch = torchconv.conv2d(x1.repeat(3, 1, 1, 1), w, None, 1, 1, algorithm="winograd")
        gx_batch = backward(gy1.repeat(3, 1, 1, 1), x1.repeat(3, 1, 1, 1), w, [1, 1], [1, 1], [1, 1], 1,
                            [True, False, False])[0]
    for i in range(3):
        assert torch.equal(batch[i], alone[0]) and torch.equal(gx_batch[i], gx_alone[0])
    ref = torch.nn.functional.conv2d(x1.double(), w.double(), None, 1, 1)
    assert_close_rel(alone, ref.to(dtype), dtype, variant_name)


@pytest.mark.parametrize("variant_name", ["staged", "f4x4"])
def test_cpu_trainable_filter_transforms_from_several_threads(variant_name):
    """A trainable weight's U (and every grad_input's) lives for its call in one buffer that later calls
    reuse (csrc/cpu/reused_buffer.h); calls on several threads at once, trainable weights of several
    sizes, each get a buffer of their own while it is held: every result is the float64 reference's,
    and each thread's repeat of a call gives the same bits."""
    import threading
    errors = []

    def work(seed):
        try:
            gen = torch.Generator().manual_seed(seed)
            for c, k, h in [(32, 48, 13), (64, 16, 9), (16, 80, 20)] * 2:
                x = torch.randn(2, c, h, h + 3, generator=gen, dtype=torch.float64)
                w = torch.randn(k, c, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
                y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
                err = rel_err(y, F.conv2d(x, w.detach(), None, 1, 1))
                if not err <= 1e-12 or not torch.equal(y, torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")):
                    errors.append((seed, c, k, h, err))
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append((seed, repr(e)))

    with using_variant("winograd", variant_name):
        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
