"""algorithm="auto": the rule, benchmark mode (measured choice per shape, cached, saved to and loaded
from a JSON file keyed by GPU and torchconv version), deterministic mode, tune() and explain()."""
import json
import re

import pytest
import torch
import torch.nn as nn

import torchconv
from conftest import DEVICES, CudaTensorStandIn, assert_close_rel, rel_err, using_variant
from test_parity import GRID, case_id
from test_precision import allowed_error
from torchconv import tuning

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture(autouse=True)
def fresh_cache():
    """Each test starts with benchmark mode off and an empty cache, and leaves them so."""
    torchconv.set_benchmark(False)
    torchconv.clear_cache()
    yield
    torchconv.set_benchmark(False)
    torchconv.clear_cache()


def sample(device, c=8, k=12, r=3):
    x = torch.randn(2, c, 11, 9, device=device)
    w = torch.randn(k, c, r, r, device=device)
    return x, w


def tensors_for(case, device):
    x = torch.randn(case["N"], case["C"], case["H"], case["W"], device=device)
    w = torch.randn(case["K"], case["C"] // case["groups"], case["R"], case["S"], device=device)
    return x, w


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", GRID, ids=case_id)
def test_auto_rule_only_picks_algorithms_that_can_do_the_shape(case, device):
    """Property over the parity grid: the rule's choice has a kernel for the device and no reason
    to refuse the shape, in normal and in deterministic mode (where CSG is refused on CUDA)."""
    x, w = tensors_for(case, device)
    for deterministic in (False, True):
        old = torch.are_deterministic_algorithms_enabled()
        try:
            torch.use_deterministic_algorithms(deterministic)
            algo = torchconv.select_algorithm(x, w, case["stride"], case["dilation"], case["groups"],
                                              padding=case["padding"])
            assert algo in torchconv.available_algorithms(x.device.type)
            assert torchconv.unsupported_reason(algo, x, w, case["stride"], case["dilation"], case["padding"],
                                                case["groups"]) is None
        finally:
            torch.use_deterministic_algorithms(old)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", GRID[:12], ids=case_id)
def test_benchmark_mode_only_picks_algorithms_that_can_do_the_shape(case, device):
    """Benchmark mode times only the algorithms that can do the shape, and its answer is right."""
    x, w = tensors_for(case, device)
    torchconv.set_benchmark(True)
    out = torchconv.conv2d(x, w, None, case["stride"], case["padding"], case["dilation"], case["groups"])
    (entry,) = tuning.cache_entries().values()
    assert entry["algorithm"] in torchconv.available_algorithms(x.device.type)
    assert set(entry["ms"]) <= set(torchconv.available_algorithms(x.device.type))
    assert not entry["ms"] or entry["algorithm"] == min(entry["ms"], key=entry["ms"].get)
    ref = torch.nn.functional.conv2d(x.double(), w.double(), None, case["stride"], case["padding"], case["dilation"],
                                     case["groups"])
    assert_close_rel(out, ref, torch.float32, "benchmark mode")


@pytest.mark.parametrize("device", DEVICES)
def test_benchmark_mode_measures_each_shape_once(device, monkeypatch):
    x, w = sample(device)
    torchconv.set_benchmark(True)
    torchconv.conv2d(x, w, None, 1, 1)
    assert len(tuning.cache_entries()) == 1
    monkeypatch.setattr(tuning, "measure", lambda *a, **k: pytest.fail("measured a cached shape again"))
    torchconv.conv2d(x, w, None, 1, 1)
    torchconv.conv2d(torch.randn_like(x), w, None, 1, 1)  # same shape, new data: still cached


@pytest.mark.parametrize("device", DEVICES)
def test_benchmark_mode_keys_on_the_winograd_variant(device, monkeypatch):
    """A measured choice holds for the Winograd variant it was timed under (the variant sets
    Winograd's time, and whether auto may take it): switching the variant measures a 3x3 layer
    again, switching back finds its first entry, and a 1x1 layer (no Winograd candidate) keeps one
    entry whatever the variant."""
    x, w = sample(device)
    x1, w1 = sample(device, r=1)
    torchconv.set_benchmark(True)
    for variant in ("fused", "f4x4"):
        with using_variant("winograd", variant):
            torchconv.conv2d(x, w, None, 1, 1)
            torchconv.conv2d(x1, w1)
    assert sorted(str(key[-1]) for key in tuning.cache_entries()) == ["None", "f4x4", "fused"]
    monkeypatch.setattr(tuning, "measure", lambda *a, **k: pytest.fail("measured a cached shape again"))
    for variant in ("fused", "f4x4"):
        with using_variant("winograd", variant):
            torchconv.conv2d(x, w, None, 1, 1)
            torchconv.conv2d(x1, w1)
    assert len(tuning.cache_entries()) == 3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("train", [False, True])
def test_benchmark_mode_leaves_the_random_stream_alone(device, train):
    """Measuring a new shape draws its inputs from a generator of its own: the user's dropout masks
    and data order are those of a run without benchmark mode (a model in train mode compared with
    its nn.Conv2d twin under one seed gets the same masks)."""
    x, w = sample(device)
    x.requires_grad_(train)
    torchconv.set_benchmark(True)

    def state():
        return torch.cuda.get_rng_state(x.device) if x.is_cuda else torch.get_rng_state()

    before = state()
    torchconv.conv2d(x, w, None, 1, 1)
    assert len(tuning.cache_entries()) == 1
    assert torch.equal(state(), before)


@pytest.mark.parametrize("device", DEVICES)
def test_cache_round_trips_through_a_file(device, tmp_path, monkeypatch):
    x, w = sample(device)
    torchconv.set_benchmark(True)
    torchconv.conv2d(x, w, None, 1, 1)
    before = tuning.cache_entries()
    path = tmp_path / "torchconv-cache.json"
    assert torchconv.save_cache(path) == 1
    torchconv.clear_cache()
    assert tuning.cache_entries() == {}
    assert torchconv.load_cache(path) == (1, 0)
    assert tuning.cache_entries() == before
    # A second process would now skip the measurement:
    monkeypatch.setattr(tuning, "measure", lambda *a, **k: pytest.fail("a loaded shape was measured"))
    torchconv.conv2d(x, w, None, 1, 1)


def test_csg_plans_travel_with_the_cache_file(tmp_path):
    """CSG's tuned config and split per shape are saved with the algorithm choices and restored for
    this GPU and version only, so a second process skips that timing too."""
    here = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    mine = f"forward/f32/{here},1,64,32,14,14,3,3"
    foreign = "forward/f32/Some Other GPU,1,64,32,14,14,3,3"
    torchconv._C.record_tuned_choice(mine, "medium/splits=8")
    torchconv._C.record_tuned_choice(foreign, "wide/splits=2")
    path = tmp_path / "cache.json"
    torchconv.save_cache(path)
    torchconv.clear_cache()
    assert torchconv._C.tuned_choices() == {}
    assert torchconv.load_cache(path) == (0, 1)
    assert torchconv._C.tuned_choices() == {mine: "medium/splits=8"}


def test_stale_or_foreign_entries_are_ignored(tmp_path):
    x, w = sample("cpu")
    torchconv.set_benchmark(True)
    torchconv.conv2d(x, w, None, 1, 1)
    path = tmp_path / "cache.json"
    torchconv.save_cache(path)
    data = json.loads(path.read_text())
    (entry,) = data["entries"]
    foreign = json.loads(json.dumps(entry))
    foreign["key"]["gpu"] = "Some Other GPU"
    stale = json.loads(json.dumps(entry))
    stale["torchconv"] = "0.0.0-old"
    unknown = json.loads(json.dumps(entry))
    unknown["algorithm"] = "fft"
    data["entries"] = [foreign, stale, unknown, entry]
    path.write_text(json.dumps(data))
    torchconv.clear_cache()
    assert torchconv.load_cache(path) == (1, 3)
    path.write_text(json.dumps({"format": 99, "entries": []}))
    with pytest.raises(ValueError, match="format"):
        torchconv.load_cache(path)


@needs_cuda
def test_deterministic_mode_excludes_csg():
    """CSG's atomics make it nondeterministic on CUDA: neither the rule nor benchmark mode picks it
    under torch.use_deterministic_algorithms(True), even where it won outside that mode."""
    x = torch.randn(1, 256, 14, 14, device="cuda")  # a batch-1 layer the rule gives to CSG
    w = torch.randn(256, 256, 3, 3, device="cuda")
    assert torchconv.select_algorithm(x, w, (1, 1), (1, 1), 1) == "csg"
    torchconv.set_benchmark(True)
    old = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        assert "csg" not in torchconv.candidate_algorithms(x, w, (1, 1), (1, 1))
        assert torchconv.select_algorithm(x, w, (1, 1), (1, 1), 1) != "csg"
        out = torchconv.conv2d(x, w, None, 1, 1)
        for key, entry in tuning.cache_entries().items():
            assert entry["algorithm"] != "csg" and "csg" not in entry["ms"]
        assert_close_rel(out, torch.nn.functional.conv2d(x.double(), w.double(), None, 1, 1), torch.float32, "det")
    finally:
        torch.use_deterministic_algorithms(old)


def test_deterministic_mode_keeps_csg_on_cpu():
    """The CPU CSG kernel sums its splits in a fixed order, so it stays a candidate there."""
    x, w = sample("cpu")
    old = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        assert "csg" in torchconv.candidate_algorithms(x, w, (1, 1), (1, 1))
    finally:
        torch.use_deterministic_algorithms(old)


@needs_cuda
def test_csg_refuses_filters_too_large_for_shared_memory():
    """A 41x41 filter does not fit CSG's shared-memory tile: asked for explicitly, a ValueError; auto
    and benchmark mode never consider it."""
    x = torch.randn(1, 32, 48, 48, device="cuda")
    w = torch.randn(32, 32, 41, 41, device="cuda")
    with pytest.raises(ValueError, match="shared memory"):
        torchconv.conv2d(x, w, None, 1, 20, algorithm="csg")
    assert "csg" not in torchconv.candidate_algorithms(x, w, (1, 1), (1, 1))
    assert torchconv.select_algorithm(x, w, (1, 1), (1, 1), 1) != "csg"


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.same = nn.Conv2d(32, 32, 3, padding="same")
        self.point = nn.Conv2d(32, 8, 1)

    def forward(self, x):
        return self.point(torch.relu(self.same(torch.relu(self.down(torch.relu(self.stem(x)))))))


@pytest.mark.parametrize("device", DEVICES)
def test_tune_measures_every_layer_with_a_progress_bar(device, capsys):
    model = torchconv.convert(TinyNet()).to(device)
    x = torch.randn(2, 3, 17, 15, device=device)
    assert torchconv.tune(model, x) == 4
    assert "4/4 convolutions" in capsys.readouterr().err
    assert torchconv.get_benchmark()
    assert torchconv.tune(model, x, train=True) == 4  # training shapes are timed forward + backward
    assert sum(1 for key in tuning.cache_entries() if key[9]) == 4  # train


def reference_conv(module, x):
    """The reference explain compares with, passed in by the caller: nn.Conv2d's own forward."""
    return nn.Conv2d._conv_forward(module, x, module.weight, module.bias)


@pytest.mark.parametrize("device", DEVICES)
def test_explain_reports_every_layer(device, capsys):
    model = torchconv.convert(TinyNet()).to(device)
    x = torch.randn(2, 3, 17, 15, device=device)
    rows = torchconv.explain(model, x, reference=reference_conv, reference_name="ref", reps=2)
    assert [r["layer"] for r in rows] == ["stem", "down", "same", "point"]
    for r in rows:
        assert r["algorithm"] in torchconv.available_algorithms(x.device.type)
        assert r["ms"] > 0 and r["reference_ms"] > 0 and r["tflops"] > 0
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]  # median of the per-round ratios
    assert rows[1]["stride"] == (2, 2) and rows[2]["padding"] == (1, 1)
    assert "4 convolutions" in capsys.readouterr().out


