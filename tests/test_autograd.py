"""Gradients of every order run on each algorithm's own kernels: gradcheck and gradgradcheck in
float64 for input, weight and bias, with stride, dilation, padding, groups and bias, with every
check PyTorch's gradcheck has (forward-mode AD, batched gradients under vmap, forward over reverse)."""
import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import ALGORITHMS, DEVICES, assert_close_rel, rel_err, skip_if_no_kernel

# (N, C, K, H, W, R, S, stride, padding, dilation, groups, bias)
CASES = [
    (2, 3, 4, 6, 5, 3, 3, 1, 1, 1, 1, True),
    (1, 4, 6, 7, 6, 3, 2, (2, 1), (1, 0), (1, 2), 2, True),
    (2, 3, 3, 6, 7, 3, 3, 1, 0, 1, 3, False),  # depthwise
    (1, 2, 3, 5, 8, 1, 1, 1, 0, 1, 1, True),
    (1, 2, 2, 5, 4, 3, 3, 1, 3, 1, 1, True),  # padding > 2: grad_input reads a cropped grad_output
]


def supports(algorithm, case):
    _, _, _, _, _, r, s, stride, _, dilation, _, _ = case
    return algorithm != "winograd" or ((r, s) == (3, 3) and stride == 1 and dilation == 1)


