"""The kernels of a pass, ours and cuDNN's, with their device time per call (torch.profiler):
where a small call's time goes (relayout, copies, fills, the GEMM) against cuDNN's kernels, and
which of our passes launch kernels that are not ours (ATen copies and fills). A diagnostic, not a
result.
    python docs/wip/pass_kernels.py --layers R8,Y9,Y13,Y19,R11 --batch 1
    python docs/wip/pass_kernels.py --layers all --batch 8 --precision bf16 --layouts nhwc --foreign-only
"""
import argparse
import collections
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import torchconv  # noqa: E402,F401
from suites import SUITES  # noqa: E402

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def kernels(fn, calls):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = collections.OrderedDict()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = e.name[:90]
            n, t = per.get(k, (0, 0.0))
            per[k] = (n + 1, t + e.device_time)
    return [(k, n / calls, t / calls) for k, (n, t) in per.items()]


def foreign(name):
    """A kernel of ours is named torchconv::...; a memset is ours too (one per strided grad_input)."""
    return "torchconv" not in name and not name.startswith("Memset")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="R8,Y9,Y13,Y19,R11", help="names from the resnet and yolo suites, or all")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--precision", default="tf32", choices=sorted(DTYPES))
    ap.add_argument("--layouts", default="nchw,nhwc")
    ap.add_argument("--algorithm", default="gemm")
    ap.add_argument("--passes", default="forward,grad_input")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--foreign-only", action="store_true",
                    help="print only our passes that launch kernels not ours, and a count of passes checked")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    dtype = DTYPES[args.precision]
    layers = {l.name: l for name in ("resnet", "yolo") for l in SUITES[name]}
    names = list(layers) if args.layers == "all" else args.layers.split(",")
    ops = torch.ops.torchconv
    aten = torch.ops.aten
    forward, backward = getattr(ops, f"conv2d_{args.algorithm}"), getattr(ops, f"conv2d_{args.algorithm}_backward")
    checked = 0
    for name in names:
        layer = layers[name]
        for layout in args.layouts.split(","):
            fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
            x = torch.randn(args.batch, layer.C, layer.HW, layer.HW, device="cuda").to(dtype).contiguous(
                memory_format=fmt)
            fan_in = layer.C // layer.groups * layer.R * layer.kw
            w = (torch.randn(layer.K, layer.C // layer.groups, layer.R, layer.kw, device="cuda") / fan_in ** 0.5).to(
                dtype).contiguous(memory_format=fmt).requires_grad_()
            gy = torch.randn(args.batch, layer.K, layer.out_hw(), layer.out_w(), device="cuda").to(dtype).contiguous(
                memory_format=fmt)
            st, pads, dil = [layer.stride] * 2, list(layer.pads), [layer.dilation] * 2
            conv = (st, pads, dil, layer.groups)
            if torchconv.unsupported_reason(args.algorithm, x, w, layer.stride, layer.dilation, layer.pads,
                                            layer.groups, None):
                continue
            masks = {"grad_input": [True, False, False], "grad_weight": [False, True, False]}
            fns = {}
            for pass_ in args.passes.split(","):
                if pass_ == "forward":
                    fns["ours forward"] = lambda: forward(x, w, None, *conv)
                    fns["cudnn forward"] = lambda: aten.convolution(x, w, None, st, pads, dil, False, [0, 0],
                                                                    layer.groups)
                else:
                    m = masks[pass_]
                    fns[f"ours {pass_}"] = lambda m=m: backward(gy, x, w, *conv, m)
                    fns[f"cudnn {pass_}"] = lambda m=m: aten.convolution_backward(
                        gy, x, w, None, st, pads, dil, False, [0, 0], layer.groups, m)
            for label, fn in fns.items():
                if args.foreign_only and not label.startswith("ours"):
                    continue
                with torch.no_grad():
                    rows = kernels(fn, args.calls)
                total = sum(t for _, _, t in rows)
                choice = torchconv.last_choice() if label.startswith("ours") else ""
                checked += label.startswith("ours")
                if args.foreign_only and not any(foreign(k) for k, _, _ in rows):
                    continue
                print(f"{name} N{args.batch} {args.precision} {layout} {label}: {total:.1f} us  {choice}")
                for k, n, t in rows:
                    print(f"    {t:7.2f} us  x{n:.1f}  {k}")
    if args.foreign_only:
        print(f"{checked} passes of ours checked ({args.precision}, batch {args.batch})")


if __name__ == "__main__":
    main()
