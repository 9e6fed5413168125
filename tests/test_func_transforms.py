"""torch.func transforms and forward-mode AD over torchconv: grad, vmap, per-sample gradients (vmap
of grad), jacrev, model ensembling (vmap over stacked parameters), gradients of gradients, jvp,
jacfwd, hessian and torch.autograd.forward_ad's dual tensors compute what PyTorch's own convolution
gives under the same transforms, in float64, for every algorithm and device; vmap runs the operators
folded (no slice-by-slice fallback, counted calls); benchmark mode defers to the rule under a
transform and keeps no choice made there."""
import contextlib
import itertools
import os
import subprocess
import sys
import warnings
import zlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, stack_module_state, vmap

import torchconv
from conftest import ALGORITHMS, DEVICES, fuzz_hunt, skip_if_no_kernel

# functorch's slice-by-slice fallback for an operator without a batching rule warns with this.
FALLBACK = "performance drop"


def layer_case(algorithm, device, groups=1, stride=1):
    """A torchconv conv (bias, padding 1) and its nn.Conv2d twin with the same parameters, float64."""
    ref = nn.Conv2d(4, 6, 3, stride=stride, padding=1, groups=groups).double().to(device)
    ours = torchconv.Conv2d.from_conv(ref, algorithm=algorithm)
    return ours, ref


def no_fallback(fn):
    """fn(), asserting that no operator ran slice by slice under functorch's fallback."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    assert not [w for w in caught if FALLBACK in str(w.message)], [str(w.message)[:200] for w in caught]
    return out


def per_sample_gradients(module, x):
    """vmap(grad(loss)) over the batch: each sample's parameter gradients, with no operator run slice
    by slice under functorch's fallback."""
    params = {k: v.detach() for k, v in module.named_parameters()}

    def loss(p, sample):
        return functional_call(module, p, (sample.unsqueeze(0),)).square().sum()
    return no_fallback(lambda: vmap(grad(loss), in_dims=(None, 0))(params, x))


def assert_per_sample_gradients_match(per_sample, ref, x):
    """Each sample's parameter gradients are what torch.autograd gives through `ref` (nn.Conv2d) on
    that sample alone."""
    for i in range(x.shape[0]):
        ref.zero_grad()
        ref(x[i:i + 1]).square().sum().backward()
        for name, parameter in ref.named_parameters():
            torch.testing.assert_close(per_sample[name][i], parameter.grad, rtol=1e-10, atol=1e-10)


