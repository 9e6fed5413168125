"""Is ResNet-50 inference host-bound or GPU-bound? For cuDNN and torchconv (benchmark mode), per
forward: events (back-to-back, as examples/resnet50.py times it) and gpu (a CUDA graph of the forward
replayed: no host in the way). events well above gpu: launch-bound. (The sleep-kernel host timing of
probe_host_gpu.py does not work for a whole model: its ~175 launches per forward fill CUDA's launch
queue within a few forwards, and the host then waits for the sleep.)

  python benchmarks/debug/probe_model.py --batch 1
"""
import argparse
import copy
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "examples")]
import torchconv  # noqa: E402
from probe_host_gpu import graph_us  # noqa: E402
from resnet50 import cudnn_settings, resnet50  # noqa: E402
from torchconv.tuning import time_ms  # noqa: E402


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
            ev = time_ms(fn, "cuda", reps=20, warmup=5)
            print(f"{name:<10} N={args.batch}: events {ev:.3f} ms  gpu {graph_us(fn, calls=1) / 1e3:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