def make_inputs(case, device):
    n, c, k, h, w, r, s, stride, padding, dilation, groups, bias = case
    opts = dict(dtype=torch.float64, device=device, requires_grad=True)
    x = torch.randn(n, c, h, w, **opts)
    wt = torch.randn(k, c // groups, r, s, **opts)
    b = torch.randn(k, **opts) if bias else None
    return (x, wt, b), (stride, padding, dilation, groups)


# gradcheck on every case; gradgradcheck (slower) on the first three.
CHECKS = [(torch.autograd.gradcheck, i) for i in range(len(CASES))] + [(torch.autograd.gradgradcheck, i) for i in range(3)]
# Beyond reverse mode: tangents (torch.autograd.forward_ad), and gradients computed under vmap.
EXTRA_CHECKS = {
    "gradcheck": dict(check_forward_ad=True, check_batched_grad=True, check_batched_forward_grad=True),
    "gradgradcheck": dict(check_batched_grad=True, check_fwd_over_rev=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("check, index", CHECKS, ids=[f"{c.__name__}-case{i}" for c, i in CHECKS])
def test_gradcheck(check, index, algorithm, device):
    case = CASES[index]
    if not supports(algorithm, case):
        pytest.skip("not a Winograd shape")
    tensors, conv = make_inputs(case, device)
    fn = lambda x, w, b: torchconv.conv2d(x, w, b, *conv, algorithm=algorithm)
    with skip_if_no_kernel(algorithm, device):
        assert check(fn, tensors, **EXTRA_CHECKS[check.__name__])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_gradients_match_conv2d(algorithm, device):
    """Backward parity on a larger float32 layer against F.conv2d's gradients in float64."""
    x = torch.randn(2, 19, 17, 14, dtype=torch.float64)
    w = torch.randn(23, 19, 3, 3, dtype=torch.float64)
    b = torch.randn(23, dtype=torch.float64)
    gy = torch.randn(2, 23, 17, 14, dtype=torch.float64)
    ref = torch.autograd.grad(F.conv2d(x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), 1, 1), (x, w, b), gy)
    xd, wd, bd = (t.detach().to(device, torch.float32).requires_grad_() for t in (x, w, b))
    with skip_if_no_kernel(algorithm, device):
        out = torchconv.conv2d(xd, wd, bd, 1, 1, algorithm=algorithm)
        grads = torch.autograd.grad(out, (xd, wd, bd), gy.to(device, torch.float32))
    for name, g, r in zip(("grad_input", "grad_weight", "grad_bias"), grads, ref):
        assert_close_rel(g, r, torch.float32, name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_backward_respects_output_mask(algorithm, device):
    """Only the requested gradients are computed; the others come back empty."""
    x = torch.randn(1, 4, 6, 6, device=device)
    w = torch.randn(5, 4, 3, 3, device=device)
    gy = torch.randn(1, 5, 6, 6, device=device)
    op = getattr(torch.ops.torchconv, f"conv2d_{algorithm}_backward")
    with skip_if_no_kernel(algorithm, device):
        gx, gw, gb = op(gy, x, w, [1, 1], [1, 1], [1, 1], 1, [False, True, False])
    assert gx.numel() == 0 and gb.numel() == 0 and gw.shape == w.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_saved_tensor_hooks_and_checkpointing(algorithm, device):
    """The graph nodes save their tensors as PyTorch's own do: saved-tensor hooks pack and unpack them
    (offloading, compression), activation checkpointing recomputes them, a second backward through the
    node once its tensors are freed raises, and the gradients are a convolution's."""
    from torch.utils.checkpoint import checkpoint

    x = torch.randn(2, 4, 7, 6, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(5, 4, 3, 3, dtype=torch.float64, device=device, requires_grad=True)
    conv = lambda x, w: torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm)  # noqa: E731
    want = torch.autograd.grad(F.conv2d(x, w, None, 1, 1).sum(), (x, w))
    packed = []
    with skip_if_no_kernel(algorithm, device):
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t.clone(), lambda t: t):
            out = conv(x, w).sum()
        assert len(packed) == 2  # the convolution's input and weight (sum saves no tensor)
        got = torch.autograd.grad(out, (x, w), retain_graph=True)
        torch.autograd.grad(out, (x, w))
        with pytest.raises(RuntimeError, match="second time"):
            torch.autograd.grad(out, (x, w))
        recomputed = torch.autograd.grad(checkpoint(conv, x, w, use_reentrant=False).sum(), (x, w))
    for g, r in zip(got + recomputed, want + want):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("index", range(3))
def test_operators_called_directly_carry_tangents(index, algorithm, device):
    """torch.ops.torchconv.conv2d_<algo> and conv2d_<algo>_backward called directly with
    torch.autograd.forward_ad's dual tensors: tangents, tangents of gradients and gradients of
    tangents as PyTorch's checks count them (the operators' Autograd kernels carry the tangents)."""
    case = CASES[index]
    if not supports(algorithm, case):
        pytest.skip("not a Winograd shape")
    (x, w, b), conv = make_inputs(case, device)
    stride, padding, dilation = (torch.nn.modules.utils._pair(v) for v in conv[:3])
    groups = conv[3]
    forward = getattr(torch.ops.torchconv, f"conv2d_{algorithm}")
    backward = getattr(torch.ops.torchconv, f"conv2d_{algorithm}_backward")
    fn = lambda x, w, b: forward(x, w, b, stride, padding, dilation, groups)
    with skip_if_no_kernel(algorithm, device):
        gy = torch.randn_like(fn(x, w, b).detach(), requires_grad=True)
    grads = lambda gy, x, w: backward(gy, x, w, stride, padding, dilation, groups, [True, True, True])
    assert torch.autograd.gradcheck(fn, (x, w, b), check_forward_ad=True)
    assert torch.autograd.gradcheck(grads, (gy, x, w), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, (x, w, b), check_fwd_over_rev=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no-graph", "graph"])
def test_operator_tangent_matches_conv2d(requires_grad, algorithm, device):
    """A dual input, weight and bias through the operator called directly: the tangent PyTorch's
    convolution gives, whether or not a graph is recorded (without one the output once came back
    with no tangent at all; with one the autograd Function raised)."""
    import torch.autograd.forward_ad as fwAD
    x, w, b = (torch.randn(*s, dtype=torch.float64, device=device) for s in ((2, 5, 9, 7), (6, 5, 3, 3), (6,)))
    dx, dw, db = torch.randn_like(x), torch.randn_like(w), torch.randn_like(b)
    forward = getattr(torch.ops.torchconv, f"conv2d_{algorithm}")
    with fwAD.dual_level():
        want = fwAD.unpack_dual(F.conv2d(fwAD.make_dual(x, dx), fwAD.make_dual(w, dw), fwAD.make_dual(b, db), 1, 1))
        with skip_if_no_kernel(algorithm, device):
            got = fwAD.unpack_dual(forward(fwAD.make_dual(x.requires_grad_(requires_grad), dx), fwAD.make_dual(w, dw),
                                           fwAD.make_dual(b, db), [1, 1], [1, 1], [1, 1], 1))
    assert got.tangent is not None
    assert_close_rel(got.primal, want.primal, torch.float64, "output")
    assert_close_rel(got.tangent, want.tangent, torch.float64, "tangent")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_dual_weight_under_autocast_follows_its_tangent(algorithm, device):
    """A frozen weight's autocast copy is cached across calls; a dual weight's is not: its copy would
    carry a tangent whose in-place writes no version counter shows (the second call would return the
    first call's tangent)."""
    import torch.autograd.forward_ad as fwAD
    x = torch.randn(2, 8, 6, 6, device=device)
    w = torch.randn(8, 8, 3, 3, device=device)
    dw = torch.randn_like(w)
    with torch.autocast(torch.device(device).type), fwAD.dual_level():
        dual = fwAD.make_dual(w, dw)
        with skip_if_no_kernel(algorithm, device):
            torchconv.conv2d(x, dual, None, 1, 1, algorithm=algorithm)
        dw.mul_(-2)
        got = fwAD.unpack_dual(torchconv.conv2d(x, dual, None, 1, 1, algorithm=algorithm)).tangent
        want = fwAD.unpack_dual(F.conv2d(x, dual, None, 1, 1)).tangent
    assert got.dtype == want.dtype
    assert rel_err(got, want) < 0.05


# grad_weight paths whose kernel writes partial sums that a second kernel adds (common/slice_sum.cuh, the
# tensor-core GEMM's and Winograd's finishing kernels):
# (id, algorithm, dtype, channels_last, N, C, K, H, W, groups, a part of the choice it records).
SLICED_GRAD_WEIGHTS = [
    ("depthwise-nhwc", "direct", torch.bfloat16, True, 16, 144, 144, 56, 56, 144, "grad_weight:depthwise-nhwc/"),
    ("depthwise-nchw", "direct", torch.float32, False, 8, 64, 64, 56, 56, 64, "grad_weight:depthwise/"),
    ("direct-tiled", "direct", torch.float32, False, 32, 32, 48, 28, 28, 1, "grad_weight:"),
    ("gemm", "gemm", torch.float32, False, 32, 32, 48, 28, 28, 1, "grad_weight:"),
    # The tensor-core GEMM's and Winograd's finishing kernels wait for the slices the same way.
    ("gemm-tc", "gemm", torch.bfloat16, True, 32, 32, 32, 56, 56, 1, "grad_weight:"),
    ("winograd", "winograd", torch.float32, False, 32, 64, 64, 28, 28, 1, "grad_weight:"),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("case", SLICED_GRAD_WEIGHTS, ids=[c[0] for c in SLICED_GRAD_WEIGHTS])
def test_grad_weight_slices_are_summed_after_their_kernel(case):
    """On sm_90 the slices' sum is a programmatic dependent of the kernel that writes the slices: it
    may be scheduled before that kernel's writes are visible and reads them after grid_dependency_wait.
    The workspace is handed back to the caching allocator filled with NaN between two calls (and
    poisoned when allocated), so a sum that read a slice before it was written would return NaN or
    other bits than the first call's. Every output and workspace of the pass is allocated before the
    slices' kernel, so no poisoning fill runs between it and its dependent."""
    _, algorithm, dtype, channels_last, n, c, k, h, w, groups, choice = case
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c // groups, 3, 3, device="cuda", dtype=dtype, requires_grad=True)
    y = torchconv.conv2d(x, wt, None, 1, 1, 1, groups, algorithm=algorithm)
    gy = torch.randn_like(y)
    (first,) = torch.autograd.grad(y, (wt,), gy, retain_graph=True)
    assert choice in torchconv.last_choice()
    workspace = torchconv.last_workspace_bytes()
    assert workspace > 0, "one slice: nothing to sum"
    # The block the slices used is free now; the poison takes it (best fit) and gives it back as NaN.
    torch.full((workspace // 4,), float("nan"), device="cuda")
    (second,) = torch.autograd.grad(y, (wt,), gy)
    torch.cuda.synchronize()
    assert torch.equal(first, second)
    ref = torch.nn.grad.conv2d_weight(x.double(), wt.shape, gy.double(), 1, 1, 1, groups)
    assert rel_err(second, ref) <= (1e-5 if dtype == torch.float32 else 2.0 ** -7)
