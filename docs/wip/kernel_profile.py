"""Session diagnostic: per-kernel device time (profiler, mean over calls) of the GEMM's forward and
grad_input / grad_weight with a trainable weight against a frozen one, N = 32."""
import sys, collections, torch
sys.path.insert(0, "benchmarks")
import torchconv
from suites import RESNET, YOLO
L = {l.name: l for l in RESNET + YOLO}
ops = torch.ops.torchconv
cases = [("R12", "bf16", "nhwc"), ("R9", "bf16", "nhwc"), ("R6", "bf16", "nhwc"), ("Y18", "bf16", "nhwc"),
         ("R12", "tf32", "nchw"), ("R9", "tf32", "nchw"), ("Y18", "tf32", "nchw"), ("R12", "tf32", "nhwc"),
         ("R10", "bf16", "nhwc"), ("R7", "bf16", "nhwc")]
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
for name, prec, lay in cases:
    l = L[name]
    torch.backends.cudnn.allow_tf32 = prec == "tf32"
    fmt = torch.channels_last if lay == "nhwc" else torch.contiguous_format
    x = torch.randn(32, l.C, l.HW, l.HW, device="cuda").to(DT[prec]).contiguous(memory_format=fmt)
    w = (torch.randn(l.K, l.C, l.R, l.R, device="cuda") / (l.C * l.R * l.R) ** .5).to(DT[prec]).contiguous(memory_format=fmt)
    gy = torch.randn(32, l.K, l.out_hw(), l.out_w(), device="cuda").to(DT[prec]).contiguous(memory_format=fmt)
    conv = ([l.stride] * 2, list(l.pads), [1, 1], 1)
    for wk in ("frozen", "trainable"):
        w.requires_grad_(wk == "trainable")
        for pas, fn in (("fwd", lambda: ops.conv2d_gemm(x, w, None, *conv)),
                        ("gi", lambda: ops.conv2d_gemm_backward(gy, x, w, *conv, [True, False, False])),
                        ("gw", lambda: ops.conv2d_gemm_backward(gy, x, w, *conv, [False, True, False]))):
            with torch.no_grad():
                for _ in range(3): fn()
                torch.cuda.synchronize()
                reps = 20
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(reps): fn()
                    torch.cuda.synchronize()
            agg = collections.defaultdict(float)
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    agg[e.name.split("<")[0].split("(")[0][:40]] += e.device_time / reps
            tot = sum(agg.values())
            parts = " ".join(f"{k}={v:.1f}" for k, v in sorted(agg.items(), key=lambda kv: -kv[1]))
            print(f"AB {name:4s} {prec} {lay} {wk:9s} {pas}: total {tot:7.1f} us | {parts}")
