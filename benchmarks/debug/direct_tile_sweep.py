"""Every float tile config of the direct kernel, forced in turn (torchconv._C.set_direct_tile), over
the resnet + yolo layers at N = 1 and 32 and optionally the big suite, forward and/or forward +
backward; cuDNN (FP32, TF32 off, benchmark mode) timed once per layer in the same process. Prints
one line per layer (TFLOP/s per config, the rule's pick, the winner) and writes JSON.
Usage: python benchmarks/debug/direct_tile_sweep.py [--big] [--mode fwd,fwdbwd] [--out FILE]"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torchconv  # noqa: E402
from suites import BIG, RESNET, YOLO  # noqa: E402
from torchconv.tuning import time_ms  # noqa: E402

CONFIGS = ("wide", "small")  # torchconv tuning.h kDirectTileNames


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--big", action="store_true")
    p.add_argument("--mode", default="fwd")
    p.add_argument("--batch", default="1,32")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    layers = [(layer, int(n)) for n in args.batch.split(",") for layer in RESNET + YOLO]
    if args.big:
        layers += [(layer, 1) for layer in BIG]
    rows = []
    for mode in args.mode.split(","):
        for layer, n in layers:
            x = torch.randn(n, layer.C, layer.HW, layer.HW, device="cuda", requires_grad=mode == "fwdbwd")
            w = torch.randn(layer.K, layer.C, layer.R, layer.R, device="cuda", requires_grad=mode == "fwdbwd")
            conv = (layer.stride, layer.pad)
            gy = torch.randn_like(F.conv2d(x, w, None, *conv))

            def run(fn):
                if mode == "fwd":
                    return lambda: fn(x, w, None, *conv)
                return lambda: torch.autograd.grad(fn(x, w, None, *conv), (x, w), gy)

            ours = lambda *a: torchconv.conv2d(*a, algorithm="direct")  # noqa: E731
            big = layer.HW >= 1024
            reps = 5 if big else args.reps
            flops = layer.flops(n) * (3 if mode == "fwdbwd" else 1)
            cudnn = time_ms(run(F.conv2d), "cuda", reps, warmup=2)
            torchconv._C.set_direct_tile("")
            ours(x, w, None, *conv)
            rule = torchconv._C.last_choice().split(":")[1].split("/")[0]
            times = {}
            for cfg in CONFIGS:
                if big and cfg == "small":
                    continue
                torchconv._C.set_direct_tile(cfg)
                times[cfg] = time_ms(run(ours), "cuda", reps, warmup=1)
            torchconv._C.set_direct_tile("")
            best = min(times, key=times.get)
            row = dict(layer=layer.name, N=n, mode=mode, cudnn_ms=cudnn, ms=times, rule=rule, best=best)
            rows.append(row)
            print(f"{layer.name:>6} N={n:<3} {mode:<6} cudnn {flops / cudnn / 1e9:6.2f} | "
                  + " ".join(f"{c} {flops / t / 1e9:6.2f} ({cudnn / t:4.2f}x)" for c, t in times.items())
                  + f" | rule {rule}{'' if rule == best else ' (best ' + best + ')'}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
