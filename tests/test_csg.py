"""CSG (C split globally) specifics. On CUDA the reduction over input channels is split across the
grid and the splits add their partial sums into the output with atomicAdd; grad_input splits its
reduction over K the same way (once per output phase for strided layers) and grad_weight splits
N*Ho*Wo. It must match F.conv2d forward and backward on every shape F.conv2d takes: K and C off
the 32-wide warps, large C over a small plane (C = 2048, 7x7), any filter size, stride, padding,
dilation, groups, H != W, batch 1 and more, float32 and float64. Atomics make the CUDA result
order-dependent, so deterministic mode refuses CSG there. The tuner and the filter cache are
tested here too."""
import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import assert_close_rel, check_forward_backward

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

# (N, C, K, H, W, R, S, stride, padding, dilation, groups, bias)
SHAPES = [
    (1, 2048, 40, 7, 7, 3, 3, 1, 1, 1, 1, True),  # large C, small plane: many channel splits; K off 32
    (1, 96, 200, 14, 14, 3, 3, 1, 1, 1, 1, False),  # K over one 128-filter tile, partial 8x8 tiles
    (2, 37, 33, 17, 13, 3, 3, 1, 1, 1, 1, True),  # primes, H != W, batch 2
    (1, 24, 70, 19, 23, 3, 3, 2, 1, 1, 1, True),  # 3x3 stride 2: grad_input in 4 phases
    (2, 3, 64, 31, 29, 7, 7, 2, 3, 1, 1, True),  # 7x7 stride 2 stem
    (1, 64, 48, 9, 11, 1, 1, 1, 0, 1, 1, True),  # 1x1
    (2, 32, 16, 10, 12, 1, 1, 2, 0, 1, 1, False),  # 1x1 stride 2: 3 of 4 grad_input phases are zero
    (1, 12, 20, 16, 15, 3, 5, 1, (2, 1), (2, 1), 1, True),  # non-square filter, dilation: run-time path
    (2, 8, 12, 10, 9, 3, 3, (2, 1), 2, 1, 4, True),  # groups, asymmetric stride, padding 2
    (2, 16, 16, 12, 12, 3, 3, 1, 1, 1, 16, False),  # depthwise
    (3, 5, 3, 6, 5, 2, 2, 1, 0, 1, 1, True),  # even filter, K = 3
    (1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, False),  # one pixel
    (2, 6, 10, 13, 12, 3, 3, 2, 2, 2, 1, True),  # stride 2, dilation 2: odd phases receive nothing
    (1, 5, 7, 17, 16, 5, 5, 3, 1, 1, 1, False),  # stride 3, 5x5
    (1, 300, 64, 5, 6, 3, 3, 1, 0, 1, 1, True),  # output smaller than one tile, C not a split multiple
]


def shape_id(s):
    return "N{}C{}K{}H{}W{}R{}S{}s{}p{}d{}g{}b{:d}".format(*s).replace(" ", "")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_forward_backward(shape, device, dtype):
    if device == "cpu" and shape[1] * shape[2] * shape[0] > 50_000:
        pytest.skip("large-C shape: CUDA only (the CPU kernel is covered by the parity grid)")
    check_forward_backward("csg", shape, device, dtype, f"{device} {shape_id(shape)}")


@needs_cuda
def test_large_channel_count_splits_the_reduction():
    """One 7x7 image with 2048 channels is a handful of output tiles: the rule splits C across the
    grid (atomics into a zeroed output); a 3-channel layer runs one split with plain stores that
    must still cover every output element (outputs are poisoned with NaN)."""
    x = torch.randn(1, 2048, 7, 7, device="cuda")
    w = torch.randn(64, 2048, 3, 3, device="cuda")
    out = torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
    plan = torchconv.last_choice()
    assert plan.startswith("forward:") and int(plan.split("splits=")[1]) > 1, plan
    assert_close_rel(out, F.conv2d(x.double(), w.double(), None, 1, 1), torch.float32, "split")
    x3 = torch.randn(1, 3, 64, 64, device="cuda")
    w3 = torch.randn(32, 3, 3, 3, device="cuda")
    out3 = torchconv.conv2d(x3, w3, None, 1, 1, algorithm="csg")
    assert torchconv.last_choice().endswith("splits=1")
    assert_close_rel(out3, F.conv2d(x3.double(), w3.double(), None, 1, 1), torch.float32, "one split")


