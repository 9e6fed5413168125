"""Time torchconv's algorithms against cuDNN (or ATen on a CPU) in the same process, on the same inputs.

    python benchmarks/bench.py --suite resnet,yolo --batch 1,32 --mode fwd,fwdbwd
    python benchmarks/bench.py --suite big --algorithms cudnn,direct
    python benchmarks/bench.py --suite smoke          # CPU smoke run, a few seconds

FP32 comparisons run with torch.backends.cudnn.allow_tf32 = False and cudnn.benchmark = True.
Each time is the median of --reps runs timed with CUDA events after --warmup runs. Results go to
--out-dir as JSON (stable shape: {"meta": {...}, "rows": [...]}) and Markdown.
"""
import argparse
import datetime
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchconv  # noqa: E402
from suites import SUITES  # noqa: E402
from torchconv.tuning import time_ms  # noqa: E402

FP32_PEAK_TFLOPS = 64.6  # measured FFMA peak of the H100 (shared/reference); None on other devices
FULL_REFERENCE_MAX_FLOPS = 2e10  # above this, rel_err is checked on a window of output rows


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default=None, help="comma list of " + ",".join(SUITES) + " (default: resnet,yolo on "
                   "a GPU, smoke on a CPU)")
    p.add_argument("--algorithms", default="cudnn," + ",".join(torchconv.ALGORITHMS),
                   help="comma list; 'cudnn' times the reference library (cuDNN on a GPU, ATen's CPU "
                   "convolution, reported as 'aten', on a CPU); 'algo:variant' picks a variant "
                   "(e.g. winograd:staged, see torchconv.variants)")
    p.add_argument("--batch", default=None, help="comma list of N (default 1,32 on a GPU, 2 on a CPU)")
    p.add_argument("--mode", default="fwd,fwdbwd", help="fwd and/or fwdbwd")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=25)
    p.add_argument("--profile", action="store_true", help="also report per-kernel GPU time under torch.profiler")
    p.add_argument("--stages", action="store_true",
                   help="per row, the time of each of our kernels (the algorithm's stages) under torch.profiler")
    p.add_argument("--tune", action="store_true",
                   help="torchconv.set_tuning(True): CSG times its candidate configs and splits per shape")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    p.add_argument("--tag", default=None, help="file name stem (default: suites-device-date)")
    return p.parse_args(argv)


def timer(device, warmup, reps):
    """Returns time(fn) -> median milliseconds (torchconv.tuning.time_ms: CUDA events on a GPU)."""
    return lambda fn: time_ms(fn, device, reps, warmup)


def split_spec(spec):
    """'winograd:staged' -> ('winograd', 'staged'); 'direct' -> ('direct', None)."""
    algo, _, variant = spec.partition(":")
    return algo, variant or None


class use_variant:
    """Runs the body with `algorithm` set to `variant` (no-op for None), restoring the previous one."""

    def __init__(self, algorithm, variant):
        self.algorithm, self.variant, self.old = algorithm, variant, None

    def __enter__(self):
        if self.variant:
            self.old = torchconv.get_variant(self.algorithm)
            torchconv.set_variant(self.algorithm, self.variant)

    def __exit__(self, *exc):
        if self.variant:
            torchconv.set_variant(self.algorithm, self.old)


def short_kernel_name(name):
    """'void ns::(anonymous namespace)::winograd_fused_forward_kernel<float, ...>(...)' -> 'winograd_fused_forward_kernel'."""
    head = name.replace("(anonymous namespace)::", "").split("<", 1)[0].split("(", 1)[0]
    return head.rsplit("::", 1)[-1].replace("void ", "").strip() or name[:60]


