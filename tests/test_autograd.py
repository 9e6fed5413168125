"""Gradients of every order run on each algorithm's own kernels: gradcheck and gradgradcheck in
float64 for input, weight and bias, with stride, dilation, padding, groups and bias, with every
check PyTorch's gradcheck has (forward-mode AD, batched gradients under vmap, forward over reverse)."""
import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import ALGORITHMS, DEVICES, assert_close_rel, skip_if_no_kernel

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
