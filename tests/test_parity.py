"""Forward parity with F.conv2d (float64 reference) over a seeded random grid of shapes, for every
algorithm, dtype and device. Supported: any N, C, K, H, W, kernel size (non-square too), stride,
padding (ints, 'same', 'valid'), dilation, groups (depthwise too), with or without bias. Winograd
supports only 3x3, stride 1, dilation 1 (any padding, any groups)."""
import contextlib
import random

import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import ALGORITHMS, DEVICES, assert_close_rel, case_seed, skip_if_no_kernel

PRIMES = [1, 2, 3, 5, 7, 11, 13, 17, 31, 37, 53, 67]


def random_grid(seed, count, winograd_only=False):
    """Convolution cases drawn from the issue's grid: N 1-3; C, K 1-70 with primes; H != W 1-40;
    kernel 1x1-7x7; stride 1-3; padding 0-3 / 'same' / 'valid'; dilation 1-3; groups 1, 2, depthwise."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        n = rng.randint(1, 3)
        groups_kind = rng.choice(["1", "1", "2", "depthwise"])
        c = rng.choice(PRIMES + [rng.randint(1, 70)])
        k = rng.choice(PRIMES + [rng.randint(1, 70)])
        if groups_kind == "2":
            c, k, groups = 2 * max(1, c // 2), 2 * max(1, k // 2), 2
        elif groups_kind == "depthwise":
            groups = c
            k = c * rng.choice([1, 2])
        else:
            groups = 1
        if winograd_only:
            r = s = 3
            stride = dilation = (1, 1)
        else:
            r, s = rng.randint(1, 7), rng.randint(1, 7)
            stride = (rng.randint(1, 3), rng.randint(1, 3))
            dilation = (rng.randint(1, 3), rng.randint(1, 3))
        padding = rng.choice([0, 1, 2, 3, (rng.randint(0, 3), rng.randint(0, 3)), "same", "valid"])
        if padding == "same" and stride != (1, 1):
            padding = 1
        h, w = rng.randint(1, 40), rng.randint(1, 40)
        if h == w:
            w = h + 1
        pad = (0, 0) if padding in ("valid", "same") else ((padding, padding) if isinstance(padding, int) else padding)
        if padding != "same" and (h + 2 * pad[0] < dilation[0] * (r - 1) + 1 or w + 2 * pad[1] < dilation[1] * (s - 1) + 1):
            continue  # kernel larger than the padded input: an error case, tested in test_errors
        cases.append(dict(N=n, C=c, K=k, H=h, W=w, R=r, S=s, stride=stride, padding=padding, dilation=dilation,
                          groups=groups, bias=rng.random() < 0.5))
    return cases


GRID = random_grid(seed=2026, count=40)
WINOGRAD_GRID = random_grid(seed=33, count=16, winograd_only=True)


def case_id(case):
    return "N{N}C{C}K{K}H{H}W{W}R{R}S{S}st{stride}p{padding}d{dilation}g{groups}b{bias:d}".format(**case).replace(" ", "")


def run_case(case, algorithm, device, dtype):
    gen = torch.Generator().manual_seed(case_seed(case_id(case)))
    x = torch.randn(case["N"], case["C"], case["H"], case["W"], dtype=torch.float64, generator=gen)
    w = torch.randn(case["K"], case["C"] // case["groups"], case["R"], case["S"], dtype=torch.float64, generator=gen)
    b = torch.randn(case["K"], dtype=torch.float64, generator=gen) if case["bias"] else None
    args = (case["stride"], case["padding"], case["dilation"], case["groups"])
    ref = F.conv2d(x, w, b, *args)
    to = lambda t: None if t is None else t.to(device=device, dtype=dtype)
    with skip_if_no_kernel(algorithm, device):
        out = torchconv.conv2d(to(x), to(w), to(b), *args, algorithm=algorithm)
    assert out.device.type == torch.device(device).type and out.dtype == dtype
    assert_close_rel(out, ref, dtype, f"{algorithm} {case_id(case)}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "winograd"])
@pytest.mark.parametrize("case", GRID, ids=case_id)
def test_parity_grid(case, algorithm, device, dtype):
    run_case(case, algorithm, device, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", WINOGRAD_GRID, ids=case_id)
def test_parity_3x3_stride1(case, algorithm, device, dtype):
    run_case(case, algorithm, device, dtype)


EDGE_CASES = [
    dict(N=1, C=1, K=1, H=1, W=1, R=1, S=1, stride=(1, 1), padding=0, dilation=(1, 1), groups=1, bias=True),
    dict(N=1, C=3, K=5, H=1, W=17, R=1, S=3, stride=(1, 1), padding=(0, 1), dilation=(1, 1), groups=1, bias=False),
    dict(N=2, C=3, K=4, H=1, W=1, R=3, S=3, stride=(1, 1), padding=1, dilation=(1, 1), groups=1, bias=True),
    dict(N=1, C=1, K=7, H=13, W=11, R=5, S=5, stride=(1, 1), padding=2, dilation=(1, 1), groups=1, bias=True),
    dict(N=1, C=7, K=1, H=13, W=11, R=3, S=3, stride=(2, 1), padding=1, dilation=(1, 1), groups=1, bias=True),
    dict(N=3, C=37, K=41, H=9, W=10, R=3, S=3, stride=(1, 1), padding=0, dilation=(1, 1), groups=1, bias=True),
    dict(N=2, C=8, K=8, H=12, W=7, R=3, S=3, stride=(1, 1), padding=2, dilation=(1, 1), groups=8, bias=True),
    dict(N=1, C=2, K=3, H=2, W=4103, R=3, S=3, stride=(1, 1), padding=1, dilation=(1, 1), groups=1, bias=True),
    dict(N=64, C=3, K=5, H=7, W=6, R=3, S=3, stride=(1, 1), padding=1, dilation=(1, 1), groups=1, bias=False),
    dict(N=2, C=5, K=6, H=19, W=23, R=13, S=13, stride=(1, 1), padding=6, dilation=(1, 1), groups=1, bias=True),
    dict(N=1, C=4, K=33, H=29, W=31, R=9, S=9, stride=(1, 1), padding=0, dilation=(1, 1), groups=1, bias=True),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", EDGE_CASES, ids=case_id)
def test_edge_shapes(case, algorithm, device, dtype):
    if algorithm == "winograd" and (case["R"], case["S"], case["stride"]) != (3, 3, (1, 1)):
        pytest.skip("not a Winograd shape (its error is tested in test_errors)")
    run_case(case, algorithm, device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("layout", ["channels_last", "non_contiguous", "unbatched"])
def test_layouts(algorithm, device, layout):
    x = torch.randn(2, 6, 11, 9, dtype=torch.float64)
    w = torch.randn(8, 6, 3, 3, dtype=torch.float64)
    b = torch.randn(8, dtype=torch.float64)
    ref = F.conv2d(x, w, b, 1, 1)
    xd, wd, bd = x.to(device), w.to(device), b.to(device)
    if layout == "channels_last":
        xd, wd = xd.to(memory_format=torch.channels_last), wd.to(memory_format=torch.channels_last)
    elif layout == "non_contiguous":
        xd = x.to(device).transpose(2, 3).contiguous().transpose(2, 3)
        wd = torch.stack([wd, wd], dim=-1)[..., 0]
        assert not xd.is_contiguous() and not wd.is_contiguous()
    with skip_if_no_kernel(algorithm, device):
        if layout == "unbatched":
            out = torchconv.conv2d(xd[1], wd, bd, 1, 1, algorithm=algorithm)
            ref = ref[1]
        else:
            out = torchconv.conv2d(xd, wd, bd, 1, 1, algorithm=algorithm)
    assert_close_rel(out, ref, torch.float64, layout)


# An empty batch on every kind of layer the kernels tell apart: dense, 1x1, grouped, and depthwise
# (the CPU's and the GPU's depthwise kernels split the batch's output rows among parts), as
# (C, K, H, W, R, S, stride, padding, groups).
EMPTY_BATCH_LAYERS = [
    (4, 6, 9, 8, 3, 3, 1, 1, 1),
    (8, 16, 7, 5, 1, 1, 1, 0, 1),
    (6, 6, 9, 8, 3, 3, 1, 1, 3),
    (3, 3, 3, 1, 3, 3, 1, 1, 3),
    (16, 16, 12, 11, 3, 3, 1, 1, 16),
    (8, 8, 13, 9, 5, 5, 2, 2, 8),
    (8, 8, 10, 10, 7, 7, 1, 3, 8),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ["auto", *ALGORITHMS])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("layer", EMPTY_BATCH_LAYERS, ids=lambda l: "x".join(map(str, l)))
def test_empty_batch(layer, dtype, channels_last, algorithm, device):
    """A batch of no images gives an empty output of the right shape and zero weight and bias
    gradients, or, where the algorithm cannot take the layer, its clear error."""
    c, k, h, w_, r, s, stride, padding, groups = layer
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(0, c, h, w_, device=device, dtype=dtype).contiguous(memory_format=fmt).requires_grad_()
    w = torch.randn(k, c // groups, r, s, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(k, device=device, dtype=dtype, requires_grad=True)
    reason = None if algorithm == "auto" else torchconv.unsupported_reason(algorithm, x, w, stride, 1, padding,
                                                                             groups, b)
    if reason is not None:
        with skip_if_no_kernel(algorithm, device), pytest.raises(ValueError, match="cannot compute this convolution"):
            torchconv.conv2d(x, w, b, stride, padding, 1, groups, algorithm=algorithm)
        return
    with contextlib.nullcontext() if algorithm == "auto" else skip_if_no_kernel(algorithm, device):
        out = torchconv.conv2d(x, w, b, stride, padding, 1, groups, algorithm=algorithm)
    assert out.shape == F.conv2d(x.detach(), w.detach(), b.detach(), stride, padding, 1, groups).shape
    gx, gw, gb = torch.autograd.grad(out, (x, w, b), torch.ones_like(out))
    assert gx.shape == x.shape
    assert torch.equal(gw, torch.zeros_like(w)) and torch.equal(gb, torch.zeros_like(b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ["gemm", "winograd"])
def test_workspace_limit_smaller_than_one_image(algorithm, device):
    """A cap below one image's unrolled matrix (or Winograd V/M) still gives the right answer."""
    x = torch.randn(3, 16, 23, 19, dtype=torch.float64, device=device)
    w = torch.randn(12, 16, 3, 3, dtype=torch.float64, device=device)
    ref = F.conv2d(x.cpu(), w.cpu(), None, 1, 1)
    old = torchconv.get_workspace_limit()
    try:
        torchconv.set_workspace_limit(4096)
        with skip_if_no_kernel(algorithm, device):
            out = torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm)
            gx, gw = torch.autograd.grad(
                torchconv.conv2d(x.requires_grad_(), w.requires_grad_(), None, 1, 1, algorithm=algorithm).sum(), (x, w)
            )
    finally:
        torchconv.set_workspace_limit(old)
    assert_close_rel(out, ref, torch.float64, "forward")
    rx, rw = torch.autograd.grad(F.conv2d(x.cpu(), w.cpu(), None, 1, 1).sum(), (x, w))
    assert_close_rel(gx, rx, torch.float64, "grad_input")
    assert_close_rel(gw, rw, torch.float64, "grad_weight")
