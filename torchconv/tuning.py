"""Measured algorithm choice for ``algorithm="auto"`` (benchmark mode), its cache and its file.

In the spirit of ``torch.backends.cudnn.benchmark``: with ``torchconv.set_benchmark(True)`` the first
call of a convolution shape (N, C, H, W, K, R, S, stride, padding, dilation, groups, dtype, device)
times every algorithm that has a kernel for the device and can do the shape, and keeps the fastest;
later calls pay a dictionary look-up. A call that will be differentiated (grad mode on and an input
that requires grad) is timed forward + backward, a call that will not, forward only. CSG's atomics
are order-dependent: under ``torch.use_deterministic_algorithms(True)`` it is never a candidate (and
a cached CSG choice made outside deterministic mode is not used inside it). Benchmark mode also turns
on CSG's own tile-config tuning.

The cache can be saved to and loaded from a JSON file, so a second process or a deployment skips the
timing. Each entry records the GPU (or "cpu") and the torchconv version it was measured with; an
entry for another GPU or another version is ignored on load.
"""
import json
import statistics
import sys
import time

import torch

from . import _C
from .ops import ALGORITHMS

__all__ = ["set_benchmark", "get_benchmark", "save_cache", "load_cache", "clear_cache", "cache_entries"]

CACHE_FORMAT = 1
_state = {"benchmark": False, "progress": None}
# key -> {"algorithm": name, "ms": {algorithm: median ms}}
_cache = {}


def _version():
    from . import __version__

    return __version__


def device_name(device):
    """The name entries are keyed by: the GPU's name, or "cpu"."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def set_benchmark(enabled):
    """Benchmark mode for ``algorithm="auto"`` (see the module docstring); also CSG's config tuning."""
    _state["benchmark"] = bool(enabled)
    _C.set_tuning(bool(enabled))


def get_benchmark():
    return _state["benchmark"]


def clear_cache():
    """Forgets every measured choice: algorithms, CSG's tuned plans, the per-call memo of "auto"
    choices."""
    from . import functional

    _cache.clear()
    functional._auto_memo.clear()
    _C.clear_tuned_choices()


def cache_entries():
    """A copy of the cache: {key: {"algorithm": ..., "ms": {...}}}."""
    return {k: dict(v) for k, v in _cache.items()}


def shape_key(input, weight, stride, padding, dilation, groups, train):
    """The cache key of one convolution call (a tuple; its JSON form is `_key_to_json`)."""
    device = input.device
    return (
        device_name(device) if device.type == "cuda" else "cpu",
        tuple(input.shape),
        tuple(weight.shape),
        tuple(stride),
        tuple(padding),
        tuple(dilation),
        int(groups),
        str(input.dtype).replace("torch.", ""),
        bool(train),
        bool(torch.are_deterministic_algorithms_enabled()),
    )


_KEY_FIELDS = ("gpu", "input", "weight", "stride", "padding", "dilation", "groups", "dtype", "train", "deterministic")


def _key_to_json(key):
    return {f: list(v) if isinstance(v, tuple) else v for f, v in zip(_KEY_FIELDS, key)}


def _key_from_json(obj):
    return tuple(tuple(obj[f]) if isinstance(obj[f], list) else obj[f] for f in _KEY_FIELDS)


def _plan_gpu(key):
    """The GPU named in a CSG plan key ("forward/f32/<gpu>,<shape...>")."""
    parts = key.split("/", 2)
    return parts[2].split(",", 1)[0] if len(parts) == 3 else None


def save_cache(path):
    """Writes every cached choice -- the algorithm per shape, and CSG's tuned config and split per
    shape -- with the GPU and torchconv version it was measured with. Returns the number of
    algorithm choices written."""
    entries = [dict(key=_key_to_json(k), algorithm=v["algorithm"], ms=v["ms"], torchconv=_version()) for k, v in
               _cache.items()]
    plans = [dict(key=k, plan=v, gpu=_plan_gpu(k), torchconv=_version()) for k, v in _C.tuned_choices().items()]
    with open(path, "w") as f:
        json.dump({"format": CACHE_FORMAT, "torchconv": _version(), "entries": entries, "plans": plans}, f, indent=1)
    return len(entries)


