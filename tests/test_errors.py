"""Bad input raises a clear Python exception that names the argument; never a crash."""
import pytest
import torch

import torchconv
from conftest import ALGORITHMS

X = torch.randn(2, 4, 8, 8)
W = torch.randn(6, 4, 3, 3)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(input=torch.randn(4, 8)), ValueError, "input must be 3-D .* or 4-D"),
        (dict(input=torch.randn(1, 2, 4, 8, 8)), ValueError, "input must be"),
        (dict(weight=torch.randn(6, 4, 3)), ValueError, "weight must be 4-D"),
        (dict(weight=torch.randn(6, 4, 3, 3, dtype=torch.float64)), TypeError, "weight dtype"),
        (dict(input=X.int(), weight=W.int()), TypeError, "input dtype must be float32, float64, float16 or bfloat16"),
        (dict(bias=torch.randn(6, dtype=torch.float64)), TypeError, "bias dtype"),
        (dict(bias=torch.randn(5)), ValueError, "bias must be 1-D"),
        (dict(groups=3), ValueError, "divisible by groups"),
        (dict(weight=torch.randn(6, 3, 3, 3)), ValueError, "input channels"),
        (dict(input=torch.randn(1, 4, 2, 2)), ValueError, "larger than the padded input"),
        (dict(weight=torch.randn(0, 4, 3, 3)), ValueError, "weight must have non-zero size"),
        (dict(input=torch.randn(2, 0, 8, 8), weight=torch.randn(6, 0, 3, 3)), ValueError,
         "input must have at least one channel"),
        (dict(input=torch.randn(0, 0, 8, 8), weight=torch.randn(6, 0, 3, 3)), ValueError,
         "input must have at least one channel"),
        (dict(input=torch.randn(2, 4, 0, 8), weight=torch.randn(6, 4, 1, 1), padding=1), ValueError,
         r"input must have a non-empty plane \(H, W > 0\) unless the batch is empty"),
        (dict(input=torch.randn(1, 4, 5, 0), weight=torch.randn(6, 4, 1, 1), padding=1), ValueError,
         "input must have a non-empty plane"),
        (dict(stride=0), ValueError, "stride must be positive"),
        (dict(dilation=(1, 0)), ValueError, "dilation must be positive"),
        (dict(padding=-1), ValueError, "padding must be non-negative"),
        (dict(padding="full"), ValueError, "padding must be"),
        (dict(stride=2, padding="same"), ValueError, "'same' is not supported for strided"),
        (dict(groups=0), ValueError, "groups must be positive"),
        (dict(stride=1.5), TypeError, "stride must be an int or a pair of ints, got 1.5"),
        (dict(stride=True), TypeError, "stride must be an int or a pair of ints, got True"),
        (dict(padding=(1, 0.5)), TypeError, "padding must be an int or a pair of ints, got 0.5"),
        (dict(dilation="2"), TypeError, "dilation must be an int or a pair of ints, got '2'"),
        (dict(groups=2.0), TypeError, "groups must be an int, got 2.0"),
        (dict(groups="1"), TypeError, "groups must be an int, got '1'"),
        (dict(input=[[1.0]]), TypeError, "input must be a Tensor, got list"),
        (dict(weight=None), TypeError, "weight must be a Tensor, got NoneType"),
        (dict(bias=[0.0] * 6), TypeError, "bias must be a Tensor, got list"),
    ],
)
def test_bad_arguments(algorithm, kwargs, exc, match):
    args = dict(input=X, weight=W, bias=None, stride=1, padding=0, dilation=1, groups=1)
    args.update(kwargs)
    if algorithm == "winograd" and match in ("stride must be positive", "dilation must be positive"):
        pytest.skip("winograd rejects non-unit stride/dilation before the value check")
    with pytest.raises(exc, match=match):
        torchconv.conv2d(**args, algorithm=algorithm)


def nested(layout):
    return torch.nested.nested_tensor([torch.randn(4, 8, 8), torch.randn(4, 9, 8)], layout=layout)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("case", ["nested-strided", "nested-jagged", "sparse-input", "sparse-weight", "sparse-bias"])