@needs_cuda
def test_tuning_times_candidates_once_per_shape():
    """In benchmark mode, the first CSG call of a shape times the candidate plans and caches the winner;
    the second call reuses it (no new entry) and both answers are right."""
    x = torch.randn(1, 256, 14, 14, device="cuda")
    w = torch.randn(128, 256, 3, 3, device="cuda")
    ref = F.conv2d(x.double(), w.double(), None, 1, 1)
    torchconv._C.clear_tuned_choices()
    old = torchconv.get_benchmark()
    try:
        torchconv.set_benchmark(True)
        first = torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
        assert torchconv._C.tuned_choice_count() == 1
        plan = torchconv.last_choice()
        second = torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
        assert torchconv._C.tuned_choice_count() == 1
        assert torchconv.last_choice() == plan
    finally:
        torchconv.set_benchmark(old)
    assert_close_rel(first, ref, torch.float32, "tuned, first call")
    assert_close_rel(second, ref, torch.float32, "tuned, cached")


@needs_cuda
def test_clearing_the_cache_forgets_tuned_plans():
    """After torchconv.clear_cache() a tuned shape is timed again (its plan recorded anew)."""
    x = torch.randn(1, 192, 7, 7, device="cuda")
    w = torch.randn(96, 192, 3, 3, device="cuda")
    old = torchconv.get_benchmark()
    try:
        torchconv.set_benchmark(True)
        torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
        assert torchconv._C.tuned_choice_count() >= 1
        torchconv.clear_cache()
        assert torchconv._C.tuned_choice_count() == 0
        torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
        assert torchconv._C.tuned_choice_count() == 1
    finally:
        torchconv.set_benchmark(old)


@needs_cuda
def test_tuned_grad_input_keeps_every_phase():
    """Tuning a strided grad_input times each phase's candidates in scratch memory: the phases
    already written must survive (they share one output)."""
    old = torchconv.get_benchmark()
    try:
        torchconv.set_benchmark(True)
        check_forward_backward("csg", (1, 24, 40, 15, 13, 3, 3, 2, 1, 1, 1, True), "cuda", torch.float32, "tuned")
    finally:
        torchconv.set_benchmark(old)


@needs_cuda
def test_deterministic_mode_refuses_csg_on_cuda():
    x = torch.randn(1, 8, 6, 6, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    old = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        with pytest.raises(ValueError, match="atomicAdd"):
            torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
        with pytest.raises(RuntimeError, match="deterministic"):
            torch.ops.torchconv.conv2d_csg(x, w, None, [1, 1], [1, 1], [1, 1], 1)
        assert torchconv.select_algorithm(x, w, (1, 1), (1, 1), 1) != "csg"
        torchconv.conv2d(x, w, None, 1, 1)  # auto still works
    finally:
        torch.use_deterministic_algorithms(old)


def test_deterministic_mode_allows_csg_on_cpu():
    """The CPU kernel sums its splits in a fixed order: allowed and bitwise repeatable."""
    x = torch.randn(2, 8, 9, 7)
    w = torch.randn(6, 8, 3, 3)
    old = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        a = torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
        assert torch.equal(a, torchconv.conv2d(x, w, None, 1, 1, algorithm="csg"))
    finally:
        torch.use_deterministic_algorithms(old)


@needs_cuda
def test_filter_layout_follows_weight_updates():
    """The C, R, S, K filter layout is cached for a frozen weight and recomputed after an in-place
    change (its version counter moves)."""
    x = torch.randn(1, 40, 9, 9, device="cuda")
    w = torch.randn(48, 40, 3, 3, device="cuda")
    torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
    size = torchconv.weight_cache_size()
    torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
    assert torchconv.weight_cache_size() == size
    w.mul_(-2.0)
    out = torchconv.conv2d(x, w, None, 1, 1, algorithm="csg")
    assert_close_rel(out, F.conv2d(x.double(), w.double(), None, 1, 1), torch.float32, "after update")
