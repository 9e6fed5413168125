"""torchconv.Conv2d is a drop-in nn.Conv2d and convert() swaps it into any model."""
import copy
import io
import warnings

import pytest
import torch
import torch.nn as nn

import torchconv
from conftest import ALGORITHMS, DEVICES, skip_if_no_kernel


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.branches = nn.ModuleList([nn.Conv2d(c, c, 3, padding=1, bias=False), nn.Conv2d(c, c, 1)])
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.branches[0](x) + self.branches[1](x)) + x)


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.ReLU())
        self.blocks = nn.ModuleDict({"a": Block(16), "b": Block(16)})
        self.down = nn.Conv2d(16, 24, 3, stride=2, padding=1, padding_mode="reflect")
        self.dw = nn.Conv2d(24, 24, 3, padding="same", groups=24, dilation=2)
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        x = self.stem(x)
        x = self.blocks["b"](self.blocks["a"](x))
        x = self.dw(torch.relu(self.down(x)))
        return self.fc(x.mean((2, 3)))


def conv_modules(model):
    return [m for m in model.modules() if isinstance(m, nn.Conv2d)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ["auto", "direct", "csg", "gemm"])
def test_convert_matches_original(algorithm, device):
    torch.manual_seed(0)
    original = SmallResNet().to(device).double()
    model = torchconv.convert(copy.deepcopy(original), algorithm=algorithm)
    convs = conv_modules(model)
    assert len(convs) == 7 and all(type(m) is torchconv.Conv2d for m in convs)
    x = torch.randn(2, 3, 31, 27, dtype=torch.float64, device=device)
    with skip_if_no_kernel(algorithm if algorithm != "auto" else "direct", device):
        out = model(x)
    ref = original(x)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    out.square().sum().backward()
    ref.square().sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), original.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-9, msg=name)


def test_convert_shares_parameters_and_mode():
    model = SmallResNet().eval()
    weights = [m.weight for m in conv_modules(model)]
    converted = torchconv.convert(model, algorithm="gemm")
    assert converted is model
    assert [m.weight for m in conv_modules(converted)] == weights
    assert all(not m.training for m in converted.modules())
    assert all(m.algorithm == "gemm" for m in conv_modules(converted))


def test_convert_keeps_shared_modules_shared_and_handles_a_bare_conv():
    conv = nn.Conv2d(4, 4, 3)
    seq = nn.Sequential(conv, nn.ReLU(), conv)
    torchconv.convert(seq)
    assert seq[0] is seq[2] and isinstance(seq[0], torchconv.Conv2d)
    bare = torchconv.convert(nn.Conv2d(2, 3, 1))
    assert isinstance(bare, torchconv.Conv2d)


@pytest.mark.parametrize("device", DEVICES)
def test_convert_turns_a_lazy_conv_into_ours_when_it_is_sized(device):
    """An nn.LazyConv2d has no channel count until its first call: convert leaves it lazy, and that
    call makes it a torchconv.Conv2d (with the algorithm asked for) where it would have become an
    nn.Conv2d, computing what the unconverted model computes."""
    def model():
        torch.manual_seed(0)
        lazy = nn.LazyConv2d(6, 3, padding=1, dtype=torch.float64, device=device)
        return nn.Sequential(lazy, nn.ReLU(), lazy, nn.Conv2d(6, 5, 1, dtype=torch.float64, device=device))
    reference, ours = model(), torchconv.convert(model(), algorithm="gemm")
    assert type(ours[0]) is nn.LazyConv2d and ours[0] is ours[2]
    x = torch.randn(2, 6, 9, 7, dtype=torch.float64, device=device)
    with skip_if_no_kernel("gemm", device):
        torch.manual_seed(1)  # the first call draws the lazy weights
        out = ours(x)
    torch.manual_seed(1)
    torch.testing.assert_close(out, reference(x), rtol=1e-10, atol=1e-10)
    assert type(reference[0]) is nn.Conv2d
    assert [type(m) for m in ours] == [torchconv.Conv2d, nn.ReLU, torchconv.Conv2d, torchconv.Conv2d]
    assert ours[0] is ours[2] and ours[0].algorithm == "gemm"


def test_convert_leaves_other_conv2d_subclasses_alone():
    """A subclass may compute something else (here a standardized weight in _conv_forward): convert
    leaves it, and what it computes, as it is."""
    class StandardizedConv2d(nn.Conv2d):
        def _conv_forward(self, input, weight, bias):
            weight = (weight - weight.mean((1, 2, 3), keepdim=True)) / weight.std((1, 2, 3), keepdim=True)
            return super()._conv_forward(input, weight, bias)

    model = nn.Sequential(StandardizedConv2d(3, 4, 3), nn.Conv2d(4, 4, 1))
    x = torch.randn(1, 3, 8, 8)
    before = model(x)
    torchconv.convert(model)
    assert type(model[0]) is StandardizedConv2d and type(model[1]) is torchconv.Conv2d
    torch.testing.assert_close(model(x), before)


