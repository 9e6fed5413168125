"""Session diagnostic: per-kernel device time (profiler, mean over calls) of the GEMM's passes, N = 32,
a trainable weight (Wt re-laid every call) and a frozen one: grad_input of the suite's strided 3x3
layers (the phases' launch), and the passes that end through clusters (R12 forward, grad_weight)."""
import collections
import sys

import torch

sys.path.insert(0, "benchmarks")
import torchconv  # noqa: E402
from suites import RESNET  # noqa: E402

LAYERS = {l.name: l for l in RESNET}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
CASES = [(name, precision, layout, ("gi",)) for name in ("R4", "R7", "R10")
         for precision, layout in (("bf16", "nhwc"), ("fp16", "nhwc"), ("tf32", "nchw"), ("tf32", "nhwc"))]
CASES += [("R12", "bf16", "nhwc", ("fwd", "gw")), ("R10", "bf16", "nhwc", ("gw",)), ("R12", "tf32", "nchw", ("gw",))]
ops = torch.ops.torchconv
for name, precision, layout, passes in CASES:
    l = LAYERS[name]
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    dtype = DTYPES[precision]
    x = torch.randn(32, l.C, l.HW, l.HW, device="cuda").to(dtype).contiguous(memory_format=fmt)
    w = (torch.randn(l.K, l.C, l.R, l.R, device="cuda") / (l.C * l.R * l.R) ** .5).to(dtype).contiguous(memory_format=fmt)
    gy = torch.randn(32, l.K, l.out_hw(), l.out_w(), device="cuda").to(dtype).contiguous(memory_format=fmt)
    conv = ([l.stride] * 2, list(l.pads), [1, 1], 1)
    calls = {"fwd": lambda: ops.conv2d_gemm(x, w, None, *conv),
             "gi": lambda: ops.conv2d_gemm_backward(gy, x, w, *conv, [True, False, False]),
             "gw": lambda: ops.conv2d_gemm_backward(gy, x, w, *conv, [False, True, False])}
    for weights, pass_ in [(wk, p) for p in passes for wk in (("frozen", "trainable") if p != "gw" else ("trainable",))]:
        w.requires_grad_(weights == "trainable")
        fn = calls[pass_]
        with torch.no_grad():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            reps = 20
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(reps):
                    fn()
                torch.cuda.synchronize()
        per_kernel = collections.defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per_kernel[e.name.split("<")[0].split("(")[0].replace("void torchconv::cuda::", "")[:40]] += e.device_time / reps
        parts = " ".join(f"{k}={v:.1f}" for k, v in sorted(per_kernel.items(), key=lambda kv: -kv[1]))
        print(f"AB {name:4s} {precision} {layout} {weights:9s} {pass_}: total {sum(per_kernel.values()):7.1f} us "
              f"[{torchconv.last_choice()}] | {parts}", flush=True)
