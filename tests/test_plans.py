"""The plan registry: what each algorithm can compute is asked of C++ (the one place that knows its
limits), every algorithm's named tile configs are forced through one API (torchconv.set_config or
TORCHCONV_<ALGORITHM>_CONFIG), and torchconv.last_choice() names what ran."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchconv
from conftest import ALGORITHMS, TOLERANCE, WGMMA_CONFIGS, WGMMA_WS_CONFIG, assert_close_rel, rel_err

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
has_cuda_kernels = bool(torchconv.available_algorithms("cuda"))

# The GEMM's tensor-core configs (float16 / bfloat16, TF32): mma.sync on any GPU, wgmma on Hopper.
MMA_SYNC_CONFIGS = ("tc-large", "tc-medium", "tc-small")
CONFIGS = {
    "direct": ("wide", "small", "depthwise", "depthwise-unstaged", "depthwise-plane"),
    "csg": ("wide", "medium", "thin"),
    "gemm": ("large", "medium", "small", "narrow") + MMA_SYNC_CONFIGS + WGMMA_CONFIGS + (WGMMA_WS_CONFIG,),
    "winograd": ("default", "thin", "tall", "tf32", "tf32-tall", "tf32-wgmma", "tf32-wgmma-cluster",
                 "tf32-wgmma-cluster-vbulk", "tf32-wgmma-cluster-uvmulticast"),
}
# Winograd's tensor-core tiles: forced, they take the float32 calls that follow TF32 (tf32-wgmma on
# Hopper only).
WINOGRAD_TF32_CONFIGS = ("tf32", "tf32-tall", "tf32-wgmma", "tf32-wgmma-cluster", "tf32-wgmma-cluster-vbulk",
                         "tf32-wgmma-cluster-uvmulticast")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_configs_are_listed_per_algorithm(algorithm):
    assert torchconv.configs(algorithm) == (CONFIGS[algorithm] if has_cuda_kernels else ())


@needs_cuda
@pytest.mark.parametrize("algorithm, config", [(a, c) for a in ALGORITHMS for c in CONFIGS[a]])
def test_each_config_is_forced_through_one_api(algorithm, config):
    """Forward and both gradients in the forced config, and last_choice() names it for the forward.
    The GEMM's tensor-core configs run float16 channels_last (mma.sync ones on Hopper too, where the
    rule takes wgmma); grad_weight follows the forced config's kernel family."""
    tensor_cores = config in MMA_SYNC_CONFIGS + WGMMA_CONFIGS + (WGMMA_WS_CONFIG,)
    tf32 = algorithm == "winograd" and config in WINOGRAD_TF32_CONFIGS
    if "wgmma" in config and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma configs run on sm_90a")
    torch.backends.cudnn.allow_tf32 = tf32  # conftest restores it
    dtype = torch.float16 if tensor_cores else torch.float32
    # direct's depthwise configs take small groups only: a depthwise layer with multiplier 2; its
    # whole-plane config a filter that covers the plane (13x13 on 7x7).
    groups = 32 if config.startswith("depthwise") else 1
    (h, wd), taps = ((7, 7), 13) if config == "depthwise-plane" else ((20, 18), 3)
    x = torch.randn(2, 32, h, wd, dtype=torch.float64)
    w = torch.randn(64 if groups > 1 else 48, 32 // groups, taps, taps, dtype=torch.float64) / 17
    pad = taps // 2
    ref = F.conv2d(x.requires_grad_(), w.requires_grad_(), None, 1, pad, 1, groups)
    gy = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, (x, w), gy)
    fmt = torch.channels_last if tensor_cores else torch.contiguous_format
    xc, wc = (t.detach().to("cuda", dtype).contiguous(memory_format=fmt).requires_grad_() for t in (x, w))
    torchconv.set_config(algorithm, config)
    try:
        assert torchconv.get_config(algorithm) == config
        out = torchconv.conv2d(xc, wc, None, 1, pad, 1, groups, algorithm=algorithm)
        forward = torchconv.last_choice().split()[0]
        grads = torch.autograd.grad(out, (xc, wc), gy.to("cuda", dtype))
        backward = torchconv.last_choice()
    finally:
        torchconv.set_config(algorithm, "")
    assert forward.startswith("forward:") and f":{config}/" in forward, forward
    assert torchconv.get_config(algorithm) == ""
    if tensor_cores:
        assert f"grad_input:{config}/" in backward and f"grad_weight:{config.split('-')[0]}-" in backward, backward
    tolerance = 1e-2 if tensor_cores or tf32 else TOLERANCE[torch.float32]
    for name, ours, r in zip(("forward", "grad_input", "grad_weight"), (out,) + grads, (ref,) + ref_grads):
        assert ours.shape == r.shape
        assert rel_err(ours, r) < tolerance, f"{algorithm} {config} {name}: {rel_err(ours, r):.2e}"


