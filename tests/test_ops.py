"""The operators themselves: schema, fake (meta) kernels and autograd registrations pass
torch.library.opcheck; torch.compile(fullgraph=True) traces a model built from torchconv.Conv2d,
torch.export exports one with a dynamic batch (and AOTInductor compiles it), torch.onnx.export
writes it as ONNX Conv nodes; the profiler names the algorithm that ran."""
import io
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import torchconv
from conftest import ALGORITHMS, DEVICES, skip_if_no_kernel


def sample(device, requires_grad, layout=torch.contiguous_format):
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64, device=device).contiguous(memory_format=layout)
    w = torch.randn(6, 2, 3, 3, dtype=torch.float64, device=device)
    b = torch.randn(6, dtype=torch.float64, device=device)
    return tuple(t.requires_grad_(requires_grad) for t in (x, w, b))


# A channels_last input: the fake kernels give the outputs' memory format as the real ones do
# (channels_last, but float64 on CUDA NCHW, as PyTorch's convolution).
LAYOUTS = pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])


@LAYOUTS
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_opcheck_forward(algorithm, device, layout):
    op = getattr(torch.ops.torchconv, f"conv2d_{algorithm}").default
    x, w, b = sample(device, requires_grad=True, layout=layout)
    with skip_if_no_kernel(algorithm, device):
        op(x, w, b, [1, 1], [1, 1], [1, 1], 2)
    for bias in (b, None):
        torch.library.opcheck(op, (x, w, bias, [1, 1], [1, 1], [1, 1], 2))


@LAYOUTS
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_opcheck_backward(algorithm, device, layout):
    op = getattr(torch.ops.torchconv, f"conv2d_{algorithm}_backward").default
    x, w, _ = sample(device, requires_grad=True, layout=layout)
    gy = torch.randn(2, 6, 7, 6, dtype=torch.float64, device=device).contiguous(memory_format=layout)
    gy.requires_grad_(True)
    with skip_if_no_kernel(algorithm, device):
        op(gy, x, w, [1, 1], [1, 1], [1, 1], 2, [True, True, True])
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        torch.library.opcheck(op, (gy, x, w, [1, 1], [1, 1], [1, 1], 2, mask))