@needs_cuda
def test_module_choice_follows_deterministic_mode():
    """torchconv.Conv2d remembers its "auto" choice per input shape, and the memory includes
    deterministic mode: a batch-1 layer on CSG moves off it when determinism is required."""
    conv = torchconv.Conv2d(256, 256, 3, padding=1).cuda()
    x = torch.randn(1, 256, 14, 14, device="cuda")
    with torch.no_grad():
        conv(x)
        assert conv.__dict__["_auto_memo"][1] == "csg"
        old = torch.are_deterministic_algorithms_enabled()
        try:
            torch.use_deterministic_algorithms(True)
            out = conv(x)
            assert conv.__dict__["_auto_memo"][1] != "csg"
        finally:
            torch.use_deterministic_algorithms(old)
    ref = torch.nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double(), 1, 1)
    assert_close_rel(out, ref, torch.float32, "deterministic")


def test_explain_without_a_reference_times_only_torchconv(capsys):
    model = torchconv.convert(TinyNet())
    rows = torchconv.explain(model, torch.randn(1, 3, 9, 9), reps=1)
    assert len(rows) == 4
    assert all(r["reference_ms"] is None and r["ratio"] is None and r["ms"] > 0 for r in rows)
    out = capsys.readouterr().out
    assert "4 convolutions" in out and "x ref" not in out