@needs_cuda
def test_tensor_core_and_float_configs_leave_each_other_to_their_rules():
    """A forced float config of the GEMM does not reach its tensor-core calls, and a forced
    tensor-core config does not reach its IEEE float32 calls; a wgmma config forced on a GPU that
    cannot run it is a ValueError at the call."""
    x = torch.randn(2, 16, 10, 9, device="cuda")
    w = torch.randn(24, 16, 3, 3, device="cuda")
    xh, wh = (t.half().contiguous(memory_format=torch.channels_last) for t in (x, w))
    torchconv.set_config("gemm", "narrow")
    try:
        torchconv.conv2d(xh, wh, padding=1, algorithm="gemm")
        assert re.match(r"forward:(tc|wgmma)-", torchconv.last_choice())
        torchconv.conv2d(x, w, padding=1, algorithm="gemm")
        assert torchconv.last_choice().startswith("forward:narrow/")
        torchconv.set_config("gemm", "tc-small")
        torchconv.conv2d(x, w, padding=1, algorithm="gemm")
        assert not re.match(r"forward:(tc|wgmma)-", torchconv.last_choice())
        torchconv.conv2d(xh, wh, padding=1, algorithm="gemm")
        assert torchconv.last_choice().startswith("forward:tc-small/")
        if torch.cuda.get_device_capability() != (9, 0):
            torchconv.set_config("gemm", "wgmma-wide")
            with pytest.raises(ValueError, match="config 'wgmma-wide' .* runs on sm_90a"):
                torchconv.conv2d(xh, wh, padding=1, algorithm="gemm")
    finally:
        torchconv.set_config("gemm", "")


def test_unknown_config_is_a_value_error():
    if has_cuda_kernels:
        with pytest.raises(ValueError, match="must name a config of 'gemm' \\('large', 'medium', 'small', 'narrow', 'tc-large'"):
            torchconv.set_config("gemm", "huge")
    with pytest.raises(ValueError, match="algorithm must be one of 'direct', 'csg', 'gemm', 'winograd'"):
        torchconv.set_config("fft", "default")
    assert torchconv.get_config("gemm") == ""


@pytest.mark.skipif(not has_cuda_kernels, reason="a build without CUDA kernels has no configs")
def test_configs_from_the_environment():
    """TORCHCONV_<ALGORITHM>_CONFIG forces a config from the start, spelled the same way for every
    algorithm; a name that is not a config raises ValueError naming the variable."""
    code = "import torchconv; print(' '.join(torchconv.get_config(a) for a in torchconv.ALGORITHMS))"
    env = {**os.environ, **{f"TORCHCONV_{a.upper()}_CONFIG": CONFIGS[a][-1] for a in ALGORITHMS}}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [CONFIGS[a][-1] for a in ALGORITHMS]
    bad = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TORCHCONV_CSG_CONFIG": "huge"},
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "ValueError: TORCHCONV_CSG_CONFIG must name a config of 'csg'" in bad.stderr


def test_limits_come_from_the_registry():
    x = torch.randn(1, 4, 8, 8)
    assert "3x3 kernel, stride 1 and dilation 1" in torchconv.unsupported_reason("winograd", x, torch.randn(4, 4, 5, 5))
    assert torchconv.unsupported_reason("winograd", x, torch.randn(4, 4, 3, 3)) is None
    for algorithm in ALGORITHMS:
        assert torchconv.unsupported_reason(algorithm, x, torch.randn(4, 2, 3, 3), 1, 1, 1, 2) in (
            None, torchconv.unsupported_reason(algorithm, x, torch.randn(4, 2, 3, 3), groups=2))
    assert "no cpu kernel" not in str(torchconv.unsupported_reason("direct", x, torch.randn(4, 4, 3, 3)))


