"""Is ResNet-50 inference host-bound or GPU-bound? For cuDNN and torchconv (benchmark mode), per
forward: events (back-to-back, as examples/resnet50.py times it), host (issue time with the GPU kept
busy by a sleep kernel in front) and gpu (a CUDA graph of the forward replayed: no host in the way).

  python benchmarks/debug/probe_model.py --batch 1
"""
import argparse
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import torchconv  # noqa: E402
from resnet50 import cudnn_settings, resnet50, time_ms  # noqa: E402


def host_ms(fn, calls=20):
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(1e9))  # ~0.5 s of GPU work ahead: the host never waits
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) / calls * 1e3
    torch.cuda.synchronize()
    return t


def graph_ms(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1)
    args = p.parse_args()
    cudnn_settings(fp32=True)
    torch.manual_seed(0)
    reference = resnet50().cuda().eval()
    ours = torchconv.convert(copy.deepcopy(reference)).eval()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    with torch.inference_mode():
        torchconv.tune(ours, x, progress=False)
        for name, model in (("cudnn", reference), ("torchconv", ours)):
            fn = lambda: model(x)  # noqa: E731
            ev = time_ms(fn, torch.device("cuda"), 5, 20)
            print(f"{name:<10} N={args.batch}: events {ev:.3f} ms  host {host_ms(fn):.3f} ms  gpu {graph_ms(fn):.3f} ms",
                  flush=True)


if __name__ == "__main__":
    main()
