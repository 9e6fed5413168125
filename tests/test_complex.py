"""Complex convolutions (complex64, complex128), as nn.Conv2d computes them: three real convolutions
of the chosen algorithm (Gauss's product), differentiable, at the complex dtype's own precision.
The operators themselves take real dtypes only."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchconv
from conftest import ALGORITHMS, DEVICES, rel_err, skip_if_no_kernel

# (N, C, K, H, W, R, S, stride, padding, dilation, groups, bias)
CASES = [
    (2, 5, 7, 9, 11, 3, 3, 1, 1, 1, 1, True),
    (1, 6, 4, 8, 7, 3, 3, 1, 0, 1, 2, False),
    (3, 4, 4, 10, 6, 3, 1, (2, 1), (1, 0), (2, 1), 4, True),  # depthwise, strided, dilated
    (1, 3, 5, 7, 7, 1, 1, 1, 0, 1, 1, True),
]
# Float32's bar for complex64: the three real products cancel no more than PyTorch's own do.
TOLERANCE = {torch.complex64: 1e-5, torch.complex128: 1e-12}


def winograd_can(case):
    _, _, _, _, _, r, s, stride, _, dilation, _, _ = case
    return (r, s) == (3, 3) and stride == 1 and dilation == 1


def complex_inputs(case, dtype, device):
    n, c, k, h, w, r, s, stride, padding, dilation, groups, bias = case
    x = torch.randn(n, c, h, w, dtype=torch.complex128)
    wt = torch.randn(k, c // groups, r, s, dtype=torch.complex128)
    b = torch.randn(k, dtype=torch.complex128) if bias else None
    ref = F.conv2d(x, wt, b, stride, padding, dilation, groups)
    cast = lambda t: None if t is None else t.to(device, dtype)
    return (cast(x), cast(wt), cast(b)), (stride, padding, dilation, groups), ref


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=["complex64", "complex128"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("index", range(len(CASES)))
def test_complex_forward_matches_conv2d(index, algorithm, dtype, device):
    case = CASES[index]
    if algorithm == "winograd" and not winograd_can(case):
        pytest.skip("not a Winograd shape")
    (x, w, b), conv, ref = complex_inputs(case, dtype, device)
    with skip_if_no_kernel(algorithm, device):
        out = torchconv.conv2d(x, w, b, *conv, algorithm=algorithm)
    assert out.dtype == dtype and out.shape == ref.shape
    assert rel_err(torch.view_as_real(out), torch.view_as_real(ref)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_complex_gradients(algorithm, device):
    """gradcheck over complex input, weight and bias (conjugate Wirtinger gradients, as PyTorch's)."""
    case = CASES[0] if algorithm == "winograd" else CASES[2]
    (x, w, b), conv, _ = complex_inputs(case, torch.complex128, device)
    x, w, b = (t[:1].detach().requires_grad_() if t is x else t.detach().requires_grad_() for t in (x, w, b))
    fn = lambda x, w, b: torchconv.conv2d(x, w, b, *conv, algorithm=algorithm)
    with skip_if_no_kernel(algorithm, device):
        assert torch.autograd.gradcheck(fn, (x, w, b))


@pytest.mark.parametrize("device", DEVICES)
def test_converted_complex_model_matches(device):
    """A model of complex nn.Conv2d layers, converted: same outputs and gradients as before, with the
    module's every form (unbatched input, padding='same', a non-zero padding_mode)."""
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 4, padding="same", groups=2),
              nn.Conv2d(8, 4, 3, padding=1, padding_mode="circular", bias=False)]
    model = nn.Sequential(*layers).to(device, torch.complex128)
    ours = torchconv.convert(copy.deepcopy(model))
    for x in (torch.randn(2, 3, 9, 10, dtype=torch.complex128, device=device),
              torch.randn(3, 9, 10, dtype=torch.complex128, device=device)):
        want = model(x)
        got = ours(x)
        assert rel_err(torch.view_as_real(got), torch.view_as_real(want)) <= 1e-12
        grads = torch.autograd.grad(torch.view_as_real(got).square().sum(), list(ours.parameters()))
        wants = torch.autograd.grad(torch.view_as_real(want).square().sum(), list(model.parameters()))
        for g, r in zip(grads, wants):
            assert rel_err(torch.view_as_real(g), torch.view_as_real(r)) <= 1e-12


