"""Benchmark mode for ``algorithm="auto"``: measured choices, their cache and its file.

In the spirit of ``torch.backends.cudnn.benchmark``: with ``torchconv.set_benchmark(True)`` the first
call of a convolution shape (N, C, H, W, K, R, S, stride, padding, dilation, groups, dtype, memory
format, device, and the Winograd variant where Winograd is a candidate) times every algorithm that
has a kernel for the device and can do the shape, and keeps the fastest; later calls pay a dictionary
look-up. A call that will be differentiated (grad mode on and an input that requires grad) is timed
forward + backward by the device's time alone (measure), a call that will not, forward only with its
host path. Benchmark mode also lets each algorithm time its own tile configs (CSG's configs and
splits).

Benchmark mode never fails a forward: a candidate that raises while it is timed (out of memory, a
limit it reports only at launch) is skipped, its reason kept in the cache entry (``failed``) and
reported once as a warning; the call gets the fastest candidate that worked.

The cache can be saved to and loaded from a JSON file, so a second process or a deployment skips the
timing. Each entry records the GPU (or "cpu") and the torchconv version it was measured with; an
entry for another GPU or another version is ignored on load.

This module times what its caller hands it (``benchmark_choice`` takes the candidates' operators)
and imports nothing of the modules that call it.
"""
import json
import statistics
import warnings

import torch

from . import _C
from .ops import ALGORITHMS
from .timing import interleaved
from .version import __version__

__all__ = ["set_benchmark", "get_benchmark", "save_cache", "load_cache", "clear_cache", "cache_entries"]

CACHE_FORMAT = 3
# "winograd_variant": the Winograd variant in force, which the "auto" choice depends on
# (selection.winograd_within_bars) and so its memos key on, as do this cache's entries where Winograd
# is a candidate (its time is the variant's). A copy of the C++ setting, which
# torchconv.set_variant (its only writer) keeps: the module's memo key is built on every forward, where
# a dictionary read costs less than a call into the extension.
_state = {"benchmark": False, "progress": None, "winograd_variant": _C.get_variant("winograd")}
# key -> {"algorithm": name, "ms": {algorithm: median ms}, "failed": {algorithm: reason}}
_cache = {}
# Called whenever the cache changes under the callers' feet (clear, load): selection's memo of
# "auto" choices registers here.
_on_change = []


def device_name(device):
    """The name entries are keyed by: the GPU's name, or "cpu"."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def set_benchmark(enabled):
    """Benchmark mode for ``algorithm="auto"`` (see the module docstring), including the
    algorithms' own config timing."""
    _state["benchmark"] = bool(enabled)
    _C.set_tuning(bool(enabled))
    for hook in _on_change:
        hook()


def get_benchmark():
    return _state["benchmark"]


def clear_cache():
    """Forgets every measured choice: algorithms, CSG's tuned plans, the memo of "auto" choices."""
    _cache.clear()
    _C.clear_tuned_choices()
    for hook in _on_change:
        hook()


def cache_entries():
    """A copy of the cache: {key: {"algorithm": ..., "ms": {...}, "failed": {...}}}."""
    return {k: dict(v) for k, v in _cache.items()}


def memory_format(tensor):
    """'channels_last' or 'contiguous': the layout a kernel would see."""
    if tensor.dim() != 4 or tensor.is_contiguous():
        return "contiguous"
    try:
        cl = tensor.is_contiguous(memory_format=torch.channels_last)
    except RuntimeError:  # a tensor under torch.func.vmap answers for the contiguous format only
        return "contiguous"
    return "channels_last" if cl else "contiguous"


