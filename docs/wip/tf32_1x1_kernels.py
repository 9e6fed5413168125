"""The kernels of a pass, ours and cuDNN's, with their device time per call (torch.profiler):
where a small TF32 1x1 call's time goes (relayout, rounded copy, GEMM, epilogue) against cuDNN's
single kernel. A diagnostic, not a result.
    python docs/wip/tf32_1x1_kernels.py --layers R8,Y9,Y13,Y19,R11 --batch 1
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="R8,Y9,Y13,Y19,R11")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layouts", default="nchw,nhwc")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    layers = {l.name: l for name in ("resnet", "yolo") for l in SUITES[name]}
    ops = torch.ops.torchconv
    aten = torch.ops.aten
    for name in args.layers.split(","):
        layer = layers[name]
        for layout in args.layouts.split(","):
            fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
            x = torch.randn(args.batch, layer.C, layer.HW, layer.HW, device="cuda").contiguous(memory_format=fmt)
            w = (torch.randn(layer.K, layer.C, layer.R, layer.kw, device="cuda") / layer.C ** 0.5).contiguous(
                memory_format=fmt).requires_grad_()
            gy = torch.randn(args.batch, layer.K, layer.out_hw(), layer.out_w(), device="cuda").contiguous(
                memory_format=fmt)
            st, pads, dil = [layer.stride] * 2, list(layer.pads), [layer.dilation] * 2
            conv = (st, pads, dil, layer.groups)
            fns = {
                "ours forward": lambda: ops.conv2d_gemm(x, w, None, *conv),
                "cudnn forward": lambda: aten.convolution(x, w, None, st, pads, dil, False, [0, 0], layer.groups),
                "ours grad_input": lambda: ops.conv2d_gemm_backward(gy, x, w, *conv, [True, False, False]),
                "cudnn grad_input": lambda: aten.convolution_backward(gy, x, w, None, st, pads, dil, False, [0, 0],
                                                                      layer.groups, [True, False, False]),
            }
            for label, fn in fns.items():
                with torch.no_grad():
                    rows = kernels(fn, args.calls)
                total = sum(t for _, _, t in rows)
                choice = torchconv.last_choice() if label.startswith("ours") else ""
                print(f"{name} N{args.batch} tf32 {layout} {label}: {total:.1f} us  {choice}")
                for k, n, t in rows:
                    print(f"    {t:7.2f} us  x{n:.1f}  {k}")


if __name__ == "__main__":
    main()