class SmallNet(nn.Module):
    def __init__(self, algorithm):
        super().__init__()
        self.conv1 = torchconv.Conv2d(3, 8, 3, padding=1, algorithm=algorithm)
        self.conv2 = torchconv.Conv2d(8, 8, 3, padding="same", algorithm=algorithm)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.head(x.mean((2, 3)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ["auto", "gemm"])
def test_torch_compile_fullgraph(algorithm, device):
    torch._dynamo.reset()
    model = SmallNet(algorithm).to(device)
    x = torch.randn(2, 3, 12, 10, device=device)
    with skip_if_no_kernel(algorithm if algorithm != "auto" else torchconv.select_algorithm(
            x, model.conv1.weight, (1, 1), (1, 1), 1), device):
        eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    torch.testing.assert_close(out, eager, rtol=1e-4, atol=1e-5)
    out.sum().backward()
    assert model.conv1.weight.grad is not None


def test_torch_compile_with_a_named_algorithm_turns_the_batch_dynamic():
    """With the algorithm named, nothing in the forward depends on the sizes: torch.compile compiles
    once for the first batch and once with the batch dynamic (as for nn.Conv2d), whatever batches
    follow."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = torchconv.convert(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                            nn.Conv2d(8, 8, 3, padding=1, groups=8)), algorithm="direct")
    compiled = torch.compile(model)
    for n in range(2, 7):
        x = torch.randn(n, 3, 10, 11)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert counters["frames"]["ok"] == 2


def test_torch_compile_of_auto_turns_the_batch_dynamic():
    """`auto` under torch.compile: the first batch size compiles with the choice made while tracing;
    the second compiles once with the batch dynamic, recording torchconv::conv2d_auto (the choice
    made when it runs), so later batch sizes reuse it -- forward and gradients as the eager model's.
    torchconv.conv2d with fullgraph and dynamic=True traces the same way."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = torchconv.convert(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                            nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 4, 1)))
    compiled = torch.compile(model)
    for n in range(2, 7):
        x = torch.randn(n, 3, 10, 11, requires_grad=True)
        ours = torch.autograd.grad(compiled(x).square().sum(), [x, *model.parameters()])
        eager = torch.autograd.grad(model(x).square().sum(), [x, *model.parameters()])
        for a, b in zip(ours, eager):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert counters["frames"]["ok"] == 2
    torch._dynamo.reset()
    w = torch.randn(4, 3, 3, 3)
    conv = torch.compile(lambda x: torchconv.conv2d(x, w, padding=1), dynamic=True, fullgraph=True)
    for n in (2, 5):
        x = torch.randn(n, 3, 9, 8)
        torch.testing.assert_close(conv(x), torchconv.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)


def test_torch_compile_fullgraph_as_the_first_call():
    """A model compiled before any eager call chooses its algorithms while traced (the plan
    registry's answers taken as constants: no graph break); importing torchconv leaves
    torch._dynamo unimported (checked in a fresh interpreter)."""
    torch._dynamo.reset()
    torchconv.selection._auto_memo.clear()
    model = torchconv.convert(nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 8, (3, 1), stride=2)))
    x = torch.randn(2, 4, 9, 11)
    out = torch.compile(model, fullgraph=True)(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    probe = "import sys, torchconv; sys.exit('torch._dynamo' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_torch_export_with_a_dynamic_batch(device, channels_last):
    """torch.export (non-strict, its default) of a model whose batch is declared dynamic, after an
    eager call: `auto` chooses at the example's sizes without a guard on the batch (one would fail
    the export), and the program, saved and loaded, runs other batches as the eager model does. The
    module's memo and the choices' memo are skipped while traced (a symbolic size does not hash, and
    comparing it with the eager call's would guard on it); the functional path (padding="same")
    exports too."""
    torch.manual_seed(0)
    model = SmallNet("auto").to(device)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(3, 3, 12, 10, device=device).contiguous(memory_format=layout)
    with skip_if_no_kernel(torchconv.select_algorithm(x, model.conv1.weight, (1, 1), (1, 1), 1), device):
        model(x)  # the eager call first: the memos hold its batch
    program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    saved = io.BytesIO()
    torch.export.save(program, saved)
    saved.seek(0)
    loaded = torch.export.load(saved).module()
    for n in (2, 5):
        xn = torch.randn(n, 3, 12, 10, device=device).contiguous(memory_format=layout)
        torch.testing.assert_close(loaded(xn), model(xn), rtol=1e-5, atol=1e-6)


def test_strict_torch_export_with_a_dynamic_batch():
    """Strict torch.export (through dynamo) of a model whose batch is declared dynamic records
    torchconv::conv2d_auto, which chooses when it runs: no guard on the batch, and the program runs
    other batches as the eager model does."""
    model = SmallNet("auto")
    x = torch.randn(3, 3, 12, 10)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},), strict=True)
    assert any(n.target is torch.ops.torchconv.conv2d_auto.default for n in program.graph.nodes)
    for n in (2, 5):
        xn = torch.randn(n, 3, 12, 10)
        torch.testing.assert_close(program.module()(xn), model(xn), rtol=1e-5, atol=1e-6)


# An AOTInductor package of a model, compiled and loaded in a fresh process (a package whose loading
# crashes must not take the test run with it). {model} is an expression over nn and torchconv.
AOTI_PACKAGE = """
import os, sys
import torch, torch.nn as nn
import torchconv
model = ({model}).eval()
x = torch.randn(2, 3, 10, 11)
program = torch.export.export(model, (x,), dynamic_shapes=({{0: torch.export.Dim("batch")}},))
path = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(sys.argv[1], "model.pt2"))
runner = torch._inductor.aoti_load_package(path)
x5 = torch.randn(5, 3, 10, 11)
with torch.no_grad():
    torch.testing.assert_close(runner(x5), model(x5), rtol=1e-5, atol=1e-5)
"""


def run_aoti_package(model, folder):
    folder.mkdir()
    return subprocess.run([sys.executable, "-c", AOTI_PACKAGE.format(model=model), str(folder)],
                          capture_output=True, text=True, check=False)