def test_state_dict_round_trip():
    ours = torchconv.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2, algorithm="direct")
    theirs = nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    theirs.load_state_dict(ours.state_dict())
    torch.testing.assert_close(theirs.weight, ours.weight)
    fresh = torchconv.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2)
    fresh.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(fresh.bias, theirs.bias)


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_padding_modes(padding_mode, algorithm):
    torch.manual_seed(1)
    theirs = nn.Conv2d(3, 5, 3, padding=(1, 2) if algorithm != "winograd" else 1, padding_mode=padding_mode).double()
    ours = torchconv.Conv2d(3, 5, 3, padding=theirs.padding, padding_mode=padding_mode, algorithm=algorithm).double()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 3, 9, 11, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-10, atol=1e-10)


def test_to_and_double_and_repr():
    m = torchconv.Conv2d(3, 4, 3, algorithm="winograd")
    m = m.double()
    assert m.weight.dtype == torch.float64
    out = m(torch.randn(1, 3, 8, 8, dtype=torch.float64))
    assert out.dtype == torch.float64
    m = m.to(torch.float32)
    assert m(torch.randn(1, 3, 8, 8)).dtype == torch.float32
    assert "algorithm='winograd'" in repr(m)
    assert "algorithm='auto'" in repr(torchconv.Conv2d(1, 1, 1))


def test_train_step_matches_nn_conv2d():
    torch.manual_seed(3)
    original = SmallResNet().double()
    ours = torchconv.convert(copy.deepcopy(original))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (original, ours)]
    x, target = torch.randn(4, 3, 20, 20, dtype=torch.float64), torch.randint(0, 10, (4,))
    for _ in range(3):
        for model, opt in zip((original, ours), opts):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), target).backward()
            opt.step()
    for p, q in zip(ours.parameters(), original.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reparametrize", ["weight_norm", "spectral_norm", "orthogonal"])
def test_reparametrized_weights_are_used(reparametrize, device):
    """A weight computed from other parameters (torch.nn.utils.parametrizations, or the hook-based
    spectral_norm that sets it as a plain attribute) is what the auto fast path convolves with, in
    eval and in training, and its gradients reach the underlying parameters as nn.Conv2d's do."""
    torch.manual_seed(5)
    bias = reparametrize != "orthogonal"
    reference = nn.Conv2d(6, 6, 3, padding=1, bias=bias).double().to(device)
    ours = torchconv.Conv2d(6, 6, 3, padding=1, bias=bias).double().to(device)
    ours.load_state_dict(reference.state_dict())
    apply = {"weight_norm": nn.utils.parametrizations.weight_norm, "spectral_norm": nn.utils.spectral_norm,
             "orthogonal": nn.utils.parametrizations.orthogonal}[reparametrize]
    reference, ours = apply(reference), apply(ours)
    if reparametrize == "spectral_norm":  # the same power-iteration start on both
        ours.weight_u.copy_(reference.weight_u), ours.weight_v.copy_(reference.weight_v)
    x = torch.randn(2, 6, 9, 8, dtype=torch.float64, device=device)
    with skip_if_no_kernel(torchconv.select_algorithm(x, reference.weight, (1, 1), (1, 1), 1), device):
        for train in (False, True):
            reference.train(train), ours.train(train)
            expected = reference(x)
            out = ours(x)
            torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-10)
        out.square().sum().backward()
    expected.square().sum().backward()
    for (name, p), q in zip(ours.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-10, msg=name)


def test_meta_device_forward_and_backward():
    """A model built on the meta device runs with algorithm "auto" for its shapes (nn.Conv2d does),
    forward and backward."""
    ref = nn.Conv2d(4, 6, (3, 5), stride=2, padding=(1, 2), dilation=(2, 1), groups=2, device="meta")
    conv = torchconv.convert(copy.deepcopy(ref))
    x = torch.empty(3, 4, 11, 13, device="meta", requires_grad=True)
    y = conv(x)
    assert y.device.type == "meta" and y.shape == ref(x).shape
    y.sum().backward()
    assert x.grad.shape == x.shape and conv.weight.grad.shape == conv.weight.shape
    assert torchconv.conv2d(x[0], conv.weight, None, 2, (1, 2), (2, 1), 2).shape == ref(x[0]).shape