@pytest.fixture
def operator_calls(monkeypatch):
    """Counts the calls of each algorithm's forward and backward operators ("forward", "backward")."""
    calls = {"forward": 0, "backward": 0}
    for table, kind in ((torchconv.ops.FORWARD, "forward"), (torchconv.ops.BACKWARD, "backward")):
        for algorithm, op in list(table.items()):
            def counted(*args, op=op, kind=kind):
                calls[kind] += 1
                return op(*args)
            monkeypatch.setitem(table, algorithm, counted)
    return calls


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_grad_of_a_loss_matches_pytorch(algorithm, device):
    """torch.func.grad of a loss over the parameters (functional_call) and over the input."""
    ours, ref = layer_case(algorithm, device)
    x = torch.randn(3, 4, 9, 7, dtype=torch.float64, device=device)
    params = {k: v.detach() for k, v in ref.named_parameters()}
    loss = lambda m: lambda p, x: functional_call(m, p, (x,)).square().sum()
    with skip_if_no_kernel(algorithm, device):
        got = grad(loss(ours), argnums=(0, 1))(params, x)
    want = grad(loss(ref), argnums=(0, 1))(params, x)
    for name in params:
        torch.testing.assert_close(got[0][name], want[0][name], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got[1], want[1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("groups,stride", [(1, 1), (2, 1), (2, 2)], ids=["g1s1", "g2s1", "g2s2"])
def test_per_sample_gradients_by_vmap_of_grad(algorithm, device, groups, stride, operator_calls):
    """vmap(grad(loss)) over the batch gives each sample's parameter gradients, as a loop of
    torch.autograd over single samples does, without functorch's slice-by-slice fallback: the
    samples' grad_weight is one grouped call, their grad_input one batch."""
    ours, ref = layer_case(algorithm, device, groups, stride)
    x = torch.randn(5, 4, 8, 7, dtype=torch.float64, device=device)
    reason = torchconv.unsupported_reason(algorithm, x, ref.weight, stride, 1, 1, groups)
    if reason is not None:
        pytest.skip(f"{algorithm}: {reason}")
    with skip_if_no_kernel(algorithm, device):
        per_sample = per_sample_gradients(ours, x)
    assert operator_calls == {"forward": 1, "backward": 1}, operator_calls
    assert_per_sample_gradients_match(per_sample, ref, x)


@pytest.mark.parametrize("device", DEVICES)
def test_per_sample_gradients_slice_by_slice_where_the_grouped_call_is_refused(device, operator_calls, monkeypatch):
    """Where the algorithm cannot take the samples' grouped grad_weight call (its limits asked on the
    folded shape), the backward runs once a sample, with the same gradients; grad_output is never
    folded for the refused call."""
    ours, ref = layer_case("gemm", device)
    x = torch.randn(5, 4, 8, 7, dtype=torch.float64, device=device)
    asked = []

    def refuse_grouped(algorithm, input, weight, stride, dilation, padding, groups, bias=None):
        asked.append((tuple(input.shape), tuple(weight.shape), groups))
        return "refused by the test" if groups > 1 else None
    monkeypatch.setattr(torchconv.func_transforms, "unsupported_reason", refuse_grouped)
    folds = []
    fold = torchconv.func_transforms._folded
    monkeypatch.setattr(torchconv.func_transforms, "_folded", lambda t, *a: folds.append(t.shape) or fold(t, *a))
    with skip_if_no_kernel("gemm", device):
        per_sample = per_sample_gradients(ours, x)
    assert asked == [((1, 5 * 4, 8, 7), (5 * 6, 4, 3, 3), 5)], asked
    # The forward's fold of the batch, then the grouped call's input; grad_output (6 channels) is not folded.
    assert [s[2] for s in folds] == [4, 4], folds
    assert operator_calls == {"forward": 1, "backward": 5}, operator_calls
    assert_per_sample_gradients_match(per_sample, ref, x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("shape", [(12, 6, 3, 1, 3), (128, 64, 1, 2, 2)], ids=["3x3-g3", "1x1-s2-g2"])
def test_grad_weight_reads_no_weight_value(algorithm, device, dtype, channels_last, shape):
    """The backward operator asked for grad_weight and grad_bias alone reads the weight's shape, never
    its values (per-sample gradients pass an unfilled weight for the samples' grouped call): a NaN
    weight gives the gradients a finite one does, and they are PyTorch's."""
    channels, filters, size, stride, groups = shape
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(2, channels, 9, 7, dtype=dtype, device=device).contiguous(memory_format=fmt)
    w = torch.randn(filters, channels // groups, size, size, dtype=dtype, device=device).contiguous(memory_format=fmt)
    padding = size // 2
    if torchconv.unsupported_reason(algorithm, x, w, stride, 1, padding, groups) is not None:
        pytest.skip(algorithm)
    gy = torch.randn_like(F.conv2d(x, w, None, stride, padding, 1, groups))
    args = ([stride] * 2, [padding] * 2, [1, 1], groups, [False, True, True])
    backward = torchconv.ops.BACKWARD[algorithm]
    with skip_if_no_kernel(algorithm, device):
        _, gw, gb = backward(gy, x, torch.full_like(w, float("nan")), *args)
        _, gw_finite, gb_finite = backward(gy, x, w, *args)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(gw, gw_finite, **tol)
    torch.testing.assert_close(gb, gb_finite, **tol)
    _, want_w, want_b = torch.ops.aten.convolution_backward(gy.double(), x.double(), w.double(), [filters],
                                                            args[0], args[1], args[2], False, [0, 0], groups,
                                                            [False, True, True])
    torch.testing.assert_close(gw.double(), want_w, rtol=1e-2, atol=1e-2)  # TF32 on CUDA by default
    torch.testing.assert_close(gb.double(), want_b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_per_sample_gradients_run_no_python_autograd_function(device, monkeypatch):
    """Under vmap(grad) the operators' autograd is their C++ nodes (torch.func takes them at its grad
    levels as it takes aten's): no torch.autograd.Function runs, forward or backward, and the graph's
    nodes are torchconv's."""
    ours, ref = layer_case("auto", device)
    x = torch.randn(3, 4, 8, 7, dtype=torch.float64, device=device)

    def refuse(*args, **kwargs):
        raise AssertionError("a torch.autograd.Function ran")

    monkeypatch.setattr(torch.autograd.Function, "apply", classmethod(refuse))
    per_sample = per_sample_gradients(ours, x)
    monkeypatch.undo()
    assert_per_sample_gradients_match(per_sample, ref, x)
    out = ours(x.requires_grad_())
    assert out.grad_fn.name() == "torchconv::Conv2dBackward"
    gx, = torch.autograd.grad(out.sum(), x, create_graph=True)
    assert gx.grad_fn.name() == "torchconv::Conv2dBackwardBackward"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_operators_called_directly_under_transforms(algorithm, device):
    """torch.ops.torchconv.conv2d_<algo> itself (no torchconv.conv2d in between) runs under per-sample
    gradients and jacfwd, with PyTorch's answers."""
    x = torch.randn(5, 4, 6, 7, dtype=torch.float64, device=device)
    w = torch.randn(3, 4, 3, 3, dtype=torch.float64, device=device)
    op = torchconv.ops.FORWARD[algorithm]
    ours = lambda x, w: op(x, w, None, [1, 1], [1, 1], [1, 1], 1)  # noqa: E731
    theirs = lambda x, w: F.conv2d(x, w, None, 1, 1)  # noqa: E731

    def cases(conv):
        loss = lambda w, sample: conv(sample.unsqueeze(0), w).sin().sum()  # noqa: E731
        return vmap(grad(loss), in_dims=(None, 0))(w, x), jacfwd(lambda w: conv(x[:1, :, :3, :4], w))(w)

    with skip_if_no_kernel(algorithm, device):
        got = no_fallback(lambda: cases(ours))
    for g, r in zip(got, cases(theirs)):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_nested_transforms_with_inputs_mapped_at_an_outer_level(device):
    """A vmap rule serves the level it runs at: a convolution whose tensors an outer vmap maps while an
    inner vmap (or a grad between them) is running, mapped at the outer level only, computes what
    PyTorch's convolution does under the same nesting."""
    xs = torch.randn(3, 2, 4, 6, 5, dtype=torch.float64, device=device)
    ys = torch.randn(4, 2, 6, 6, 5, dtype=torch.float64, device=device)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64, device=device)

    def cases(conv):
        inner = lambda x: vmap(lambda y: conv(x, w) * y)(ys)  # noqa: E731
        through_grad = lambda x: grad(lambda w: vmap(lambda y: (conv(x, w) * y).sum())(ys).sum())(w)  # noqa: E731
        return vmap(inner)(xs), vmap(through_grad)(xs)

    got = no_fallback(lambda: cases(lambda x, w: torchconv.conv2d(x, w, None, 1, 1)))
    for g, r in zip(got, cases(lambda x, w: F.conv2d(x, w, None, 1, 1))):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("transform", ["vmap", "vmap-of-grad"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("slices", ["samples", "batches"])
@pytest.mark.parametrize("mapped_dim", [0, 1])
def test_auto_chooses_on_the_layout_the_kernels_run_under_vmap(device, transform, channels_last, slices, mapped_dim,
                                                               monkeypatch):
    """Under vmap "auto" chooses for the memory format of the folded input the kernels get (the
    fold's rule, on the slice the transform shows), under vmap alone (whose wrapped tensor answers
    is_contiguous for the contiguous format only) as under vmap of grad: for slices that are batches
    of channels_last images, channels_last."""
    ours, _ = layer_case("auto", device, groups=2)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    if slices == "samples":   # per-sample calls: each sample unsqueezed to a batch of one
        x = torch.randn(5, 4, 8, 7, dtype=torch.float64, device=device).contiguous(memory_format=fmt)
        call = lambda p, sample: functional_call(ours, p, (sample.unsqueeze(0),)).square().sum()  # noqa: E731
    else:
        x = torch.stack([torch.randn(2, 4, 8, 7, dtype=torch.float64, device=device).contiguous(memory_format=fmt)
                         for _ in range(5)])
        call = lambda p, batch: functional_call(ours, p, (batch,)).square().sum()  # noqa: E731
    seen, run = [], []
    forward = torchconv.ops.FORWARD["direct"]

    def recording(input, *args, **kwargs):
        seen.append(torchconv.tuning.memory_format(input))
        return "direct"
    monkeypatch.setattr(torchconv.selection, "select_algorithm", recording)
    monkeypatch.setitem(torchconv.ops.FORWARD, "direct",
                        lambda input, *a: run.append(torchconv.tuning.memory_format(input)) or forward(input, *a))
    torchconv.clear_cache()
    params = {k: v.detach() for k, v in ours.named_parameters()}
    mapped = x.movedim(0, mapped_dim)
    if transform == "vmap":
        no_fallback(lambda: vmap(call, in_dims=(None, mapped_dim))(params, mapped))
    else:
        no_fallback(lambda: vmap(grad(call), in_dims=(None, mapped_dim))(params, mapped))
    assert len(run) == 1 and seen == run, (seen, run)
    if slices == "batches":
        assert run == ["channels_last" if channels_last else "contiguous"], run


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", ["module", "functional"])
def test_auto_chooses_on_the_shapes_the_kernels_run_under_vmap(device, entry, monkeypatch):
    """Under per-sample gradients a call shows the caller one sample, but the forward's kernel runs
    the folded batch: "auto" chooses on that shape, never on the one-sample shape (whose best
    algorithm differs: the rule's split-reduction CSG for a batch of 1), by the rule, once (a repeated
    step is the memo's); the backward runs the same algorithm, grad_weight over the samples as
    groups, and the gradients are right."""
    ours, ref = layer_case("auto", device, groups=2)
    x = torch.randn(5, 4, 8, 7, dtype=torch.float64, device=device)
    seen = []
    real = torchconv.selection.select_algorithm

    def recording(input, weight, stride, dilation, groups, padding=0):
        seen.append((tuple(input.shape), tuple(weight.shape), groups))
        return real(input, weight, stride, dilation, groups, padding)

    monkeypatch.setattr(torchconv.selection, "select_algorithm", recording)
    params = {k: v.detach() for k, v in ours.named_parameters()}
    if entry == "module":
        call = lambda p, sample: functional_call(ours, p, (sample.unsqueeze(0),))  # noqa: E731
    else:
        call = lambda p, sample: torchconv.conv2d(sample.unsqueeze(0), p["weight"], p["bias"], 1, 1, 1, 2)  # noqa: E731
    old = torchconv.get_benchmark()
    torchconv.set_benchmark(True)  # the rule still chooses: no timing inside a transform
    try:
        torchconv.clear_cache()
        per_sample_grads = vmap(grad(lambda p, s: call(p, s).square().sum()), in_dims=(None, 0))
        per_sample = no_fallback(lambda: per_sample_grads(params, x))
        first = list(seen)
        seen.clear()
        no_fallback(lambda: per_sample_grads(params, x))
    finally:
        torchconv.set_benchmark(old)
    assert seen == [], seen  # a repeated step's choices are the memo's: dictionary look-ups, no rule
    seen = first
    assert seen == [((5, 4, 8, 7), (6, 2, 3, 3), 2)], seen  # the forward's shape, the batch folded
    assert_per_sample_gradients_match(per_sample, ref, x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_vmap_of_the_forward_folds_into_the_batch(algorithm, device, channels_last, operator_calls):
    """vmap over a stack of batches (mapped dimension 1) computes each batch's output in one call, in
    the layout PyTorch's own gives: channels_last for channels_last batches (float64 on CUDA: NCHW)."""
    ours, ref = layer_case(algorithm, device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.stack([torch.randn(2, 4, 8, 9, dtype=torch.float64, device=device).contiguous(memory_format=fmt)
                     for _ in range(3)], dim=1)
    with skip_if_no_kernel(algorithm, device):
        out = no_fallback(lambda: vmap(ours, in_dims=1)(x))
    assert operator_calls["forward"] == 1
    refs = [ref(x[:, i]) for i in range(3)]
    torch.testing.assert_close(out, torch.stack(refs), rtol=1e-10, atol=1e-10)
    assert all(r.is_contiguous(memory_format=fmt) == (device == "cpu" or not channels_last) for r in refs)
    assert all(o.is_contiguous(memory_format=fmt) == r.is_contiguous(memory_format=fmt) for o, r in zip(out, refs))


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("mapped_dim", [0, 1, 2, 4])
def test_folding_slices_copies_at_most_once_into_a_slice_layout(channels_last, mapped_dim):
    """The batching rules fold vmap's dimension into the batch (the forward, grad_input) or into the
    channels (the grouped grad_weight call). The fold equals flatten's, keeps one slice's memory
    format, is a view where one suffices and copies once where it cannot be."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Copies(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Copies.count += func.overloadpacket in (torch.ops.aten.clone, torch.ops.aten.copy_)
            return func(*args, **(kwargs or {}))

    fmt = torch.channels_last if channels_last else torch.contiguous_format
    slices = [torch.randn(3, 4, 6, 7).contiguous(memory_format=fmt) for _ in range(5)]
    mapped = torch.stack(slices, dim=mapped_dim).movedim(mapped_dim, 0)   # vmap's dimension moved first
    if mapped_dim != 0:   # the slices of a stack along another dimension are no longer channels_last
        fmt = torch._prims_common.suggest_memory_format(mapped[0])
    for t, dim, expected in ((mapped, 0, mapped.flatten(0, 1)), (mapped.transpose(0, 1), 1,
                                                                 mapped.transpose(0, 1).flatten(1, 2))):
        Copies.count = 0
        with Copies():
            folded = torchconv.func_transforms._folded(t, dim, mapped)
        assert torch.equal(folded, expected)
        assert folded.is_contiguous(memory_format=fmt)
        assert Copies.count <= 1
        view = t.flatten(dim, dim + 1)
        if view.data_ptr() == t.data_ptr() and view.is_contiguous(memory_format=fmt):
            assert Copies.count == 0 and folded.data_ptr() == t.data_ptr()


def test_slice_layout_is_the_one_pytorch_suggests():
    """A fold takes one slice's memory format from the mapped tensor's sizes and strides, as
    `suggest_memory_format` reads it off the slice: the same answer for every order of the strides,
    sizes 0 to 3 (size 1 and empty dimensions are the ambiguous cases), every other column or
    channel, and dimensions of size 1 expanded (stride 0)."""
    suggest = torch._prims_common.suggest_memory_format
    for sizes in itertools.product((0, 1, 2, 3), repeat=4):
        for order in itertools.permutations(range(4)):
            dense = torch.empty([sizes[d] for d in order]).permute([order.index(d) for d in range(4)])
            variants = [dense, dense[..., ::2], dense[:, ::2]]
            variants += [dense.expand([3 if n == 1 and d == i else n for d, n in enumerate(sizes)])
                         for i in range(4) if sizes[i] == 1]
            for t in variants:
                got = torchconv.func_transforms._strides_like_channels_last(t.shape, t.stride())
                assert got == (suggest(t) == torch.channels_last), (t.shape, t.stride())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_autograd_through_vmap(algorithm, device):
    """Below the last transform a vmap rule's folded call runs the operator with its C++ autograd: a
    gradient taken outside the transform, and a gradient of that gradient, are PyTorch's."""
    x = torch.randn(3, 2, 4, 6, 5, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(5, 4, 3, 3, dtype=torch.float64, device=device, requires_grad=True)

    def grads(conv):
        out = vmap(lambda sample: conv(sample, w, None, 1, 1))(x)
        gx, gw = torch.autograd.grad(out.square().sum(), (x, w), create_graph=True)
        return (gx, gw) + torch.autograd.grad(gw.sum(), x)

    with skip_if_no_kernel(algorithm, device):
        got = no_fallback(lambda: grads(lambda *a: torchconv.conv2d(*a, algorithm=algorithm)))
    for g, r in zip(got, grads(F.conv2d)):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_ensemble_of_models_by_vmap_over_stacked_parameters(device):
    """vmap over stacked parameters (stack_module_state): a weight per slice, each model's output as
    its own module gives; the gradient of the ensemble's loss, and each model's gradients (parameters
    and input) by vmap of grad, as well."""
    refs = [nn.Conv2d(4, 6, 3, padding=1).double().to(device) for _ in range(3)]
    models = [torchconv.Conv2d.from_conv(r) for r in refs]
    params, _ = stack_module_state(models)
    x = torch.randn(2, 4, 8, 7, dtype=torch.float64, device=device)
    run = lambda p, x: functional_call(models[0], p, (x,))
    out = vmap(run, in_dims=(0, None))(params, x)
    torch.testing.assert_close(out, torch.stack([r(x) for r in refs]), rtol=1e-10, atol=1e-10)
    grads = grad(lambda p: vmap(run, in_dims=(0, None))(p, x).square().sum())(params)
    # Each model's gradient by vmap of grad: the backward mapped with a weight per slice.
    each = no_fallback(lambda: vmap(grad(lambda p, x: run(p, x).square().sum(), argnums=(0, 1)),
                                    in_dims=(0, None))(params, x))
    for i, r in enumerate(refs):
        r.zero_grad()
        xr = x.detach().requires_grad_()
        r(xr).square().sum().backward()
        torch.testing.assert_close(grads["weight"][i], r.weight.grad, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(each[0]["weight"][i], r.weight.grad, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(each[0]["bias"][i], r.bias.grad, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(each[1][i], xr.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_jacrev_with_respect_to_the_input(algorithm, device):
    """jacrev (vjp mapped over the output's basis): the Jacobian PyTorch's convolution has."""
    ours, ref = layer_case(algorithm, device)
    x = torch.randn(1, 4, 5, 4, dtype=torch.float64, device=device)
    with skip_if_no_kernel(algorithm, device):
        jac = no_fallback(lambda: jacrev(ours)(x))
    torch.testing.assert_close(jac, jacrev(ref)(x), rtol=1e-10, atol=1e-10)


def test_functional_conv2d_under_grad():
    """torchconv.conv2d (not only the module) under torch.func.grad, 3-D input, 'same' padding."""
    x = torch.randn(4, 8, 7, dtype=torch.float64)
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64)
    got = grad(lambda w: torchconv.conv2d(x, w, None, 1, "same").sin().sum())(w)
    want = grad(lambda w: F.conv2d(x, w, None, 1, "same").sin().sum())(w)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("groups,stride", [(1, 1), (2, 2)], ids=["g1s1", "g2s2"])
def test_second_order_and_forward_mode(algorithm, device, groups, stride):
    """Gradients of gradients (input and weight), jvp with tangents for input, weight and bias,
    jacfwd, hessian (forward over reverse) and a Hessian-vector product: what PyTorch's convolution
    gives under the same transforms."""
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64, device=device)
    w = torch.randn(6, 4 // groups, 3, 3, dtype=torch.float64, device=device)
    b = torch.randn(6, dtype=torch.float64, device=device)
    v = torch.randn_like(x)
    if (reason := torchconv.unsupported_reason(algorithm, x, w, stride, 1, 1, groups)) is not None:
        pytest.skip(f"{algorithm}: {reason}")
    ours = lambda x, w, b: torchconv.conv2d(x, w, b, stride, 1, 1, groups, algorithm=algorithm)
    theirs = lambda x, w, b: F.conv2d(x, w, b, stride, 1, 1, groups)
    cases = {
        "grad of grad, input": lambda c: grad(lambda x: grad(lambda x: c(x, w, b).sin().sum())(x).square().sum())(x),
        "grad of grad, weight": lambda c: grad(lambda w: grad(lambda x: c(x, w, b).sin().sum())(x).square().sum())(w),
        "jvp": lambda c: jvp(c, (x, w, b), (torch.ones_like(x), torch.ones_like(w), torch.ones_like(b))),
        "jvp, bias only": lambda c: jvp(lambda b: c(x, w, b), (b,), (torch.ones_like(b),)),
        "jacfwd": lambda c: jacfwd(lambda x: c(x, w, b))(x[:1, :, :4, :4]),
        "hessian, weight": lambda c: hessian(lambda w: c(x[:1, :, :4, :4], w, b).sin().sum())(w),
        "hvp": lambda c: jvp(grad(lambda x: c(x, w, b).sin().sum()), (x,), (v,)),
    }
    for name, case in cases.items():
        with skip_if_no_kernel(algorithm, device):
            got = case(ours)
        torch.testing.assert_close(got, case(theirs), rtol=1e-9, atol=1e-9, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_forward_mode_ad_with_dual_tensors(algorithm, device):
    """torch.autograd.forward_ad (dual tensors, no torch.func): torchconv.conv2d's and the module's
    outputs carry the tangents PyTorch's convolution gives (a dropped tangent would be a wrong
    answer)."""
    import torch.autograd.forward_ad as fwAD

    ours, ref = layer_case(algorithm, device)
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64, device=device)
    w, b = ref.weight.detach(), ref.bias.detach()
    dx, dw = torch.randn_like(x), torch.randn_like(w)
    with skip_if_no_kernel(algorithm, device):
        with fwAD.dual_level():
            got = fwAD.unpack_dual(torchconv.conv2d(fwAD.make_dual(x, dx), fwAD.make_dual(w, dw), b, 1, 1,
                                                    algorithm=algorithm)).tangent
            got_module = fwAD.unpack_dual(ours(fwAD.make_dual(x, dx))).tangent
    with fwAD.dual_level():
        want = fwAD.unpack_dual(F.conv2d(fwAD.make_dual(x, dx), fwAD.make_dual(w, dw), b, 1, 1)).tangent
    assert got is not None and got_module is not None
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got_module, F.conv2d(dx, w, None, 1, 1), rtol=1e-10, atol=1e-10)


def test_benchmark_mode_under_a_transform_takes_the_rule():
    """Benchmark mode cannot time the operators on a transform's wrapped tensors: the rule chooses
    there, and the gradient is right."""
    x = torch.randn(2, 4, 8, 8, dtype=torch.float64)
    w = torch.randn(3, 4, 3, 3, dtype=torch.float64)
    old = torchconv.get_benchmark()
    torchconv.set_benchmark(True)
    try:
        got = grad(lambda w: torchconv.conv2d(x, w, padding=1).square().sum())(w)
    finally:
        torchconv.set_benchmark(old)
    want = grad(lambda w: F.conv2d(x, w, padding=1).square().sum())(w)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_a_choice_under_a_transform_is_not_kept_for_eager_calls(monkeypatch):
    """In benchmark mode a module's call under torch.func takes the rule's choice without keeping it:
    the next eager call of the same shape measures (here: asks benchmark mode's timing)."""
    conv = torchconv.Conv2d(4, 3, 3, padding=1).double()
    x = torch.randn(2, 4, 8, 8, dtype=torch.float64)
    timed = []
    real = torchconv.tuning.benchmark_choice
    monkeypatch.setattr(torchconv.tuning, "benchmark_choice", lambda *a, **k: timed.append(1) or real(*a, **k))
    old = torchconv.get_benchmark()
    torchconv.set_benchmark(True)
    try:
        torchconv.clear_cache()
        params = {k: v.detach() for k, v in conv.named_parameters()}
        grad(lambda p: functional_call(conv, p, (x,)).sum())(params)
        assert not timed
        conv(x)  # the same key in the module's memo (a weight that requires grad, grad mode on)
        assert timed
    finally:
        torchconv.set_benchmark(old)


def test_per_sample_gradients_example_runs():
    """examples/per_sample_grads.py (vmap of grad over a converted CNN, checked against a backward a
    sample) runs and agrees."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(root, "examples", "per_sample_grads.py"), "--batch", "4",
                           "--size", "12", "--device", "cpu"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "largest relative difference" in done.stdout


@st.composite
def mapped_layer(draw):
    """A layer for the vmap rules: shape, stride, padding, dilation, groups, layout, what vmap maps."""
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    layer = dict(samples=draw(st.integers(1, 4)), n=draw(st.integers(1, 2)), cg=draw(st.integers(1, 5)),
                 kg=draw(st.integers(1, 4)), groups=groups, h=draw(st.integers(3, 9)), w=draw(st.integers(3, 9)),
                 r=draw(st.integers(1, 3)), s=draw(st.integers(1, 3)), stride=draw(st.sampled_from([1, 1, 2])),
                 padding=draw(st.sampled_from([0, 1, 2])), dilation=draw(st.sampled_from([1, 1, 2])),
                 bias=draw(st.booleans()), channels_last=draw(st.booleans()),
                 algorithm=draw(st.sampled_from(("auto",) + ALGORITHMS)),
                 case=draw(st.sampled_from(["per-sample", "input and weight", "ensemble", "jacrev"])))
    if layer["algorithm"] == "winograd":  # its filters: 3x3, stride 1, undilated
        layer.update(r=3, s=3, stride=1, dilation=1)
    return layer


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=int(os.environ.get("TORCHCONV_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture], derandomize=True)
@given(layer=mapped_layer())
def test_fuzzed_layers_under_vmap(device, layer):
    """For layers drawn by hypothesis (odd sizes, strides, padding, dilation, groups, both layouts, every
    algorithm and "auto"): per-sample gradients of the parameters, per-sample gradients of both input
    and weight, an ensemble's gradients (a weight per slice) and jacrev give what the same transforms
    give over PyTorch's convolution, in float64. A shape the algorithm cannot take is skipped."""
    a = layer
    gen = torch.Generator().manual_seed(zlib.crc32(repr(sorted(a.items())).encode()))
    fmt = torch.channels_last if a["channels_last"] else torch.contiguous_format
    c = a["cg"] * a["groups"]
    if a["channels_last"]:  # each sample's images channels_last (vmap cannot convert a layout inside)
        x = torch.randn(a["samples"], a["n"], a["h"], a["w"], c, generator=gen, dtype=torch.float64)
        x = x.to(device).permute(0, 1, 4, 2, 3)
    else:
        x = torch.randn(a["samples"], a["n"], c, a["h"], a["w"], generator=gen, dtype=torch.float64).to(device)
    w = torch.randn(a["kg"] * a["groups"], a["cg"], a["r"], a["s"], generator=gen, dtype=torch.float64).to(device)
    w = w.contiguous(memory_format=fmt)
    b = torch.randn(w.shape[0], generator=gen, dtype=torch.float64).to(device) if a["bias"] else None
    args = (a["stride"], a["padding"], a["dilation"], a["groups"])
    if any(((size + 2 * a["padding"] - a["dilation"] * (k - 1) - 1) < 0)
           for size, k in ((a["h"], a["r"]), (a["w"], a["s"]))):
        event("no output")
        return  # no output: both raise (test_fuzz's business)
    if a["algorithm"] != "auto" and torchconv.unsupported_reason(a["algorithm"], x[0], w, a["stride"], a["dilation"],
                                                                 a["padding"], a["groups"]) is not None:
        event(f"{a['algorithm']} cannot")
        return
    event(f"{a['case']}, {a['algorithm']}")
    ws = torch.stack([w * (i + 1) for i in range(a["samples"])])

    def cases(conv):
        loss = lambda w, b, x: conv(x, w, b).sin().sum()  # noqa: E731
        if a["case"] == "per-sample":
            return vmap(grad(loss, argnums=(0, 1) if b is not None else 0), in_dims=(None, None, 0))(w, b, x)
        if a["case"] == "input and weight":
            return vmap(grad(loss, argnums=(0, 2)), in_dims=(None, None, 0))(w, b, x)
        if a["case"] == "ensemble":
            return vmap(grad(loss, argnums=(0, 2)), in_dims=(0, None, None))(ws, b, x[0])
        return jacrev(lambda w: conv(x[0], w, b))(w)

    ours = lambda x, w, b: torchconv.conv2d(x, w, b, *args, algorithm=a["algorithm"])  # noqa: E731
    with skip_if_no_kernel(a["algorithm"], device) if a["algorithm"] != "auto" else contextlib.nullcontext():
        got = no_fallback(lambda: cases(ours))
    want = cases(lambda x, w, b: F.conv2d(x, w, b, *args))
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


test_fuzzed_layers_under_vmap = fuzz_hunt(test_fuzzed_layers_under_vmap)