# Dtypes whose precision does not depend on the device or the TF32 switch (built once: precision()
# keys every functional call's choice).
_PRECISION_NAMES = {torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16", torch.complex128: "complex128"}


def precision(tensor):
    """The precision a call runs at: "fp64", "fp16", "bf16", and for float32 "tf32" on CUDA when
    PyTorch's cuDNN TF32 switch is on (the operators follow it, csrc/precision.h), else "fp32";
    complex tensors by their parts' ("complex128"; "complex64", or "complex64-tf32")."""
    name = _PRECISION_NAMES.get(tensor.dtype)
    if name is not None:
        return name
    tf32 = tensor.is_cuda and torch.backends.cudnn.allow_tf32
    if tensor.dtype == torch.complex64:
        return "complex64-tf32" if tf32 else "complex64"
    return "tf32" if tf32 else "fp32"


def shape_key(input, weight, stride, padding, dilation, groups, train, winograd_variant=None):
    """The cache key of one convolution call (a tuple; its JSON form is `_key_to_json`).
    `winograd_variant`: the Winograd variant in force where Winograd is a candidate (its time, and
    whether auto may take it, depend on it), else None."""
    return (
        device_name(input.device),
        tuple(input.shape),
        tuple(weight.shape),
        tuple(stride),
        tuple(padding),
        tuple(dilation),
        int(groups),
        precision(input),
        memory_format(input),
        bool(train),
        bool(torch.are_deterministic_algorithms_enabled()),
        winograd_variant,
    )


_KEY_FIELDS = ("gpu", "input", "weight", "stride", "padding", "dilation", "groups", "precision", "layout", "train",
               "deterministic", "winograd_variant")


def _key_to_json(key):
    return {f: list(v) if isinstance(v, tuple) else v for f, v in zip(_KEY_FIELDS, key)}


def _key_from_json(obj):
    """The key of a saved entry; None for an entry of another key format."""
    if not all(f in obj for f in _KEY_FIELDS):
        return None
    return tuple(tuple(obj[f]) if isinstance(obj[f], list) else obj[f] for f in _KEY_FIELDS)


def _plan_gpu(key):
    """The GPU named in a CSG plan key ("forward/f32/<gpu>,<shape...>")."""
    parts = key.split("/", 2)
    return parts[2].split(",", 1)[0] if len(parts) == 3 else None


def save_cache(path):
    """Writes every cached choice -- the algorithm per shape, and CSG's tuned config and split per
    shape -- with the GPU and torchconv version it was measured with. Returns the number of
    algorithm choices written."""
    entries = [dict(key=_key_to_json(k), algorithm=v["algorithm"], ms=v["ms"], failed=v.get("failed", {}),
                    torchconv=__version__) for k, v in _cache.items()]
    plans = [dict(key=k, plan=v, gpu=_plan_gpu(k), torchconv=__version__) for k, v in _C.tuned_choices().items()]
    with open(path, "w") as f:
        json.dump({"format": CACHE_FORMAT, "torchconv": __version__, "entries": entries, "plans": plans}, f, indent=1)
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
        if isinstance(p, dict) and p.get("torchconv") == __version__ and _plan_gpu(str(p.get("key", ""))) in here:
            _C.record_tuned_choice(str(p["key"]), str(p["plan"]))
        else:
            ignored += 1
    for e in data.get("entries", []):
        try:
            key = _key_from_json(e["key"])
            fresh = e.get("torchconv") == __version__ and key[0] in here and e["algorithm"] in ALGORITHMS
        except (KeyError, TypeError):
            fresh = False
        if not fresh:
            ignored += 1
            continue
        _cache[key] = {"algorithm": e["algorithm"], "ms": dict(e.get("ms", {})), "failed": dict(e.get("failed", {}))}
        loaded += 1
    for hook in _on_change:
        hook()  # loaded choices take effect on the next call
    return loaded, ignored


def measure(input, weight, bias, stride, padding, dilation, groups, candidates, train, rounds=3, reps=3):
    """Median ms of each candidate ({algorithm: operator}) on a fresh input of the call's shape and
    layout with the call's own weight (read only), so each algorithm runs as it will: with its
    cached filter transform for a frozen weight or inside inference mode, re-deriving it for a
    trainable one. Forward, or forward + backward (into fresh leaves sharing the weight's storage)
    when `train`, the latter by the device's time alone. The candidates are timed interleaved
    (torchconv.timing). Returns (times, failed):
    a candidate that raises is left out of the timing and its reason put in `failed`."""
    with torch.no_grad():
        # From a generator of its own: the measurement leaves the user's random stream (dropout
        # masks, data order) where it was.
        generator = torch.Generator(device=input.device)
        generator.manual_seed(0)
        x = torch.empty_like(input).normal_(generator=generator)
    w, b = weight, bias
    if train:
        x.requires_grad_(True)
        w = weight.detach().requires_grad_(True)

    def runner(op):
        def run():
            y = op(x, w, b, stride, padding, dilation, groups)
            if train:
                torch.autograd.grad(y, (x, w), torch.ones_like(y))
        return run

    fns, failed = {}, {}
    with torch.enable_grad() if train else torch.no_grad():
        for algo, op in candidates.items():
            fn = runner(op)
            try:
                fn()  # a candidate that cannot run fails here, before any timing
            except Exception as err:  # noqa: BLE001 -- any failure of a candidate only removes it
                failed[algo] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                if input.is_cuda:
                    torch.cuda.synchronize(input.device)
                continue
            fns[algo] = fn
        # Training calls are timed on the device alone: each runs torch.autograd.grad, an engine
        # call whose host time (hundreds of µs) is the same for every candidate and would bury the
        # kernels' differences in its noise, while a model's backward makes one such call for all
        # of its layers. Forward calls keep their host path in the time (launch-bound layers).
        per_round = (interleaved(fns, input.device, rounds=rounds, reps=reps, warmup=1, device_time=train)
                     if len(fns) > 1 else {})
    times = {algo: statistics.median(v) for algo, v in per_round.items()}
    return times, failed


def benchmark_choice(input, weight, bias, stride, padding, dilation, groups, candidates):
    """The cached or newly measured fastest of `candidates` ({algorithm: operator}, in order of
    preference) for this call (benchmark mode)."""
    train = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad)
    variant = _state["winograd_variant"] if "winograd" in candidates else None
    key = shape_key(input, weight, stride, padding, dilation, groups, train, variant)
    hit = _cache.get(key)
    if hit is not None and hit["algorithm"] in candidates:
        return hit["algorithm"]
    names = list(candidates)
    if len(names) == 1:
        choice, times, failed = names[0], {}, {}
    else:
        progress = _state["progress"]
        if progress is not None:
            progress(key)
        times, failed = measure(input, weight, bias, stride, padding, dilation, groups, candidates, train)
        working = [a for a in names if a not in failed]
        if not working:
            raise RuntimeError(f"torchconv benchmark mode: every candidate failed for input {tuple(input.shape)}, "
                               f"weight {tuple(weight.shape)}: {failed}")
        choice = min(working, key=lambda a: times.get(a, 0.0))
        if failed:
            warnings.warn(f"torchconv benchmark mode: skipped {', '.join(sorted(failed))} for input "
                          f"{tuple(input.shape)}, weight {tuple(weight.shape)} ({'; '.join(failed.values())}); "
                          f"using {choice}", RuntimeWarning, stacklevel=4)
    _cache[key] = {"algorithm": choice, "ms": times, "failed": failed}
    return choice
