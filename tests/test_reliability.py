"""A drop-in for nn.Conv2d must never take a user's run down where PyTorch would not: CUDA graphs,
non-default streams, long training loops without memory growth, deterministic gradients,
non-finite inputs, tensors of 2^31 elements and more, and inputs on a GPU other than the current one."""
import gc
import re
import threading

import pytest
import torch
import torch.nn.functional as F

import torchconv
from conftest import ALGORITHMS, DEVICES, assert_close_rel, skip_if_no_kernel

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def backward_op(algorithm):
    return getattr(torch.ops.torchconv, f"conv2d_{algorithm}_backward")


@needs_cuda
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cuda_graph_capture_and_replay(algorithm):
    """Forward and backward operators captured in a CUDA graph replay correctly on new data."""
    x = torch.randn(2, 16, 15, 13, device="cuda")
    w = torch.randn(24, 16, 3, 3, device="cuda")
    gy = torch.randn(2, 24, 15, 13, device="cuda")
    conv = (None, [1, 1], [1, 1], [1, 1], 1)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on the capture stream (workspaces, shared-memory opt-ins)
        for _ in range(3):
            torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm)
            backward_op(algorithm)(gy, x, w, [1, 1], [1, 1], [1, 1], 1, [True, True, False])
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm)
        gx, gw, _ = backward_op(algorithm)(gy, x, w, [1, 1], [1, 1], [1, 1], 1, [True, True, False])
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        gy.copy_(torch.randn_like(gy))
        graph.replay()
        xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
        ref = F.conv2d(xd, wd, None, 1, 1)
        ref_gx, ref_gw = torch.autograd.grad(ref, (xd, wd), gy.double())
        assert_close_rel(y, ref, torch.float32, f"{algorithm} graph forward")
        assert_close_rel(gx, ref_gx, torch.float32, f"{algorithm} graph grad_input")
        assert_close_rel(gw, ref_gw, torch.float32, f"{algorithm} graph grad_weight")


@needs_cuda
def test_cuda_graph_of_a_converted_resnet18():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    reference = torchvision.models.resnet18(weights=None).cuda().eval()
    model = torchconv.convert(torchvision.models.resnet18(weights=None).cuda().eval())
    model.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 64, 64, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode():
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(x)
        x.copy_(torch.randn_like(x))
        graph.replay()
        with torch.backends.cudnn.flags(allow_tf32=False):
            ref = reference(x)
    assert_close_rel(out, ref, torch.float32, "resnet18 graph")


