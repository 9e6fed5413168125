"""Fuzzed arguments: for argument sets drawn by hypothesis, valid and invalid (zero or negative
stride, dilation and padding; mismatched channels, groups and bias; differing dtypes; zero-size
batches and planes; kernels larger than the padded input; large padding; non-contiguous and channels_last
views; complex tensors), torchconv.conv2d -- every algorithm and "auto" -- and F.conv2d either both raise (ours a
ValueError, TypeError or RuntimeError that names the function and the argument; never
ZeroDivisionError or a crash) or agree, forward and backward. An explicit algorithm may also refuse a
shape it cannot do, with a ValueError that says why. The examples are drawn from a fixed seed
(derandomize), so a failure comes back on a rerun; TORCHCONV_FUZZ_EXAMPLES sets how many per case
(a compute-sanitizer run takes a small sample), and TORCHCONV_FUZZ_SEED=S draws hypothesis seed S's
sequence instead (a hunt: conftest.fuzz_hunt)."""
import copy
import os
import zlib

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import torchconv
from conftest import DEVICES, fuzz_hunt

PERTURBATIONS = [None, None, None, "channels", "groups", "bias_length", "dtype", "weight_dim", "non_contiguous",
                 "channels_last", "large_padding", "empty_batch", "empty_plane", "complex"]


@st.composite
def conv_args(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 11)), draw(st.integers(1, 11))
    r, s = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    # Mostly valid values, with zero and negative ones among them.
    axis = lambda values: st.tuples(st.sampled_from(values), st.sampled_from(values))  # noqa: E731
    stride = draw(axis([1, 1, 1, 2, 2, 3, 0, -1]))
    padding = draw(st.one_of(axis([0, 0, 1, 1, 2, 3, -1]), st.sampled_from(["same", "valid"])))
    dilation = draw(axis([1, 1, 1, 2, 3, 0]))
    bias = draw(st.booleans())
    perturbation = draw(st.sampled_from(PERTURBATIONS))
    return dict(n=n, c=cg * groups, k=kg * groups, h=h, w=w, r=r, s=s, stride=stride, padding=padding,
                dilation=dilation, groups=groups, bias=bias, perturbation=perturbation)