def load_cache(path, device=None):
    """Adds the file's entries measured on this GPU (``device``, default the current CUDA device, or
    "cpu" entries when there is none) with this torchconv version -- algorithm choices and CSG plans
    -- and returns (algorithm choices loaded, entries of either kind ignored)."""
    with open(path) as f:
        data = json.load(f)
    if data.get("format") != CACHE_FORMAT:
        raise ValueError(f"torchconv.load_cache: {path} is not a torchconv cache of format {CACHE_FORMAT}")
    here = {"cpu"}
    if device is not None:
        here.add(device_name(device))
    elif torch.cuda.is_available():
        here.add(device_name("cuda"))
    loaded = ignored = 0
    for p in data.get("plans", []):
        if isinstance(p, dict) and p.get("torchconv") == _version() and _plan_gpu(str(p.get("key", ""))) in here:
            _C.record_tuned_choice(str(p["key"]), str(p["plan"]))
        else:
            ignored += 1
    for e in data.get("entries", []):
        try:
            key = _key_from_json(e["key"])
            fresh = e.get("torchconv") == _version() and key[0] in here and e["algorithm"] in ALGORITHMS
        except (KeyError, TypeError):
            fresh = False
        if not fresh:
            ignored += 1
            continue
        _cache[key] = {"algorithm": e["algorithm"], "ms": dict(e.get("ms", {}))}
        loaded += 1
    from . import functional

    functional._auto_memo.clear()  # loaded choices take effect on the next call
    return loaded, ignored


def time_ms(fn, device, reps, warmup=1):
    """Median ms of fn over `reps` back-to-back runs after `warmup` runs: CUDA events on a GPU (the
    benchmark's and the examples' timer too), a wall clock on a CPU."""
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize(device)
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def measure(input, weight, bias, stride, padding, dilation, groups, candidates, train, reps=5):
    """Median ms of each candidate on a fresh input of the call's shape with the call's own weight
    (read only), so each algorithm runs as it will: with its cached filter transform for a frozen
    weight or inside inference mode, re-deriving it for a trainable one. Forward, or forward +
    backward (into fresh leaves sharing the weight's storage) when `train`."""
    from .functional import FORWARD

    with torch.no_grad():
        x = torch.randn_like(input)
    w, b = weight, bias
    if train:
        x.requires_grad_(True)
        w = weight.detach().requires_grad_(True)
    times = {}
    for algo in candidates:
        op = FORWARD[algo]

        def run(op=op):
            y = op(x, w, b, stride, padding, dilation, groups)
            if train:
                torch.autograd.grad(y, (x, w), torch.ones_like(y))

        with torch.enable_grad() if train else torch.no_grad():
            times[algo] = time_ms(run, input.device, reps)
    return times


def benchmark_choice(input, weight, bias, stride, padding, dilation, groups, candidates):
    """The cached or newly measured fastest candidate for this call (benchmark mode)."""
    train = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)
    key = shape_key(input, weight, stride, padding, dilation, groups, train)
    hit = _cache.get(key)
    if hit is not None and hit["algorithm"] in candidates:
        return hit["algorithm"]
    if len(candidates) == 1:
        choice, times = candidates[0], {}
    else:
        progress = _state["progress"]
        if progress is not None:
            progress(key)
        times = measure(input, weight, bias, stride, padding, dilation, groups, candidates, train)
        choice = min(times, key=times.get)
    _cache[key] = {"algorithm": choice, "ms": times}
    return choice


class _Progress:
    """A one-line progress report on stderr while `tune` measures new shapes."""

    def __init__(self, total):
        self.total, self.done, self.t0 = total, 0, time.perf_counter()

    def __call__(self, key):
        self.done += 1
        width = 30
        filled = int(width * min(self.done, self.total) / max(self.total, 1))
        sys.stderr.write(f"\rtorchconv: tuning [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                         f"convolutions, {time.perf_counter() - self.t0:.1f} s")
        sys.stderr.flush()

    def close(self):
        if self.done:
            sys.stderr.write("\n")


def tune(model, example_input, train=False, progress=True):
    """Runs `model(example_input)` once in benchmark mode so every convolution shape it meets is
    measured now (with a progress bar on stderr) instead of on its first real call: for inference,
    or with `train=True` for training (forward + backward timed; the model runs a forward and a
    backward pass, which updates e.g. batch-norm statistics in train mode but no .grad). Returns
    the number of cache entries added. Leaves benchmark mode on."""
    from .modules import Conv2d

    convs = [m for m in model.modules() if isinstance(m, Conv2d)]
    before = len(_cache)
    set_benchmark(True)
    bar = _Progress(len(convs)) if progress else None
    _state["progress"] = bar
    try:
        if train:
            params = [p for p in model.parameters() if p.requires_grad]
            out = model(example_input)
            torch.autograd.grad(out.float().sum(), params, allow_unused=True)
        else:
            with torch.no_grad():
                model(example_input)
    finally:
        _state["progress"] = None
        if bar is not None:
            bar.close()
    return len(_cache) - before