def test_unsupported_reason_validates_the_arguments():
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 4, 3, 3)
    with pytest.raises(ValueError, match="stride must be positive"):
        torchconv.unsupported_reason("direct", x, w, stride=0)
    with pytest.raises(ValueError, match="expects 8 input channels with groups=2"):
        torchconv.unsupported_reason("direct", x, w, groups=2)


@pytest.mark.parametrize("kwargs, match", [(dict(stride=0), "stride must be positive"),
                                           (dict(dilation=(1, -1)), "dilation must be positive"),
                                           (dict(groups=0), "groups must be positive")])
def test_auto_with_bad_arguments_is_a_value_error(kwargs, match):
    """algorithm="auto" validates before its rule does any arithmetic (no ZeroDivisionError)."""
    with pytest.raises(ValueError, match=match):
        torchconv.conv2d(torch.randn(1, 4, 8, 8), torch.randn(4, 4, 3, 3), **kwargs)


@needs_cuda
def test_csg_size_limit_is_per_group():
    """A 960-channel depthwise 5x5 layer (MobileNetV3) is far from CSG's indexing limits: the check
    counts the re-laid filter per group, not K x C."""
    x = torch.randn(2, 960, 7, 7, device="cuda")
    w = torch.randn(960, 1, 5, 5, device="cuda")
    assert torchconv.unsupported_reason("csg", x, w, 1, 1, 2, 960) is None
    out = torchconv.conv2d(x, w, None, 1, 2, 1, 960, algorithm="csg")
    assert_close_rel(out, F.conv2d(x.double(), w.double(), None, 1, 2, 1, 960), torch.float32, "depthwise 960")


@needs_cuda
def test_gemm_says_what_is_too_large():
    """A plane of 2^31 output positions is past the GEMM's 32-bit column and plane indices: the
    reason says so, and auto leaves the GEMM out."""
    x = torch.empty(1, 1, 46341, 46341, device="cuda")  # 2^31 + 80^2 elements, never written
    w = torch.empty(1, 1, 3, 3, device="cuda")
    reason = torchconv.unsupported_reason("gemm", x, w, 1, 1, 1, 1)
    assert "32-bit" in reason and "is 2147488281 (2^31 or more)" in reason
    assert "gemm" not in torchconv.candidate_algorithms(x, w, 1, 1, 1, 1)


class MobileNetBlock(nn.Module):
    """Depthwise layers of MobileNetV3-Large's last stages (960 channels, 3x3 and 5x5) between 1x1s."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(160, 960, 1, bias=False)
        self.dw5 = nn.Conv2d(960, 960, 5, padding=2, groups=960, bias=False)
        self.dw3 = nn.Conv2d(960, 960, 3, stride=2, padding=1, groups=960)
        self.project = nn.Conv2d(960, 160, 1)

    def forward(self, x):
        return self.project(torch.relu(self.dw3(torch.relu(self.dw5(torch.relu(self.expand(x)))))))


@needs_cuda
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_benchmark_mode_runs_wide_depthwise_layers(train):
    """Benchmark mode over MobileNet's 960-channel depthwise layers at batch 32: every candidate that
    can do a layer is timed, none takes the forward down, and the answer is nn.Conv2d's."""
    torch.manual_seed(0)
    ref_model = MobileNetBlock().cuda()
    model = torchconv.convert(MobileNetBlock().cuda())
    model.load_state_dict(ref_model.state_dict())
    x = torch.randn(32, 160, 14, 14, device="cuda", requires_grad=train)
    torchconv.set_benchmark(True)
    try:
        torchconv.clear_cache()
        with torch.set_grad_enabled(train):
            out = model(x)
            if train:
                out.square().mean().backward()
        assert len(torchconv.tuning.cache_entries()) == 4
    finally:
        torchconv.set_benchmark(False)
        torchconv.clear_cache()
    with torch.no_grad():
        ref = ref_model.double()(x.detach().double())
    assert_close_rel(out, ref, torch.float32, "output")