def make(a, device):
    gen = torch.Generator().manual_seed(zlib.crc32(repr(sorted(a.items())).encode()))
    n = 0 if a["perturbation"] == "empty_batch" else a["n"]
    c_in = a["c"] + 1 if a["perturbation"] == "channels" else a["c"]
    h = 0 if a["perturbation"] == "empty_plane" else a["h"]  # PyTorch refuses it unless the batch is empty
    x = torch.randn(n, c_in, h, a["w"], generator=gen, dtype=torch.float64)
    wshape = (a["k"], a["c"] // a["groups"], a["r"], a["s"])
    wt = torch.randn(*wshape, generator=gen, dtype=torch.float64)
    b = torch.randn(a["k"] + (1 if a["perturbation"] == "bias_length" else 0), generator=gen, dtype=torch.float64)
    if a["perturbation"] == "dtype":
        wt = wt.float()
    if a["perturbation"] == "weight_dim":
        wt = wt[0]
    if a["perturbation"] == "non_contiguous":
        x = torch.randn(n, c_in, a["h"], 2 * a["w"], generator=gen, dtype=torch.float64)[..., ::2]
    if a["perturbation"] == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    if a["perturbation"] == "complex":
        x, wt, b = (torch.complex(t, torch.randn(t.shape, generator=gen, dtype=t.dtype)) for t in (x, wt, b))
    groups = a["groups"] + 1 if a["perturbation"] == "groups" else a["groups"]
    # An empty plane under padding as wide as any drawn filter: only the plane makes PyTorch refuse it.
    padding = {"large_padding": (7, 5), "empty_plane": (5, 5)}.get(a["perturbation"], a["padding"])
    return (x.to(device), wt.to(device), b.to(device) if a["bias"] else None, a["stride"], padding, a["dilation"],
            groups)


def outcome(fn):
    try:
        return fn(), None
    except Exception as err:  # noqa: BLE001 -- the kind of failure is what is checked
        return None, err


def forward_backward(conv, x, wt, b, *rest):
    leaves = [t.detach().requires_grad_() for t in (x, wt, b) if t is not None]
    xb = leaves[0]
    out = conv(xb, leaves[1], leaves[2] if b is not None else None, *rest)
    gy = torch.ones_like(out) + (torch.arange(out.numel(), device=out.device) % 3).to(out.dtype).view_as(out)
    grads = torch.autograd.grad(out, leaves, gy, allow_unused=True)
    return [out] + [g if g is not None else torch.zeros_like(t) for g, t in zip(grads, leaves)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ["auto", *torchconv.ALGORITHMS])
@settings(max_examples=int(os.environ.get("TORCHCONV_FUZZ_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(a=conv_args())
def test_fuzzed_arguments(algorithm, device, a):
    args = make(a, device)
    # PyTorch's CUDA convolution lets a zero dilation through in places and then reads out of bounds (an illegal
    # address, which loses the CUDA context): for those argument sets its CPU convolution is the reference.
    ref_args = [t.cpu() if torch.is_tensor(t) else t for t in args] if 0 in a["dilation"] else args
    ref, ref_err = outcome(lambda: [t.to(device) for t in forward_backward(F.conv2d, *ref_args)])
    ours, err = outcome(lambda: forward_backward(
        lambda *p: torchconv.conv2d(*p, algorithm=algorithm), *args))
    event("both raise" if err is not None and ref_err is not None else "we refuse" if err is not None else
          "compared" if ref_err is None else "we accept what PyTorch rejects")
    if err is not None:
        assert isinstance(err, (ValueError, TypeError, RuntimeError)), f"{type(err).__name__}: {err}"
        assert not isinstance(err, ZeroDivisionError)
        assert "torchconv" in str(err), str(err)
        if ref_err is None:
            # Only an explicit algorithm may refuse what PyTorch computes -- and anyone may refuse a
            # zero dilation, which PyTorch lets through in corners (a one-tap kernel with
            # padding="same", an empty batch) and rejects everywhere else.
            assert (algorithm != "auto" and "cannot compute this convolution" in str(err)) or \
                "dilation must be positive" in str(err), str(err)
        return
    assert ref_err is None, f"torchconv accepted what F.conv2d rejects ({type(ref_err).__name__}: {ref_err})"
    for name, o, r in zip(("output", "grad_input", "grad_weight", "grad_bias"), ours, ref):
        assert o.shape == r.shape, name
        scale = r.abs().max().item() if r.numel() else 0.0
        assert torch.allclose(o, r, rtol=1e-9, atol=1e-9 * max(scale, 1.0)), name


test_fuzzed_arguments = fuzz_hunt(test_fuzzed_arguments)


# Argument sets the random hunt failed on, kept as fixed cases: zero dilations that PyTorch's CUDA convolution (the
# reference) took and read out of bounds with, losing the CUDA context, before such sets moved to its CPU convolution.
FOUND_ARGUMENTS = [
    dict(n=1, c=3, k=6, h=11, w=1, r=4, s=2, stride=(1, 2), padding=(2, 2), dilation=(1, 0), groups=3, bias=False,
         perturbation=None),
    dict(n=1, c=2, k=2, h=1, w=11, r=4, s=4, stride=(1, 1), padding=(3, 3), dilation=(0, 0), groups=2, bias=True,
         perturbation="non_contiguous"),
]


@pytest.mark.parametrize("a", FOUND_ARGUMENTS, ids=lambda a: f"dilation{a['dilation']}")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.usefixtures("without_hypothesis_events")
def test_found_arguments(device, a):
    test_fuzzed_arguments.hypothesis.inner_test("auto", device, a)


@st.composite
def module_args(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    kernel = draw(st.one_of(st.integers(1, 4), st.tuples(st.integers(1, 4), st.integers(1, 4))))
    stride = draw(st.one_of(st.sampled_from([1, 1, 2]), st.tuples(st.sampled_from([1, 2]), st.sampled_from([1, 3]))))
    padding = draw(st.one_of(st.sampled_from([0, 1, 2]), st.tuples(st.integers(0, 2), st.integers(0, 2)),
                             st.sampled_from(["same", "valid"])))
    return dict(in_channels=draw(st.integers(1, 3)) * groups, out_channels=draw(st.integers(1, 3)) * groups,
                kernel_size=kernel, stride=stride, padding=padding, dilation=draw(st.sampled_from([1, 1, 2, (1, 2)])),
                groups=groups, bias=draw(st.booleans()),
                padding_mode=draw(st.sampled_from(["zeros", "zeros", "reflect", "replicate", "circular"])),
                dtype=draw(st.sampled_from([torch.float64, torch.float64, torch.complex128])),
                sizes=draw(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 9), st.integers(1, 9)), min_size=1,
                                    max_size=3)),
                channels_last=draw(st.booleans()))


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=int(os.environ.get("TORCHCONV_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(a=module_args())
def test_fuzzed_modules(device, a):
    """nn.Conv2d's constructor arguments drawn by hypothesis (every padding form and padding_mode,
    dilation, groups, float64 and complex128), the layer converted, then called on a few inputs in
    turn (batch 0-3 or unbatched at 0, channels_last or not: its per-shape memo meets several keys):
    the converted module and nn.Conv2d either both raise (ours naming torchconv) or agree, output and
    gradients."""
    import torch.nn as nn
    options = {k: v for k, v in a.items() if k not in ("sizes", "channels_last")}
    reference, err = outcome(lambda: nn.Conv2d(**options, device=device))
    if err is not None:
        return  # nn.Conv2d refuses the arguments themselves; there is no layer to convert
    twin = copy.deepcopy(reference)
    params = list(twin.parameters())
    ours = torchconv.convert(twin)
    for n, h, w in a["sizes"]:
        shape = (a["in_channels"], h, w) if n == 0 else (n, a["in_channels"], h, w)
        x = torch.randn(shape, dtype=a["dtype"], device=device)
        if a["channels_last"] and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)

        def run(module):
            leaf = x.detach().requires_grad_()
            out = module(leaf)
            grads = torch.autograd.grad(out.abs().square().sum(), [leaf] + list(module.parameters()))
            return [out, *grads]

        ref, ref_err = outcome(lambda: run(reference))
        got, got_err = outcome(lambda: run(ours))
        if got_err is not None:
            assert ref_err is not None, f"torchconv refused what nn.Conv2d computes: {got_err}"
            assert isinstance(got_err, (ValueError, TypeError, RuntimeError)), f"{type(got_err).__name__}: {got_err}"
            # Ours names torchconv, or is the very error nn.Conv2d raises (its padding_mode's F.pad).
            assert "torchconv" in str(got_err) or str(got_err) == str(ref_err), f"{got_err} / {ref_err}"
            continue
        assert ref_err is None, f"torchconv accepted what nn.Conv2d rejects ({type(ref_err).__name__}: {ref_err})"
        for o, r in zip(got, ref):
            assert o.shape == r.shape and o.dtype == r.dtype
            scale = r.abs().max().item() if r.numel() else 0.0
            assert torch.allclose(o, r, rtol=1e-9, atol=1e-9 * max(scale, 1.0))
    assert all(p is q for p, q in zip(params, ours.parameters()))  # the converted layer shares its parameters


test_fuzzed_modules = fuzz_hunt(test_fuzzed_modules)