def test_vmap_runs_the_module():
    """torch.func.vmap over a torchconv.Conv2d (contiguous and channels_last samples) matches
    nn.Conv2d's: auto's choice asks nothing of a batched tensor that vmap cannot answer."""
    ref = nn.Conv2d(4, 6, 3, padding=1)
    conv = torchconv.convert(copy.deepcopy(ref))
    x = torch.randn(3, 2, 4, 9, 7)
    channels_last = torch.randn(2, 4, 9, 7).contiguous(memory_format=torch.channels_last)[None].expand(3, -1, -1, -1, -1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule")  # PyTorch's per-sample loop for the operators
        for batch in (x, channels_last):
            assert torch.allclose(torch.vmap(conv)(batch), torch.vmap(ref)(batch), atol=1e-5)


def test_torch_jit_trace_runs_the_operators_and_script_says_why_it_cannot():
    """torch.jit.trace records torchconv's operators (the traced model matches nn.Conv2d's, saved
    and loaded); torch.jit.script, which cannot compile the forward's algorithm choice, raises one
    RuntimeError that names the module and the ways that work instead of failing inside it."""
    ref = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 6, 3, groups=3))
    model = torchconv.convert(copy.deepcopy(ref))
    x = torch.randn(2, 4, 9, 7)
    traced = torch.jit.trace(model, x)
    assert "torchconv::conv2d_" in str(traced.inlined_graph)
    saved = io.BytesIO()
    torch.jit.save(traced, saved)
    saved.seek(0)
    assert torch.allclose(torch.jit.load(saved)(x), ref(x), atol=1e-5)
    with pytest.raises(RuntimeError, match="torchconv.Conv2d cannot be compiled by torch.jit.script.*torch.export"):
        torch.jit.script(model)


class _FunctionalConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 3, 3, 3) / 9)

    def forward(self, x):
        return torchconv.conv2d(x, self.weight, None, 1, "same", 1, 2)


def test_fx_symbolic_trace_records_each_convolution_as_one_call():
    """torch.fx.symbolic_trace records every torchconv.Conv2d (auto or an explicit algorithm, any
    padding mode) and every torchconv.conv2d call as one call of torchconv.conv2d with the layer's
    arguments, as it records nn.Conv2d as one module call; the GraphModule computes what the model
    does. A padding mode's padding is its own node before it."""
    model = nn.Sequential(
        torchconv.Conv2d(4, 6, 3, padding=1), nn.ReLU(),
        torchconv.Conv2d(6, 6, 3, padding=2, padding_mode="reflect", stride=2, groups=2),
        torchconv.Conv2d(6, 6, 1, algorithm="direct"), _FunctionalConv())
    graph_module = torch.fx.symbolic_trace(model)
    calls = [n for n in graph_module.graph.nodes if n.op == "call_function" and n.target is torchconv.conv2d]
    assert len(calls) == 4
    assert calls[1].args[3:] == ((2, 2), 0, (1, 1), 2, "auto") and calls[2].args[-1] == "direct"
    x = torch.randn(2, 4, 11, 9)
    torch.testing.assert_close(graph_module(x), model(x))


def test_torchvision_feature_extraction_of_a_converted_model():
    """torchvision's FX feature extraction takes a converted ResNet: the features of a conv and of a
    stage are nn.Conv2d's."""
    torchvision = pytest.importorskip("torchvision")
    from torchvision.models.feature_extraction import create_feature_extractor
    reference = torchvision.models.resnet18(weights=None).eval()
    model = torchconv.convert(copy.deepcopy(reference))
    nodes = {"layer2.1.conv2": "conv", "layer3": "stage"}
    x = torch.randn(1, 3, 64, 64)
    ours, theirs = create_feature_extractor(model, nodes)(x), create_feature_extractor(reference, nodes)(x)
    for name in nodes.values():
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4, atol=1e-4)


def test_unknown_algorithm_in_module():
    with pytest.raises(ValueError, match="algorithm"):
        torchconv.Conv2d(3, 3, 3, algorithm="fft")
    with pytest.raises(ValueError, match="algorithm"):
        torchconv.convert(nn.Conv2d(3, 3, 3), algorithm="fft")


def test_auto_choice_is_remembered_and_remade_when_a_switch_flips(monkeypatch):
    """torchconv.Conv2d chooses its "auto" algorithm once per input and setting: repeated calls ask
    no one, and a flip of a switch the choice depends on (TF32, deterministic mode, grad mode, the
    input's shape) makes it choose again."""
    import torchconv.modules as modules

    calls = []
    choose = modules.auto_algorithm
    monkeypatch.setattr(modules, "auto_algorithm", lambda *a: calls.append(1) or choose(*a))
    conv = torchconv.Conv2d(4, 6, 3, padding=1)
    x = torch.randn(2, 4, 7, 5)
    old_tf32, old_det = torch.backends.cudnn.allow_tf32, torch.are_deterministic_algorithms_enabled()
    try:
        with torch.no_grad():
            for _ in range(3):
                conv(x)
            assert len(calls) == 1
            torch.backends.cudnn.allow_tf32 = not old_tf32
            conv(x)
            conv(x)
            assert len(calls) == 2
            torch.use_deterministic_algorithms(not old_det)
            conv(x)
            assert len(calls) == 3
            conv(torch.randn(1, 4, 7, 5))
            assert len(calls) == 4
        conv(x)  # grad mode on, the weight requires grad
        assert len(calls) == 5
    finally:
        torch.backends.cudnn.allow_tf32 = old_tf32
        torch.use_deterministic_algorithms(old_det)
