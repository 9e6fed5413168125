"""Is a small layer host-bound or GPU-bound? For each layer, per forward call:

  events  the benchmark's number (CUDA events around back-to-back calls, median),
  host    host time to issue one call while the GPU is kept busy (a long sleep kernel in front),
  gpu     GPU time of one call replayed from a CUDA graph (no host in the way),

for cuDNN and for torchconv's gemm with and without the split reduction (a 1-byte workspace limit
forbids splitting). events ~ max(host, gpu) says which one bounds the layer.

  python benchmarks/debug/probe_host_gpu.py --layers R3,R5,R8,R11 --batch 32
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import torchconv  # noqa: E402
from bench import timer  # noqa: E402
from suites import SUITES  # noqa: E402

events_ms = timer(torch.device("cuda"), warmup=5, reps=50)


def host_us(fn, calls=200):
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e8))  # ~100 ms of GPU work ahead of the calls: the host never waits
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return t


def graph_us(fn, calls=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
    except Exception as exc:  # report, do not stop the probe
        return f"graph failed: {type(exc).__name__}: {exc}"[:120]
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--layers", default="R3,R5,R8,R11")
    p.add_argument("--batch", default="32")
    p.add_argument("--algorithms", default="gemm", help="torchconv algorithms to probe besides cuDNN")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    layers = {l.name: l for suite in SUITES.values() for l in suite}
    rows = []
    default_limit = torchconv.get_workspace_limit()
    for n in [int(b) for b in args.batch.split(",")]:
        for name in args.layers.split(","):
            l = layers[name]
            x = torch.randn(n, l.C, l.HW, l.HW, device="cuda")
            w = torch.randn(l.K, l.C, l.R, l.R, device="cuda") / (l.C * l.R**2) ** 0.5
            conv = (l.stride, l.pad, 1, 1)
            cases = {"cudnn": (lambda: F.conv2d(x, w, None, *conv), default_limit)}
            for algo in args.algorithms.split(","):
                op = getattr(torch.ops.torchconv, f"conv2d_{algo}").default
                cases[algo] = (lambda algo=algo: torchconv.conv2d(x, w, None, *conv, algorithm=algo), default_limit)
                cases[f"{algo} op"] = (lambda op=op: op(x, w, None, [l.stride] * 2, [l.pad] * 2, [1, 1], 1),
                                       default_limit)
                if algo == "gemm":
                    cases["gemm no split"] = (lambda: torchconv.conv2d(x, w, None, *conv, algorithm="gemm"), 1)
            for case, (fn, limit) in cases.items():
                torchconv.set_workspace_limit(limit)
                row = dict(layer=name, N=n, case=case, events_us=events_ms(fn) * 1e3, host_us=host_us(fn),
                           gpu_us=graph_us(fn))
                torchconv.set_workspace_limit(default_limit)
                rows.append(row)
                g = row["gpu_us"]
                print(f"{name:>4} N={n:<3} {case:<14} events {row['events_us']:7.1f}  host {row['host_us']:6.1f}  "
                      f"gpu {g if isinstance(g, str) else f'{g:6.1f}'}", flush=True)
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