def test_aot_inductor_package_runs_the_operators(tmp_path):
    """An exported program with a dynamic batch compiles with AOTInductor into a package whose
    runner calls torchconv's operators (the extension loaded by `import torchconv`) and computes
    what the eager model does at another batch. Where torch's own AOTInductor cannot load a package
    of a model without torchconv (a process crash, seen with torch 2.11 on the GPU machine), the
    test skips and says so."""
    done = run_aoti_package("torchconv.convert(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), "
                            "nn.Conv2d(8, 8, 3, padding=1, groups=8)))", tmp_path / "ours")
    if done.returncode != 0:
        plain = run_aoti_package("nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())", tmp_path / "plain")
        if plain.returncode != 0:
            pytest.skip(f"AOTInductor fails here without torchconv too (exit {plain.returncode})")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def test_onnx_export_writes_each_convolution_as_a_conv_node():
    """torch.onnx.export with torchconv.onnx_translation_table() writes every torchconv convolution
    (bias or none, groups, stride, dilation, padding) as one ONNX Conv; the model, exported with a
    dynamic batch and run by ONNX's reference evaluator at another batch, computes what the eager
    model does."""
    pytest.importorskip("onnxscript")
    from onnx.reference import ReferenceEvaluator

    model = torchconv.convert(nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4, bias=False),
        nn.Conv2d(8, 4, (1, 3), stride=(2, 1), padding=(0, 1)))).eval()
    x = torch.randn(2, 3, 10, 11)
    program = torch.onnx.export(model, (x,), dynamo=True, custom_translation_table=torchconv.onnx_translation_table(),
                                dynamic_shapes=({0: torch.export.Dim("batch")},), verbose=False)
    assert [node.op_type for node in program.model.graph] == ["Conv", "Relu", "Conv", "Conv"]
    saved = io.BytesIO()
    program.save(saved)
    evaluator = ReferenceEvaluator(saved.getvalue())
    x5 = torch.randn(5, 3, 10, 11)
    (out,) = evaluator.run(None, {evaluator.input_names[0]: x5.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(out), model(x5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_profiler_names_the_algorithm(algorithm, device):
    x = torch.randn(1, 4, 8, 8, device=device, requires_grad=True)
    w = torch.randn(4, 4, 3, 3, device=device, requires_grad=True)
    with skip_if_no_kernel(algorithm, device):
        torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm)
    with torch.profiler.profile() as prof:
        torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm).sum().backward()
    names = {e.key for e in prof.key_averages()}
    assert f"torchconv::conv2d_{algorithm}" in names
    assert f"torchconv::conv2d_{algorithm}_backward" in names


class _OperatorRecorder(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


class _TracedTensor(torch.Tensor):
    seen = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("device", DEVICES)
def test_eager_entry_and_torch_function_overrides(device):
    """Eager calls with plain tensors take torchconv._C.conv2d, the operator's dispatcher call without
    torch.ops' argument parsing: the same result as the operator, NotImplemented for arguments it does
    not take. A torch function mode or a tensor subclass still sees the operator itself, through
    torchconv.conv2d and torchconv.Conv2d alike, and a subclass comes back as itself."""
    from torchconv.ops import FORWARD

    x, w, b = (t.detach() for t in sample(device, requires_grad=False))
    algorithm = torchconv.select_algorithm(x, w, (1, 1), (1, 1), 2)
    with skip_if_no_kernel(algorithm, device):
        expected = FORWARD[algorithm](x, w, b, [1, 1], [1, 1], [1, 1], 2)
    assert torch.equal(torchconv._C.conv2d(algorithm, x, w, b, (1, 1), (1, 1), (1, 1), 2), expected)
    for bad in ((1, 1, 1), 1, (1.0, 1)):  # torch.ops gives the error for these
        assert torchconv._C.conv2d(algorithm, x, w, b, bad, (1, 1), (1, 1), 2) is NotImplemented
    module = torchconv.Conv2d(4, 6, 3, padding=1, groups=2).to(device, torch.float64)
    for call in (lambda t: torchconv.conv2d(t, w, b, 1, 1, 1, 2), module):
        with _OperatorRecorder() as recorder:
            call(x)
        assert any(f in FORWARD.values() for f in recorder.seen)
        _TracedTensor.seen.clear()
        out = call(x.as_subclass(_TracedTensor))
        assert type(out) is _TracedTensor and any(f in FORWARD.values() for f in _TracedTensor.seen)
    assert torchconv._C.conv2d(algorithm, x.as_subclass(_TracedTensor), w, b, (1, 1), (1, 1), (1, 1), 2) is \
        NotImplemented