@needs_cuda
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_non_default_stream(algorithm):
    """Kernels run on the current stream: work queued behind a long op on a side stream sees its result."""
    x = torch.randn(4, 32, 28, 28, device="cuda")
    w = torch.randn(32, 32, 3, 3, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(10_000_000)  # the side stream is busy when the inputs are written and read
        x2 = x * 2
        y = torchconv.conv2d(x2, w, None, 1, 1, algorithm=algorithm)
    torch.cuda.current_stream().wait_stream(side)
    assert_close_rel(y, F.conv2d(2 * x.double(), w.double(), None, 1, 1), torch.float32, f"{algorithm} side stream")


@needs_cuda
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_no_memory_growth_over_many_steps(algorithm):
    """Training steps leave nothing behind: the GPU memory in use after 1000 steps (past every
    one-time allocation of the process) is the same after 1000 more."""
    x = torch.randn(2, 16, 12, 12, device="cuda", requires_grad=True)
    w = torch.randn(16, 16, 3, 3, device="cuda", requires_grad=True)

    def step():
        torch.autograd.grad(torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm).sum(), (x, w))

    def in_use():
        gc.collect()  # memory that only awaits the collector is not held
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    for _ in range(1000):
        step()
    before = in_use()
    for _ in range(1000):
        step()
    assert in_use() <= before


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_training_gradients(device):
    """Under torch.use_deterministic_algorithms(True), two identical training steps of a converted
    model give bitwise equal gradients."""
    torch.manual_seed(0)
    model = torchconv.convert(torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, stride=2, padding=1),
        torch.nn.ReLU(), torch.nn.Conv2d(32, 16, 1), torch.nn.Conv2d(16, 16, 3, padding=1, groups=16))).to(device)
    x = torch.randn(2, 3, 20, 20, device=device)
    old = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        grads = []
        for _ in range(2):
            model.zero_grad()
            model(x).square().sum().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
    finally:
        torch.use_deterministic_algorithms(old)
    for a, b in zip(*grads):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_non_finite_inputs(algorithm, device):
    """Every output PyTorch makes non-finite is non-finite in ours, and where ours is finite it is
    right. The direct, CSG and GEMM kernels give exactly PyTorch's non-finite outputs; Winograd
    spreads a NaN or Inf over the 4x4 input tile it falls in, so more outputs may be non-finite."""
    x = torch.randn(2, 8, 14, 13, dtype=torch.float64)
    x[0, 3, 5, 6] = float("nan")
    x[1, 0, 9, 2] = float("inf")
    w = torch.randn(8, 8, 3, 3, dtype=torch.float64)
    ref = F.conv2d(x, w, None, 1, 1)
    with skip_if_no_kernel(algorithm, device):
        out = torchconv.conv2d(x.float().to(device), w.float().to(device), None, 1, 1, algorithm=algorithm).cpu()
    bad_ref, bad = ~torch.isfinite(ref), ~torch.isfinite(out)
    assert bad_ref.any()
    assert bad[bad_ref].all(), "an output PyTorch makes non-finite is finite in ours"
    if algorithm != "winograd":
        assert torch.equal(bad, bad_ref)
    good = ~bad
    assert_close_rel(out[good], ref[good], torch.float32, f"{algorithm} finite outputs")


def band_reference(x, w, gy, lo, hi):
    """Output rows [lo, hi) of a 3x3, padding-1 convolution of x, and the gradient of
    sum(output[lo:hi] * gy[lo:hi]) for the input rows max(lo - 1, 0) .. min(hi + 1, H) - 1, in
    float64 from the band of input rows alone."""
    height = x.shape[2]
    xs = x[:, :, max(lo - 1, 0):min(hi + 1, height)].double().requires_grad_()
    out = F.conv2d(F.pad(xs, [1, 1, int(lo == 0), int(hi == height)]), w.double())
    (gx,) = torch.autograd.grad(out, xs, gy[:, :, lo:hi].double())
    return out.detach(), gx


@needs_cuda
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tensors_of_2_31_elements_and_more(algorithm):
    """A 3x3 layer on a 1x64x6000x6000 input (2.3e9 elements in the input, the output, grad_output
    and grad_input), forward and backward: the output and grad_input checked on bands of rows at
    the top, middle and bottom against float64, grad_weight against the sum of per-band cuDNN FP32
    gradients. grad_weight reduces over 3.6e7 pixels in FP32 on both sides, so its bar is 1e-4
    (CSG, which sums each slice sequentially, reads about 2e-5; the others about 1e-6)."""
    # The driver counts the blocks PyTorch's allocator keeps from earlier tests (this test's other
    # parametrizations too) as used: hand them back before asking what is free.
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < 48 * 2**30:
        pytest.skip("needs 48 GiB of free GPU memory")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(1, 64, 6000, 6000, device="cuda", generator=gen)
    w = torch.randn(64, 64, 3, 3, device="cuda", generator=gen) / 24
    assert algorithm in torchconv.candidate_algorithms(x, w, 1, 1, 1, 1)
    y = torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm)
    gy = torch.randn(y.shape, device="cuda", generator=gen)
    for r0 in (0, 2997, 5992):
        ref, _ = band_reference(x, w, gy, r0, r0 + 8)
        assert_close_rel(y[:, :, r0:r0 + 8], ref, torch.float32, f"{algorithm} output rows {r0}-{r0 + 7}")
    del y
    gx, gw, _ = backward_op(algorithm)(gy, x, w, [1, 1], [1, 1], [1, 1], 1, [True, True, False])
    for r0 in (0, 2997, 5992):  # input rows r0 .. r0 + 7 receive from output rows r0 - 1 .. r0 + 8
        lo, hi = max(r0 - 1, 0), min(r0 + 9, 6000)
        _, ref_gx = band_reference(x, w, gy, lo, hi)
        first = r0 - max(lo - 1, 0)
        assert_close_rel(gx[:, :, r0:r0 + 8], ref_gx[:, :, first:first + 8], torch.float32,
                         f"{algorithm} grad_input rows {r0}-{r0 + 7}")
    del gx
    ref_gw = torch.zeros_like(w)
    with torch.backends.cudnn.flags(allow_tf32=False):
        for lo in range(0, 6000, 500):
            hi = min(lo + 500, 6000)
            xs = x[:, :, max(lo - 1, 0):min(hi + 1, 6000)]
            wl = w.detach().requires_grad_()
            out = F.conv2d(F.pad(xs, [1, 1, int(lo == 0), int(hi == 6000)]), wl)
            ref_gw += torch.autograd.grad(out, wl, gy[:, :, lo:hi])[0]
    err = ((gw.double() - ref_gw.double()).norm() / ref_gw.double().norm()).item()
    assert err < 1e-4, f"{algorithm} grad_weight: relative error {err:.2e} against the per-band FP32 sum"


