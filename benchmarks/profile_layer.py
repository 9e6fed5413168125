"""One suite layer, ours and cuDNN, for a profiler: runs each a few times at one precision and
layout so that `ncu --kernel-name regex:...` or `nsys` can pick the kernels, and prints the median
CUDA-event time of each (a quick look, not a result: bench.py's protocol makes the results).
    ncu --clock-control none --kernel-name regex:tc_conv --launch-skip 3 --launch-count 1 \
        python benchmarks/profile_layer.py --layer Y8 --precision fp16 --layout nhwc
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suites  # noqa: E402
import torchconv  # noqa: E402

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layer", required=True, help="a layer name from suites.py (R9, Y8, ...)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precision", default="fp16", choices=sorted(DTYPES))
    ap.add_argument("--layout", default="nhwc", choices=["nchw", "nhwc"])
    ap.add_argument("--mode", default="fwd", choices=["fwd", "fwdbwd"])
    ap.add_argument("--algorithm", default="gemm")
    ap.add_argument("--config", default="", help="a tile config of the algorithm to force (wgmma-ws, ...)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    ap.add_argument("--reps", type=int, default=5, help="timed samples (the median is printed)")
    ap.add_argument("--calls", type=int, default=1, help="calls per timed sample")
    ap.add_argument("--skip-reference", action="store_true", help="run ours only")
    ap.add_argument("--tf32-source-reads", default="rule", choices=["rule", "rounded_copies"],
                    help="testing aid: float32 channels_last sources as the rule reads them (the register "
                         "tiles where the wgmma kernel runs), or copied and rounded (or gathered) for the "
                         "descriptor loop")
    args = ap.parse_args()
    layers = {layer.name: layer for layer in suites.RESNET + suites.YOLO + suites.DEPTHWISE}
    layer = layers[args.layer]
    torch.backends.cudnn.benchmark = True
    torchconv.set_config(args.algorithm, args.config)
    torchconv._C.set_tf32_source_reads(args.tf32_source_reads)
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    dtype = DTYPES[args.precision]
    fmt = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    n = layer.N or args.batch
    x = torch.randn(n, layer.C, layer.HW, layer.HW, device="cuda", dtype=dtype).to(memory_format=fmt)
    w = torch.randn(layer.K, layer.C // layer.groups, layer.R, layer.kw, device="cuda", dtype=dtype)
    w = (w / (layer.C // layer.groups * layer.R * layer.kw) ** 0.5).to(memory_format=fmt)
    x.requires_grad_(args.mode == "fwdbwd")
    w.requires_grad_(args.mode == "fwdbwd")
    kw = dict(stride=layer.stride, padding=layer.pad, dilation=layer.dilation, groups=layer.groups)

    def call(fn):
        def run():
            y = fn(x, w, None, **kw)
            if args.mode == "fwdbwd":
                y.backward(torch.ones_like(y))
        return run

    fns = {"ours": call(lambda *a, **k: torchconv.conv2d(*a, algorithm=args.algorithm, **k))}
    if not args.skip_reference:
        fns["cudnn"] = call(F.conv2d)
    times = {}
    for name, fn in fns.items():
        for _ in range(args.warmup):
            fn()
        samples = []
        for _ in range(args.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.calls):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / args.calls)
        times[name] = statistics.median(samples)
    tflop = layer.flops(n) * (3 if args.mode == "fwdbwd" else 1) / 1e12
    for name, ms in times.items():
        print(f"{args.layer} {args.precision}/{args.layout} N={n} {args.mode} {name}: {ms:.4f} ms, "
              f"{tflop / ms * 1e3:.1f} TFLOP/s  choice={torchconv.last_choice() if name == 'ours' else ''}")


if __name__ == "__main__":
    main()