def test_tensors_that_are_not_dense(case):
    """Nested and sparse tensors: a TypeError naming the argument, from torchconv.conv2d and from the
    module (whose fast path keys its choice on the input's shape, which a nested tensor lacks or
    holds as a symbol)."""
    args = dict(input=X, weight=W, bias=None)
    name, layout = {"nested-strided": ("input", torch.strided), "nested-jagged": ("input", torch.jagged)}.get(
        case, (case.split("-")[1], None))
    if case.startswith("nested"):
        args["input"], kind = nested(layout), "a nested"
    else:
        args[name], kind = (args[name] if name != "bias" else torch.randn(6)).to_sparse(), "a sparse_coo"
    match = f"{name} must be a dense \\(strided\\) tensor, got {kind} tensor"
    with pytest.raises(TypeError, match=match):
        torchconv.conv2d(**args)
    if name == "input":
        with pytest.raises(TypeError, match=match):
            torchconv.Conv2d(4, 6, 3)(args["input"])


def test_integer_arguments_take_what_pytorch_takes():
    """Anything with __index__ (numpy and 0-d tensor integers) counts as an int, as in F.conv2d."""
    np = pytest.importorskip("numpy")
    ref = torch.nn.functional.conv2d(X, W, None, 2, 1, 1, 1)
    for stride, padding, groups in [(np.int64(2), [np.int32(1)], np.int64(1)), (torch.tensor(2), (1, 1), 1)]:
        assert torch.allclose(torchconv.conv2d(X, W, None, stride, padding, 1, groups, algorithm="direct"), ref,
                              atol=1e-5)


def test_unknown_algorithm():
    with pytest.raises(ValueError, match="unknown algorithm 'fft'"):
        torchconv.conv2d(X, W, algorithm="fft")


@pytest.mark.parametrize(
    "weight, kwargs",
    [(torch.randn(6, 4, 5, 5), {}), (W, dict(stride=2)), (W, dict(dilation=2)), (torch.randn(6, 4, 3, 1), {})],
)
def test_winograd_rejects_what_it_cannot_do(weight, kwargs):
    with pytest.raises(ValueError, match="algorithm 'winograd' cannot compute .* 3x3 kernel, stride 1 and dilation 1"):
        torchconv.conv2d(X, weight, **kwargs, algorithm="winograd")
    # The operator itself (bypassing the Python front end) refuses too.
    with pytest.raises(ValueError, match="Winograd F\\(2x2,3x3\\) needs a 3x3 kernel"):
        torch.ops.torchconv.conv2d_winograd(X, weight, None, [kwargs.get("stride", 1)] * 2, [0, 0],
                                            [kwargs.get("dilation", 1)] * 2, 1)


def test_auto_never_picks_an_algorithm_that_cannot_do_the_shape():
    for weight, stride, dilation in [(torch.randn(8, 8, 5, 5), (1, 1), (1, 1)), (torch.randn(8, 8, 3, 3), (2, 2), (1, 1)),
                                     (torch.randn(8, 8, 3, 3), (1, 1), (2, 2))]:
        algo = torchconv.select_algorithm(torch.empty(1, 8, 9, 9), weight, stride, dilation, 1)
        assert torchconv.unsupported_reason(algo, torch.empty(1, 8, 9, 9), weight, stride, dilation) is None


def test_operator_errors_name_the_argument():
    """The C++ checks stand on their own for callers of torch.ops.torchconv.* directly."""
    with pytest.raises(ValueError, match="grad_output must have the output's shape"):
        torch.ops.torchconv.conv2d_direct_backward(torch.randn(2, 6, 5, 5), X, W, [1, 1], [0, 0], [1, 1], 1,
                                                   [True, True, True])
    with pytest.raises(ValueError, match="stride must have 2 elements"):
        torch.ops.torchconv.conv2d_gemm(X, W, None, [1, 1, 1], [0, 0], [1, 1], 1)


def test_workspace_limit_must_be_positive():
    with pytest.raises(ValueError, match="bytes must be"):
        torchconv.set_workspace_limit(0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for a device mismatch")
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_device_mismatch(algorithm):
    if algorithm not in torchconv.available_algorithms("cuda"):
        pytest.skip(f"no CUDA kernel for '{algorithm}' yet")
    with pytest.raises(ValueError, match="weight is on cpu but input is on cuda"):
        torchconv.conv2d(X.cuda(), W, algorithm=algorithm)
    with pytest.raises(ValueError, match="bias is on cpu"):
        torchconv.conv2d(X.cuda(), W.cuda(), torch.randn(6), algorithm=algorithm)
