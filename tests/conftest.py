"""Shared test helpers. Every test that touches a kernel is parametrized over devices; CUDA cases
skip when no GPU is present, and cases whose algorithm has no kernel for the device skip with the
dispatcher's message as the reason.

Every test starts from a seed derived from its id (CRC-32), so a failing case draws the same inputs
when it is run again, alone or in the whole suite; the seed is printed with the failure."""
import contextlib
import os
import zlib

import hypothesis
import pytest
import torch

import torchconv

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]
ALGORITHMS = torchconv.ALGORITHMS
# Tile configs are the CUDA kernels' (torchconv.configs): a build without nvcc has CPU kernels only
# and no config to name or force.
needs_cuda_build = pytest.mark.skipif(not torchconv.available_algorithms("cuda"),
                                      reason="a CPU-only build: no CUDA kernels, no tile configs")
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}
# The GEMM's wgmma tile configs (Hopper; float16 / bfloat16 and TF32), as set_config names them.
WGMMA_CONFIGS = ("wgmma-large", "wgmma-medium", "wgmma-small", "wgmma-tiny", "wgmma-wide", "wgmma-tall",
                 "wgmma-wide192")
# The warp-specialized wgmma config (the rule's for short 16-bit reductions; forced, it takes channels_last
# sources, float32 only by tensor copies).
WGMMA_WS_CONFIG = "wgmma-ws"


def case_seed(case_id):
    """A reproducible seed for a test case: the CRC-32 of its id (Python's hash() of a string
    changes from process to process)."""
    return zlib.crc32(case_id.encode())


@pytest.fixture(autouse=True)
def seeded(request):
    """torch's and Python's generators seeded from the test id (printed with a failure)."""
    seed = case_seed(request.node.nodeid)
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    yield seed


def pytest_collection_modifyitems(config, items):
    """TORCHCONV_TEST_SHARD=k/n keeps the collected tests whose id's CRC-32 is k modulo n (0 <= k < n):
    benchmarks/gpu_session.sh runs n such shards at once on one GPU. Dealt one test at a time, the
    shards share the slow files alike, where whole files dealt to shards leave one running long; by
    the id's hash rather than by position, since dealing by position lines a shard up with a
    parameter of n values (every shard of 3 would get one of fp32 / fp16 / bf16)."""
    spec = os.environ.get("TORCHCONV_TEST_SHARD")
    if not spec:
        return
    try:
        k, n = (int(v) for v in spec.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"TORCHCONV_TEST_SHARD={spec!r}: expected k/n with 0 <= k < n") from None
    mine = [zlib.crc32(item.nodeid.encode()) % n == k for item in items]
    config.hook.pytest_deselected(items=[item for item, keep in zip(items, mine) if not keep])
    items[:] = [item for item, keep in zip(items, mine) if keep]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        seeds = [v for k, v in item.user_properties if k == "seed"]
        if seeds:
            report.sections.append(("torchconv", f"seed {seeds[0]} (zlib.crc32 of {item.nodeid!r})"))


@pytest.fixture(autouse=True)
def poison_outputs():
    """Every operator output, and every workspace of the CPU and CUDA kernels (partial sums, column
    chunks, packed, re-laid and transformed operands: new_workspace), starts as NaN, so an element a
    kernel does not write, or reads before it is written, fails the check."""
    torchconv._C.set_poison_outputs(True)
    yield
    torchconv._C.set_poison_outputs(False)


@pytest.fixture(autouse=True)
def ieee_fp32():
    """Float32 tests hold IEEE FP32's bar: PyTorch's cuDNN TF32 switch, which the operators follow
    (csrc/precision.h), is off unless a test turns it on (tests/test_precision.py)."""
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = old


@pytest.fixture
def without_hypothesis_events(request, monkeypatch):
    """A hypothesis test's body run as a fixed case, outside hypothesis: its module's `event` calls do
    nothing, since hypothesis records events only inside one of its tests."""
    monkeypatch.setattr(request.module, "event", lambda *_: None)


def fuzz_hunt(test):
    """A hypothesis test of the fuzz files as it is, or, under TORCHCONV_FUZZ_SEED=S, drawing hypothesis
    seed S's sequence instead of its fixed one (an explicit seed takes precedence over derandomize):
    a hunt past the fixed examples that the same S repeats. Applied after the definition, since
    derandomize's seed is a hash of the test's source, decorators included."""
    hunt_seed = os.environ.get("TORCHCONV_FUZZ_SEED")
    return test if hunt_seed is None else hypothesis.seed(int(hunt_seed))(test)


@contextlib.contextmanager
def skip_if_no_kernel(algorithm, device):
    """Runs the body; if the algorithm has no kernel for the device yet, skips with the dispatcher's
    error (which must say so clearly)."""
    if algorithm not in torchconv.available_algorithms(torch.device(device).type):
        with pytest.raises(NotImplementedError, match=f"conv2d_{algorithm}") as err:
            yield
        pytest.skip(f"no {device} kernel for '{algorithm}' in this build: {str(err.value).splitlines()[0]}")
    else:
        yield