def test_complex_under_autocast_keeps_its_precision():
    """autocast casts no complex tensor (aten::conv2d's policy): the real parts run in float32."""
    (x, w, b), conv, ref = complex_inputs(CASES[0], torch.complex64, "cpu")
    with torch.autocast("cpu", torch.bfloat16):
        out = torchconv.conv2d(x, w, b, *conv)
    assert out.dtype == torch.complex64
    assert rel_err(torch.view_as_real(out), torch.view_as_real(ref)) <= 1e-5


@pytest.mark.parametrize("input_dtype, weight_dtype, bias_dtype, match", [
    (torch.float32, torch.complex64, None, r"weight dtype \(complex64\) must match input dtype \(float32\)"),
    (torch.complex64, torch.float32, None, r"weight dtype \(float32\) must match input dtype \(complex64\)"),
    (torch.complex64, torch.complex128, None, r"weight dtype \(complex128\) must match input dtype \(complex64\)"),
    (torch.complex64, torch.complex64, torch.float32, r"bias dtype \(float32\) must match input dtype \(complex64\)"),
])
def test_complex_dtype_errors_name_the_argument(input_dtype, weight_dtype, bias_dtype, match):
    x = torch.randn(1, 2, 5, 5, dtype=input_dtype)
    w = torch.randn(3, 2, 3, 3, dtype=weight_dtype)
    b = None if bias_dtype is None else torch.randn(3, dtype=bias_dtype)
    with pytest.raises(TypeError, match=match):
        torchconv.conv2d(x, w, b)


def test_complex32_is_refused():
    x = torch.randn(1, 2, 5, 5, dtype=torch.complex64).to(torch.complex32)
    with pytest.raises(TypeError, match=r"complex64 or complex128 tensors; input is complex32"):
        torchconv.conv2d(x, x.new_empty((3, 2, 3, 3)))


def test_operators_take_real_dtypes_only():
    x = torch.randn(1, 2, 5, 5, dtype=torch.complex64)
    with pytest.raises(TypeError, match="input dtype must be float32, float64, float16 or bfloat16, got ComplexFloat"):
        torch.ops.torchconv.conv2d_gemm(x, torch.randn(3, 2, 3, 3, dtype=torch.complex64), None, [1, 1], [0, 0],
                                        [1, 1], 1)


def test_complex_under_compile_and_torch_func():
    """torch.compile(fullgraph=True) traces the three real calls; torch.func's grad and per-sample
    vmap(grad) differentiate them as PyTorch's complex convolution."""
    from torch.func import functional_call, grad, vmap
    ours = torchconv.Conv2d(4, 6, 3, padding=1, dtype=torch.complex128)
    ref = nn.Conv2d(4, 6, 3, padding=1, dtype=torch.complex128)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, 8, 7, dtype=torch.complex128)
    close = lambda a, b: rel_err(torch.view_as_real(a), torch.view_as_real(b)) <= 1e-12
    assert close(torch.compile(ours, fullgraph=True)(x), ref(x))
    loss = lambda module: lambda params, x: functional_call(module, params, (x,)).abs().square().sum()
    params, ref_params = dict(ours.named_parameters()), dict(ref.named_parameters())
    for transform, batch in ((grad, x), (lambda f: vmap(grad(f), in_dims=(None, 0)), x.unsqueeze(1))):
        got, want = transform(loss(ours))(params, batch), transform(loss(ref))(ref_params, batch)
        assert all(close(got[k], want[k]) for k in want)


def test_explain_reports_a_complex_layer():
    """explain names a complex layer's precision and the algorithm its real parts run, and counts a
    complex multiply-add as four real ones."""
    model = torchconv.convert(nn.Sequential(nn.Conv2d(4, 6, 3, padding=1, dtype=torch.complex64)))
    (row,) = torchconv.explain(model, torch.randn(2, 4, 9, 8, dtype=torch.complex64), reps=1, file=None)
    assert row["precision"] == "complex64"
    parts = torch.randn(2, 4, 9, 8), model[0].weight.real
    assert row["algorithm"] == torchconv.select_algorithm(*parts, (1, 1), (1, 1), 1, padding=(1, 1))
    assert row["tflops"] * row["ms"] * 1e9 == pytest.approx(8 * (2 * 6 * 9 * 8) * (4 * 3 * 3))


def test_complex_on_the_meta_device():
    """A complex model built on the meta device (shapes only) runs as PyTorch's does there."""
    x = torch.empty(2, 4, 9, 8, dtype=torch.complex64, device="meta")
    w = torch.empty(6, 4, 3, 3, dtype=torch.complex64, device="meta")
    out = torchconv.conv2d(x, w, None, 1, 1)
    assert out.device.type == "meta" and out.dtype == torch.complex64 and out.shape == F.conv2d(x, w, None, 1, 1).shape
