"""The timing protocol every measurement in torchconv shares: benchmark mode, ``explain``, the
benchmarks and the examples.

A time is the median of several *rounds*; in each round every contender runs ``reps`` times back to
back, the contenders in a random order that changes from round to round (seeded, so a run can be
repeated). Interleaving makes slow drifts of the machine (clocks, a neighbour's load) fall on all
contenders alike, and the spread of the per-round ratio says how far a comparison can be trusted.

What a time includes: the host path of the callable (Python, the dispatcher, autograd when it
differentiates) and the GPU work it enqueues, measured with CUDA events on the current stream
around each call; the caches are left warm (no L2 flush between calls), as in a model where a
layer's weights and activations were just touched. On a CPU, a wall clock.
"""
import datetime
import random
import statistics
import time

import torch

from .version import __version__

__all__ = ["time_ms", "interleaved", "compare", "hold_stream", "environment", "SPREAD_FLAG", "FP32_PEAK_TFLOPS"]

# The H100's measured FFMA peak, which result files record beside their TFLOP/s (CUDA runs only).
FP32_PEAK_TFLOPS = 64.6
# A comparison whose per-round ratios spread by more than this fraction of the median is flagged.
SPREAD_FLAG = 0.10
# Sleep-kernel cycles per second of host time to cover: above the clock of the GPUs measured, so the
# sleep outlasts the host's work at any clock.
_SLEEP_CYCLES_PER_S = 2.5e9
_MAX_SLEEP_S = 0.05


def environment(device):
    """What a result file records about the run on `device`: the GPU (or "cpu"), the versions of
    torch, cuDNN, CUDA and torchconv, the UTC date, and the FP32 peak its TFLOP/s are read against."""
    cuda = device.type == "cuda"
    return {
        "gpu": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "cuda": torch.version.cuda,
        "torchconv": __version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "fp32_peak_tflops": FP32_PEAK_TFLOPS if cuda else None,
    }


def hold_stream(seconds):
    """Queues a sleep kernel on the current CUDA stream that outlasts `seconds` of host work (at most
    _MAX_SLEEP_S), so what the host queues behind it waits for the host, never the reverse."""
    torch.cuda._sleep(int(min(seconds, _MAX_SLEEP_S) * _SLEEP_CYCLES_PER_S))


def _device_samples(fn, device, reps, host_s):
    """One time of fn in ms, the mean over `reps` back-to-back calls, of the device's work alone: a
    sleep kernel queued first holds the stream while the host queues the calls (`host_s`: seconds
    of host time per call), so the events around them see no host gaps."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    hold_stream(2 * reps * host_s)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / reps]


def _samples(fn, device, reps):
    """`reps` times of fn in ms (events around each call on a GPU, a wall clock on a CPU)."""
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def time_ms(fn, device, reps=10, warmup=1):
    """Median ms of `reps` back-to-back runs of fn after `warmup` runs (one contender alone)."""
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    return statistics.median(_samples(fn, device, reps))


def interleaved(fns, device, rounds=5, reps=5, warmup=2, seed=0, device_time=False):
    """Times every callable of `fns` ({name: fn}) over `rounds` rounds of `reps` runs each, the
    order shuffled per round. Returns {name: [median ms of round 0, round 1, ...]}. A callable
    that raises propagates; the caller decides what a failure means.

    device_time=True (on a GPU): each round times the device's work alone, with the host ahead
    (_device_samples) -- for callables whose host path carries a fixed cost that is no part of the
    comparison (an autograd engine call per layer) and would drown the kernels' differences."""
    device = torch.device(device)
    device_time = device_time and device.type == "cuda"
    names = list(fns)
    host_s = dict.fromkeys(names, 0.0)
    for name in names:
        for _ in range(warmup):
            if device_time:  # the host time per call, which the stream is held for
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            fns[name]()
            host_s[name] = max(host_s[name], time.perf_counter() - t0)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    order = random.Random(seed)
    per_round = {name: [] for name in names}
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            samples = (_device_samples(fns[name], device, reps, host_s[name]) if device_time
                       else _samples(fns[name], device, reps))
            per_round[name].append(statistics.median(samples))
    return per_round


def compare(ours, reference, device, rounds=5, reps=5, warmup=2, seed=0):
    """Times `ours` against `reference` interleaved. Returns ms (median over rounds of ours),
    reference_ms, ratio (median over rounds of reference / ours: > 1 means ours is faster),
    ratio_min, ratio_max, rounds, and spread_flag (the ratios spread by more than SPREAD_FLAG)."""
    times = interleaved({"ours": ours, "reference": reference}, device, rounds, reps, warmup, seed)
    ratios = [r / o for o, r in zip(times["ours"], times["reference"])]
    ratio = statistics.median(ratios)
    return dict(ms=statistics.median(times["ours"]), reference_ms=statistics.median(times["reference"]), ratio=ratio,
                ratio_min=min(ratios), ratio_max=max(ratios), rounds=rounds,
                spread_flag=(max(ratios) - min(ratios)) > SPREAD_FLAG * ratio)