@pytest.mark.parametrize("device", DEVICES)
def test_benchmark_mode_skips_a_candidate_that_fails(device, monkeypatch):
    """A candidate that raises while it is timed (here: a simulated out-of-memory) is skipped,
    recorded with its reason in the cache entry and reported once as a warning; the call gets the
    fastest candidate that worked, and the answer is right."""
    import warnings

    def broken(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setitem(torchconv.ops.FORWARD, "gemm", broken)
    x, w = sample(device)
    torchconv.set_benchmark(True)
    with pytest.warns(RuntimeWarning, match="skipped gemm .*simulated"):
        out = torchconv.conv2d(x, w, None, 1, 1)
    (entry,) = tuning.cache_entries().values()
    assert entry["algorithm"] != "gemm" and "gemm" not in entry["ms"]
    assert "OutOfMemoryError: CUDA out of memory (simulated)" in entry["failed"]["gemm"]
    assert_close_rel(out, torch.nn.functional.conv2d(x.double(), w.double(), None, 1, 1), torch.float32, "skip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cached choice is reused without a second warning
        torchconv.conv2d(x, w, None, 1, 1)


def test_benchmark_mode_raises_when_every_candidate_fails(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated")

    for algo in torchconv.ALGORITHMS:
        monkeypatch.setitem(torchconv.ops.FORWARD, algo, broken)
    torchconv.set_benchmark(True)
    with pytest.raises(RuntimeError, match="every candidate failed"):
        torchconv.conv2d(*sample("cpu"), None, 1, 1)


@needs_cuda
@pytest.mark.parametrize("shape, stride, csg", [
    ((1, 256, 14, 14, 256), 1, True),  # batch 1, 256 channels: CSG's split fills the GPU
    ((1, 128, 28, 28, 256), 2, True),  # strided, 128 channels
    ((1, 64, 56, 56, 64), 1, False),  # 64 channels: Winograd
    ((1, 128, 28, 28, 128), 1, False),  # 128 channels at stride 1: Winograd
    ((32, 256, 14, 14, 256), 1, False),  # batch 32: too large a layer for the split to pay
])
def test_rule_sends_small_wide_layers_to_csg(shape, stride, csg):
    n, c, h, w_, k = shape
    x = torch.randn(n, c, h, w_, device="cuda")
    w = torch.randn(k, c, 3, 3, device="cuda")
    assert (torchconv.select_algorithm(x, w, stride, 1, 1, padding=1) == "csg") == csg


# (N, C, H, W, K, filter size), stride, dtype, TF32 switch, the rule's choice (NCHW, channels_last)
# or one for both.
TENSOR_CORE_RULE_CASES = [
    # TF32 3x3 stride 1: Winograd's TF32 tiles in NCHW; in channels_last the GEMM below 512 filters
    ((32, 64, 56, 56, 64, 3), 1, torch.float32, True, ("winograd", "gemm")),
    ((8, 32, 34, 30, 48, 3), 1, torch.float32, True, ("winograd", "gemm")),  # C and K not multiples of 64, H != W
    ((32, 256, 14, 14, 256, 3), 1, torch.float32, True, ("winograd", "gemm")),
    ((32, 256, 34, 34, 512, 3), 1, torch.float32, True, "winograd"),  # 512 filters, 144 positions a channel
    ((32, 512, 17, 17, 1024, 3), 1, torch.float32, True, "winograd"),  # 1024 filters, 18 positions a channel
    ((2, 200, 23, 37, 520, 3), 1, torch.float32, True, "winograd"),  # 520 filters, 8.5 positions a channel
    ((2, 220, 23, 37, 520, 3), 1, torch.float32, True, ("winograd", "gemm")),  # 7.7 positions a channel
    ((32, 64, 28, 28, 511, 3), 1, torch.float32, True, ("winograd", "gemm")),  # 511 filters
    ((32, 512, 7, 7, 512, 3), 1, torch.float32, True, ("winograd", "gemm")),  # 3 positions a channel
    ((1, 256, 34, 34, 512, 3), 1, torch.float32, True, ("winograd", "gemm")),  # batch 1, 1156 positions
    ((1, 512, 7, 7, 512, 3), 1, torch.float32, True, "gemm"),  # 49 positions, 512 channels: the GEMM splits them
    ((1, 512, 17, 17, 1024, 3), 1, torch.float32, True, "gemm"),  # 289 positions, 512 channels
    ((32, 64, 56, 56, 128, 3), 2, torch.float32, True, "gemm"),  # strided
    ((32, 64, 56, 56, 64, 1), 1, torch.float32, True, "gemm"),  # 1x1
    ((32, 4, 56, 56, 64, 3), 1, torch.float32, True, "winograd"),  # 4 channels: Winograd's shallow kernel
    ((32, 3, 68, 68, 32, 3), 1, torch.float32, True, "winograd"),  # an RGB stem, at every precision
    ((32, 3, 68, 68, 32, 3), 1, torch.float32, False, "winograd"),
    ((32, 3, 68, 68, 32, 3), 1, torch.bfloat16, True, "winograd"),
    ((2, 3, 37, 29, 64, 3), 1, torch.float16, True, "winograd"),
    ((32, 5, 56, 56, 64, 3), 1, torch.float32, True, "gemm"),  # 5 channels: neither Winograd rule's
    ((32, 5, 56, 56, 64, 3), 1, torch.bfloat16, True, "gemm"),
    ((32, 3, 68, 68, 32, 3), 2, torch.bfloat16, True, "gemm"),  # a strided stem
    ((32, 64, 56, 56, 64, 3), 1, torch.bfloat16, True, "gemm"),  # 16 bits: the GEMM
    ((32, 64, 56, 56, 64, 3), 1, torch.float16, False, "gemm"),
    ((32, 64, 56, 56, 64, 3), 1, torch.float32, False, "winograd"),  # IEEE FP32: rule 2
]


def _rule_case_choice(expected, channels_last):
    return expected[channels_last] if isinstance(expected, tuple) else expected


@pytest.mark.parametrize("case", TENSOR_CORE_RULE_CASES, ids=lambda c: f"{c[0]}-s{c[1]}-{c[2]}-tf32{c[3]}")
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_rule_at_the_tensor_core_precisions_on_stand_ins(case, channels_last, monkeypatch):
    """The rule of the test below on stand-ins of the CUDA tensors (shape, dtype, memory format),
    every algorithm a candidate: its table runs where no GPU is."""
    (n, c, h, w_, k, r), stride, dtype, tf32, expected = case
    monkeypatch.setattr(torchconv.selection, "candidate_algorithms", lambda *a, **kw: list(torchconv.ALGORITHMS))
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    x = CudaTensorStandIn(n, c, h, w_, dtype=dtype, channels_last=channels_last)
    w = torch.empty(k, c, r, r, dtype=dtype)
    assert torchconv.select_algorithm(x, w, stride, 1, 1, padding=r // 2) == _rule_case_choice(expected, channels_last)


@needs_cuda
@pytest.mark.parametrize("case", TENSOR_CORE_RULE_CASES, ids=lambda c: f"{c[0]}-s{c[1]}-{c[2]}-tf32{c[3]}")
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_rule_at_the_tensor_core_precisions(case, channels_last):
    """At TF32 the rule gives Winograd's layers (3x3, stride 1, at least 8 channels and filters per
    group) to Winograd, whose TF32 tiles outran the GEMM's there: in NCHW those with at least as many
    output positions as channels per group, in channels_last (where the GEMM reads float32 as it is)
    those of at least 512 filters and 8 positions a channel per group; at every precision it gives
    RGB-stem-like layers (3x3, stride 1, at most 4 channels and at least 8 filters per group) to
    Winograd's shallow kernels; every other TF32 layer and every other 16-bit one to the GEMM."""
    (n, c, h, w_, k, r), stride, dtype, tf32, expected = case
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(n, c, h, w_, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    w = torch.randn(k, c, r, r, device="cuda", dtype=dtype)
    torch.backends.cudnn.allow_tf32 = tf32
    assert torchconv.select_algorithm(x, w, stride, 1, 1, padding=r // 2) == _rule_case_choice(expected, channels_last)


@needs_cuda
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_module_at_tf32_trains_on_winograds_tensor_cores(channels_last):
    """torchconv.Conv2d with PyTorch's TF32 switch on (its default) runs a 3x3 layer's forward and
    backward on Winograd's TF32 tiles (in channels_last a layer of at least 512 filters, which the rule
    gives Winograd there), within 2x of cuDNN's TF32 error on the output and both gradients (or of
    TF32's unit roundoff, where cuDNN's algorithm for a pass is IEEE FP32)."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    k = 520 if channels_last else 72
    conv = torchconv.Conv2d(40, k, 3, padding=1, device="cuda").to(memory_format=fmt)
    x = torch.randn(3, 40, 23, 30, device="cuda").contiguous(memory_format=fmt).requires_grad_()
    gy = torch.randn(3, k, 23, 30, device="cuda")
    torch.backends.cudnn.allow_tf32 = True
    y = conv(x)
    forward = torchconv.last_choice()
    gx, gw = torch.autograd.grad(y, (x, conv.weight), gy)
    backward = torchconv.last_choice()
    assert re.match(r"forward:fused:tf32", forward), forward
    assert re.search(r"grad_input:fused:tf32", backward) and "grad_weight:" in backward, backward
    yc = torch.nn.functional.conv2d(x, conv.weight, conv.bias, padding=1)
    gxc, gwc = torch.autograd.grad(yc, (x, conv.weight), gy)
    x64, w64 = x.detach().double().requires_grad_(), conv.weight.detach().double().requires_grad_()
    y64 = torch.nn.functional.conv2d(x64, w64, conv.bias.double(), padding=1)
    gx64, gw64 = torch.autograd.grad(y64, (x64, w64), gy.double())
    for name, ours, theirs, ref in (("output", y, yc, y64), ("grad_input", gx, gxc, gx64),
                                    ("grad_weight", gw, gwc, gw64)):
        assert rel_err(ours, ref) <= allowed_error(rel_err(theirs, ref), torch.float32), name