class CudaTensorStandIn:
    """A CUDA tensor as the "auto" rule sees it (shape, dtype, device, memory format), on any machine:
    the rule's tests run where no GPU is."""

    def __init__(self, *shape, dtype=torch.float32, channels_last=False):
        self.shape, self.dtype, self.device = torch.Size(shape), dtype, torch.device("cuda", 0)
        self.is_cuda, self.is_meta, self.requires_grad = True, False, False
        self._channels_last = channels_last

    def dim(self):
        return len(self.shape)

    def is_contiguous(self, memory_format=torch.contiguous_format):
        return (memory_format == torch.channels_last) == self._channels_last


def baseline_build_env():
    """The environment of a child process that runs the CPU kernels' baseline builds (csrc/cpu/isa.h),
    whatever shard of the suite this process is."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHCONV_TEST_SHARD"}
    env["TORCHCONV_CPU_BASELINE"] = "1"
    return env


def rel_err(out, ref):
    """||out - ref|| / ||ref||, computed in float64."""
    out, ref = out.double().cpu(), ref.double().cpu()
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


def assert_close_rel(out, ref, dtype, what=""):
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert not torch.isnan(out).any(), f"{what}: output has NaN (unwritten elements?)"
    err = rel_err(out, ref)
    assert err < TOLERANCE[dtype], f"{what}: relative error {err:.3e} >= {TOLERANCE[dtype]:.0e}"


@contextlib.contextmanager
def _using(get, set_, algorithm, value):
    """Runs the body with set_(algorithm, value), restoring get(algorithm)'s value after."""
    old = get(algorithm)
    set_(algorithm, value)
    try:
        yield value
    finally:
        set_(algorithm, old)


def using_variant(algorithm, variant):
    """Runs the body with `algorithm`'s variant set, restoring the previous one after."""
    return _using(torchconv.get_variant, torchconv.set_variant, algorithm, variant)


def using_config(algorithm, name):
    """Runs the body with `algorithm`'s config forced to `name`, restoring the previous one after."""
    return _using(torchconv.get_config, torchconv.set_config, algorithm, name)


def check_forward_backward(algorithm, shape, device, dtype, what):
    """One convolution on `device` in `dtype` against F.conv2d in float64: the output and the
    gradients of input, weight and bias (for a random grad_output), each by relative error.
    shape = (N, C, K, H, W, R, S, stride, padding, dilation, groups, bias)."""
    n, c, k, h, w, r, s, stride, padding, dilation, groups, bias = shape
    x = torch.randn(n, c, h, w, dtype=torch.float64)
    wt = torch.randn(k, c // groups, r, s, dtype=torch.float64)
    b = torch.randn(k, dtype=torch.float64) if bias else None
    leaves = [t.requires_grad_() for t in (x, wt, b) if t is not None]
    ref = torch.nn.functional.conv2d(x, wt, b, stride, padding, dilation, groups)
    gy = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, leaves, gy)
    ours = [t.detach().to(device, dtype).requires_grad_() for t in leaves]
    out = torchconv.conv2d(ours[0], ours[1], ours[2] if bias else None, stride, padding, dilation, groups,
                           algorithm=algorithm)
    assert_close_rel(out, ref, dtype, f"{what} forward")
    grads = torch.autograd.grad(out, ours, gy.to(device, dtype))
    for name, g, ref_g in zip(("grad_input", "grad_weight", "grad_bias"), grads, ref_grads):
        assert_close_rel(g, ref_g, dtype, f"{what} {name}")


def assert_backward_repeatable(algorithm, stride):
    """Two backward passes of the same CUDA convolution give bitwise equal gradients."""
    x = torch.randn(4, 32, 20, 18, device="cuda", requires_grad=True)
    w = torch.randn(40, 32, 3, 3, device="cuda", requires_grad=True)
    out = torchconv.conv2d(x, w, None, stride, 1, algorithm=algorithm)
    gy = torch.randn_like(out)
    first = torch.autograd.grad(out, (x, w), gy)
    second = torch.autograd.grad(torchconv.conv2d(x, w, None, stride, 1, algorithm=algorithm), (x, w), gy)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def cuda_kernel_launches(fn):
    """The CUDA kernels `fn()` launches, a name a launch in order, and its result. Under
    compute-sanitizer (benchmarks/gpu_session.sh sets TORCHCONV_UNDER_SANITIZER) the profiler cannot
    attach CUPTI, which the sanitizer holds, and sees no kernel: such a test is skipped there and runs
    in the plain suite."""
    if os.environ.get("TORCHCONV_UNDER_SANITIZER"):
        pytest.skip("kernel names need CUPTI, which compute-sanitizer holds")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA], out


def cuda_kernel_names(fn):
    """The names of the CUDA kernels `fn()` launches, and its result."""
    launches, out = cuda_kernel_launches(fn)
    return set(launches), out