@needs_two_gpus
@pytest.mark.parametrize("groups", [1, 16], ids=["dense", "depthwise"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_inputs_on_another_gpu_than_the_current_one(algorithm, groups):
    """Tensors on cuda:1 while cuda:0 is current: every kernel, workspace and cached transform
    follows the input's device, forward and backward (depthwise: direct's depthwise specialist)."""
    torch.cuda.set_device(0)
    x = torch.randn(2, 16, 12, 11, dtype=torch.float64)
    w = torch.randn(24 if groups == 1 else 16, 16 // groups, 3, 3, dtype=torch.float64)
    ref = F.conv2d(x.requires_grad_(), w.requires_grad_(), None, 1, 1, 1, groups)
    gy = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, (x, w), gy)
    xc, wc = (t.detach().float().to("cuda:1").requires_grad_() for t in (x, w))
    out = torchconv.conv2d(xc, wc, None, 1, 1, 1, groups, algorithm=algorithm)
    assert out.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    grads = torch.autograd.grad(out, (xc, wc), gy.float().to("cuda:1"))
    assert_close_rel(out, ref, torch.float32, f"{algorithm} on cuda:1")
    for g, r in zip(grads, ref_grads):
        assert g.device == torch.device("cuda:1")
        assert_close_rel(g, r, torch.float32, f"{algorithm} grad on cuda:1")


@needs_two_gpus
@pytest.mark.parametrize("group", [1, 4])
def test_nhwc_depthwise_on_another_gpu_than_the_current_one(group):
    """The direct algorithm's NHWC specialist (forward, grad_input's phases of a strided layer, the
    float32 filter, grad_weight's slices and their sum) on cuda:1 while cuda:0 is current, bfloat16."""
    torch.cuda.set_device(0)
    x = torch.randn(2, 32, 15, 14, device="cuda:1").bfloat16().contiguous(memory_format=torch.channels_last)
    w = (torch.randn(32, group, 3, 3, device="cuda:1") / (3 * group ** 0.5)).bfloat16()
    xd, wd = x.detach().requires_grad_(), w.detach().requires_grad_()
    out = torchconv.conv2d(xd, wd, None, 2, 1, 1, 32 // group, algorithm="direct")
    assert out.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    gy = torch.randn_like(out)
    grads = torch.autograd.grad(out, (xd, wd), gy)
    assert "forward:depthwise-nhwc/" in torchconv.last_choice()
    assert "grad_weight:depthwise-nhwc/" in torchconv.last_choice()
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    ref = F.conv2d(x64, w64, None, 2, 1, 1, 32 // group)
    refs = (ref,) + torch.autograd.grad(ref, (x64, w64), gy.double())
    for name, ours, r in zip(("output", "grad_input", "grad_weight"), (out,) + grads, refs):
        assert ours.device == torch.device("cuda:1")
        err = ((ours.double() - r).norm() / r.norm()).item()
        assert err < 2 ** -6, f"{name}: {err:.2e}"


@needs_two_gpus
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_tensor_cores_on_another_gpu_than_the_current_one(dtype):
    """The GEMM's tensor-core kernels (forward, grad_input, grad_weight; an RGB stem's padded
    channels) on cuda:1 while cuda:0 is current, channels_last."""
    torch.cuda.set_device(0)
    for c in (16, 3):
        x = torch.randn(2, c, 12, 11, device="cuda:1").to(dtype).contiguous(memory_format=torch.channels_last)
        w = (torch.randn(24, c, 3, 3, device="cuda:1") / (9 * c) ** 0.5).to(dtype)
        xd, wd = x.detach().requires_grad_(), w.detach().requires_grad_()
        out = torchconv.conv2d(xd, wd, None, 1, 1, algorithm="gemm")
        assert out.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
        assert ":wgmma-" in torchconv.last_choice() or ":tc-" in torchconv.last_choice()
        gy = torch.randn_like(out)
        grads = torch.autograd.grad(out, (xd, wd), gy)
        x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
        ref = F.conv2d(x64, w64, None, 1, 1)
        refs = (ref,) + torch.autograd.grad(ref, (x64, w64), gy.double())
        for name, ours, r in zip(("output", "grad_input", "grad_weight"), (out,) + grads, refs):
            assert ours.device == torch.device("cuda:1")
            err = ((ours.double() - r).norm() / r.norm()).item()
            assert err < (2 ** -9 if dtype == torch.float16 else 2 ** -6), f"{name} C={c}: {err:.2e}"


@needs_two_gpus
@pytest.mark.parametrize("c, k, h, w, r", [(16, 24, 12, 11, 3), (3, 24, 12, 11, 7), (512, 136, 7, 5, 3),
                                            (72, 136, 12, 11, 1)], ids=["dense", "rgb", "split", "nchw-1x1"])
def test_tf32_on_another_gpu_than_the_current_one(c, k, h, w, r):
    """TF32 on cuda:1 while cuda:0 is current, NCHW: the channels_last copy of a 3x3 layer's source
    (a 7x7 RGB stem's with its channels padded), the wgmma kernel's own reads of a 1x1 layer's NCHW
    planes, and, for a grid too small for the GPU, the split reduction's workspace and finishing
    kernel follow the input's device. (Layers above the TF32 bound: see test_precision's tf32_pays.)"""
    torch.cuda.set_device(0)
    torch.backends.cudnn.allow_tf32 = True
    x = torch.randn(2, c, h, w, device="cuda:1")
    wt = torch.randn(k, c, r, r, device="cuda:1") / (r * r * c) ** 0.5
    xd = x.detach().requires_grad_()
    out = torchconv.conv2d(xd, wt, None, 1, r // 2, algorithm="gemm")
    assert out.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    assert re.match(r"forward:(wgmma|tc)-", torchconv.last_choice())
    gy = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, (xd,), gy)
    x64 = x.double().requires_grad_()
    ref = F.conv2d(x64, wt.double(), None, 1, r // 2)
    refs = (ref,) + torch.autograd.grad(ref, (x64,), gy.double())
    for name, ours, r in zip(("output", "grad_input"), (out, gx), refs):
        assert ours.device == torch.device("cuda:1")
        err = ((ours.double() - r).norm() / r.norm()).item()
        assert err < 2 ** -9, f"{name}: {err:.2e}"


@needs_two_gpus
def test_two_threads_drive_two_gpus():
    errors = []

    def work(device):
        try:
            torch.cuda.set_device(device)
            for algorithm in torchconv.ALGORITHMS:
                for _ in range(20):
                    x = torch.randn(4, 32, 20, 20, device=device)
                    w = torch.randn(32, 32, 3, 3, device=device)
                    out = torchconv.conv2d(x, w, None, 1, 1, algorithm=algorithm)
                    ref = F.conv2d(x.double(), w.double(), None, 1, 1)
                    err = ((out.double() - ref).norm() / ref.norm()).item()
                    if not err < 1e-5:
                        errors.append((device, algorithm, err))
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append((device, repr(e)))

    threads = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
