"""ResNet-50 inference on cuDNN and on torchconv (every conv a torchconv.Conv2d, auto) under
torch.profiler: prints each run's key_averages (our kernels and operators next to cuDNN's) and
exports a Chrome trace of each (open in chrome://tracing or https://ui.perfetto.dev).

  python examples/profile_resnet50.py --batch 32 --trace-dir /tmp/traces [--benchmark]
"""
import argparse
import copy
import os

import torch
from torch.profiler import ProfilerActivity, profile

import torchconv
from resnet50 import cudnn_settings, resnet50


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--rows", type=int, default=25, help="rows of each key_averages table")
    p.add_argument("--benchmark", action="store_true", help="torchconv.tune the model first (measured choices)")
    p.add_argument("--trace-dir", default=".")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sort_by = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    cudnn_settings(fp32=True)
    torch.manual_seed(0)
    reference = resnet50().to(device).eval()
    ours = torchconv.convert(copy.deepcopy(reference)).eval()
    x = torch.randn(args.batch, 3, 224, 224, device=device)
    os.makedirs(args.trace_dir, exist_ok=True)
    with torch.inference_mode():
        if args.benchmark:
            torchconv.tune(ours, x)
        for name, model in (("cudnn", reference), ("torchconv", ours)):
            for _ in range(3):
                model(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            with profile(activities=activities) as prof:
                for _ in range(args.iters):
                    model(x)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            print(f"\n=== {name}: ResNet-50, batch {args.batch}, {args.iters} iterations ===")
            print(prof.key_averages().table(sort_by=sort_by, row_limit=args.rows))
            trace = os.path.join(args.trace_dir, f"resnet50-{name}-b{args.batch}.json")
            prof.export_chrome_trace(trace)
            print(f"Chrome trace: {trace}")


if __name__ == "__main__":
    main()