def kernel_times(fn, device, reps=10):
    """µs per call of each GPU kernel (operators on a CPU) that fn launches, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.type == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    for _ in range(3):
        fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            fn()
        sync()
    kernels = {}
    for e in prof.key_averages():
        t = e.self_device_time_total if on_gpu else e.self_cpu_time_total
        if t > 0 and (not on_gpu or e.device_type.name == "CUDA"):
            kernels[e.key] = t / reps
    return dict(sorted(kernels.items(), key=lambda kv: -kv[1]))


def reference_output(x, w, layer):
    """float64 reference for the whole output, or for a window of output rows when the full one is
    too expensive. Returns (reference, slice of our output it covers)."""
    n = x.shape[0]
    if layer.flops(n) <= FULL_REFERENCE_MAX_FLOPS:
        return F.conv2d(x.double(), w.double(), None, layer.stride, layer.pad), (slice(None),) * 4
    rows = 8
    ho = layer.out_hw()
    y0 = ho // 2
    # Input rows read by output rows y0 .. y0 + rows - 1, with the zero padding made explicit.
    xp = F.pad(x, [layer.pad] * 4)
    lo = y0 * layer.stride
    hi = (y0 + rows - 1) * layer.stride + layer.R
    ref = F.conv2d(xp[:, :, lo:hi].double(), w.double(), None, layer.stride, 0)
    return ref, (slice(None), slice(None), slice(y0, y0 + rows), slice(None))


def rel_err(out, ref_and_window):
    ref, window = ref_and_window
    o = out[window].double()
    return ((o - ref).norm() / ref.norm()).item()


def environment(device):
    meta = {
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "fp32_peak_tflops": FP32_PEAK_TFLOPS if device.type == "cuda" else None,
        "torchconv": torchconv.__version__,
        "reference": "cudnn" if device.type == "cuda" else "aten-cpu",
        "tuning": torchconv.get_tuning(),
    }
    return meta


def bench_layer(layer, n, algorithms, modes, dtype, device, time_fn, log, stages=False):
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(n, layer.C, layer.HW, layer.HW, generator=gen, dtype=dtype).to(device)
    w = (torch.randn(layer.K, layer.C, layer.R, layer.R, generator=gen, dtype=dtype) / (layer.C * layer.R**2) ** 0.5).to(device)
    ho = layer.out_hw()
    gy = torch.randn(n, layer.K, ho, ho, generator=gen, dtype=dtype).to(device)
    conv = (layer.stride, layer.pad, 1, 1)
    ref = None
    rows = []
    flops = layer.flops(n)

    def runner(algo, mode):
        conv_fn = (lambda xx, ww: F.conv2d(xx, ww, None, *conv)) if algo == "cudnn" else (
            lambda xx, ww: torchconv.conv2d(xx, ww, None, *conv, algorithm=algo))
        if mode == "fwd":
            return lambda: conv_fn(x, w)
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        return lambda: torch.autograd.grad(conv_fn(xg, wg), (xg, wg), gy)

    for mode in modes:
        mode_flops = flops * (3 if mode == "fwdbwd" else 1)
        cudnn_ms = time_fn(runner("cudnn", mode))
        for spec in algorithms:
            algo, variant = split_spec(spec)
            workspace, stage_us, plan = None, None, None
            if algo == "cudnn":
                ms, err = cudnn_ms, None
            else:
                if algo not in torchconv.available_algorithms(device.type):
                    log(f"  {layer.name} N={n} {algo}: no {device.type} kernel in this build, skipped")
                    continue
                if torchconv.unsupported_reason(algo, x, w, (layer.stride,) * 2, (1, 1)):
                    continue
                if ref is None:
                    ref = reference_output(x, w, layer)
                with use_variant(algo, variant):
                    err = rel_err(torchconv.conv2d(x, w, None, *conv, algorithm=algo), ref)
                    workspace = torchconv._C.last_workspace_bytes()
                    fn = runner(algo, mode)
                    if mode == "fwdbwd":
                        fn()
                        workspace = max(workspace, torchconv._C.last_workspace_bytes())
                    # CSG's config and split, or the direct tile config, per pass.
                    plan = torchconv._C.last_choice() if algo in ("csg", "direct") else None
                    ms = time_fn(fn)
                    if stages:
                        # Instantiations of one kernel template (e.g. a forward and a grad_input tile
                        # config) share a short name: their times add up.
                        stage_us = {}
                        for k, v in kernel_times(fn, device).items():
                            name = short_kernel_name(k)
                            stage_us[name] = round(stage_us.get(name, 0.0) + v, 2)
            tflops = mode_flops / (ms * 1e-3) / 1e12
            label = spec if algo != "cudnn" or device.type == "cuda" else "aten"
            rows.append(dict(suite=None, layer=layer.name, N=n, C=layer.C, K=layer.K, H=layer.HW, W=layer.HW,
                             R=layer.R, S=layer.R, stride=layer.stride, padding=layer.pad, algorithm=label,
                             config=variant or "default", mode=mode, dtype=str(dtype).replace("torch.", ""), ms=ms,
                             tflops=tflops, cudnn_ms=cudnn_ms, ratio=cudnn_ms / ms, rel_err=err,
                             workspace_bytes=workspace, stages_us=stage_us, plan=plan))
            log(f"  {layer.name:>5} N={n:<3} {mode:<6} {spec:<15} {ms:9.4f} ms {tflops:7.2f} TFLOP/s "
                f"x{cudnn_ms / ms:5.2f} vs ref" + (f"  err {err:.1e}" if err is not None else "")
                + (f"  ws {workspace / 2**20:.1f} MiB" if workspace else "")
                + (f"  plan {plan}" if plan else "")
                + (f"  stages {stage_us}" if stage_us else ""))
    return rows


def profile_layer(layer, n, algorithms, dtype, device):
    """Per-kernel time (µs per forward) of each algorithm and the reference library on one layer,
    from torch.profiler: GPU kernels on a GPU, operators on a CPU."""
    x = torch.randn(n, layer.C, layer.HW, layer.HW, dtype=dtype, device=device)
    w = torch.randn(layer.K, layer.C, layer.R, layer.R, dtype=dtype, device=device)
    conv = (layer.stride, layer.pad, 1, 1)
    out = {}
    for spec in algorithms:
        algo, variant = split_spec(spec)
        if algo != "cudnn" and (algo not in torchconv.available_algorithms(device.type)
                                or torchconv.unsupported_reason(algo, x, w, (layer.stride,) * 2, (1, 1))):
            continue
        fn = (lambda: F.conv2d(x, w, None, *conv)) if algo == "cudnn" else (
            lambda: torchconv.conv2d(x, w, None, *conv, algorithm=algo))
        label = spec if algo != "cudnn" or device.type == "cuda" else "aten"
        with use_variant(algo, variant):
            out[label] = kernel_times(fn, device)
    return out


def write_markdown(path, meta, rows, profiles):
    lines = [f"# torchconv benchmark — {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, CUDA {meta['cuda']}, {meta['date']}; "
             f"FP32 peak {meta['fp32_peak_tflops']} TFLOP/s; reference library: {meta['reference']}; "
             "ratio = reference ms / our ms (> 1: we are faster).", "",
             "| suite | layer | N | C | K | HW | R | s | mode | algorithm | ms | TFLOP/s | % peak | ref ms | ratio | rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    peak = meta["fp32_peak_tflops"]
    for r in rows:
        pct = f"{100 * r['tflops'] / peak:.1f}" if peak else "-"
        err = f"{r['rel_err']:.1e}" if r["rel_err"] is not None else "-"
        lines.append(f"| {r['suite']} | {r['layer']} | {r['N']} | {r['C']} | {r['K']} | {r['H']} | {r['R']} | "
                     f"{r['stride']} | {r['mode']} | {r['algorithm']} | {r['ms']:.4f} | {r['tflops']:.2f} | {pct} | "
                     f"{r['cudnn_ms']:.4f} | {r['ratio']:.2f} | {err} |")
    staged = [r for r in rows if r.get("stages_us") or r.get("workspace_bytes") or r.get("plan")]
    if staged:
        lines += ["", "## Workspace and time per stage (µs per call, torch.profiler)", "",
                  "| layer | N | mode | algorithm | workspace MiB | plan | stages |", "|---|---|---|---|---|---|---|"]
        for r in staged:
            st = "; ".join(f"{k} {v:.1f}" for k, v in (r.get("stages_us") or {}).items())
            ws = (r.get("workspace_bytes") or 0) / 2**20
            lines.append(f"| {r['layer']} | {r['N']} | {r['mode']} | {r['algorithm']} | {ws:.1f} | "
                         f"{r.get('plan') or '-'} | {st} |")
    if profiles:
        lines += ["", "## Per-kernel time (µs per forward, torch.profiler: GPU kernels on a GPU, operators on a CPU)", ""]
        for key, per_algo in profiles.items():
            lines.append(f"### {key}")
            for algo, kernels in per_algo.items():
                top = "; ".join(f"`{k[:60]}` {v:.1f}" for k, v in list(kernels.items())[:4])
                lines.append(f"- **{algo}**: total {sum(kernels.values()):.1f} µs — {top}")
            lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    if args.tune:
        torchconv.set_tuning(True)
    suites = (args.suite or ("resnet,yolo" if on_gpu else "smoke")).split(",")
    batches = [int(b) for b in (args.batch or ("1,32" if on_gpu else "2")).split(",")]
    algorithms = [a for a in args.algorithms.split(",") if a]
    for spec in algorithms:
        a, variant = split_spec(spec)
        if a != "cudnn" and a not in torchconv.ALGORITHMS:
            raise SystemExit(f"unknown algorithm {a!r}")
        if variant and variant not in torchconv.variants(a):
            raise SystemExit(f"unknown variant {variant!r} of {a!r} (known: {torchconv.variants(a)})")
    modes = args.mode.split(",")
    dtype = getattr(torch, args.dtype)
    time_fn = timer(device, args.warmup, args.reps)
    meta = environment(device)
    print(f"# {meta['gpu']} | torch {meta['torch']} | cuDNN {meta['cudnn']} | CUDA {meta['cuda']}", flush=True)

    rows, profiles = [], {}
    for suite in suites:
        for layer in SUITES[suite]:
            for n in ([layer.N] if layer.N else batches):
                for row in bench_layer(layer, n, algorithms, modes, dtype, device, time_fn,
                                       lambda s: print(s, flush=True), stages=args.stages):
                    row["suite"] = suite
                    rows.append(row)
                if args.profile:
                    profiles[f"{suite}/{layer.name}/N{n}"] = profile_layer(layer, n, algorithms, dtype, device)

    os.makedirs(args.out_dir, exist_ok=True)
    stem = args.tag or f"{'-'.join(suites)}-{device.type}-{meta['date'][:10]}"
    with open(os.path.join(args.out_dir, stem + ".json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "profile": profiles or None}, f, indent=1)
    write_markdown(os.path.join(args.out_dir, stem + ".md"), meta, rows, profiles)
    print(f"wrote {os.path.join(args.out_dir, stem)}.json/.md ({len(rows)} rows)")
    return rows


if __name__ == "__main__":
    main()
