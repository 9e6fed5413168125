"""Time torchconv's algorithms against cuDNN (or ATen on a CPU) in the same process, on the same inputs.

    python benchmarks/bench.py --suite resnet,yolo --batch 1,32 --mode fwd,fwdbwd
    python benchmarks/bench.py --suite big --algorithms cudnn,direct --mode fwd
    python benchmarks/bench.py --suite smoke          # CPU smoke run, a few seconds
    python benchmarks/bench.py --precision fp16,bf16 --layout nhwc --algorithms cudnn,gemm   # merged in place

Protocol (torchconv.timing): per layer, batch and mode, cuDNN and every algorithm are timed
interleaved -- --rounds rounds of back-to-back calls each (--reps, more for fast layers: --min-round-ms), the
order shuffled per round --
and each row reports the median time over rounds, the median of the per-round ratios cuDNN / ours
(> 1: ours is faster) and their spread (ratio_min, ratio_max; spread_flag when it exceeds 10%).
A time covers the whole call through torchconv.conv2d (host path, autograd for fwdbwd) with warm
caches (no L2 flush). cudnn.benchmark = True. --precision picks what both sides run: fp32 (IEEE:
torch.backends.cudnn.allow_tf32 = False, which our GEMM follows too), tf32 (float32 inputs with
allow_tf32 = True: TF32 tensor cores on both sides), fp16 and bf16 (inputs, weights and outputs in
that dtype). --layout nhwc gives the input, the weight and grad_output in channels_last, as
`model.to(memory_format=torch.channels_last)` does. Every row carries "precision" and "layout";
reduced-precision rows also carry cuDNN's own error ("reference_rel_err") next to ours.

Forward rows are timed twice where --weights asks: "frozen" weights (requires_grad=False: CSG, GEMM
and Winograd serve their filter re-layout from the weight cache; the row says weight_cache: true)
and "trainable" weights under torch.no_grad() (the re-layout runs every call, as it does for a
user's trainable model in evaluation). Forward+backward rows use trainable weights.

Every row is checked against a reference: the output, and for fwdbwd also grad_input and
grad_weight (rel_err is the worst of them). The reference is float64 on the same device for
layers up to --full-reference-max-flops; larger layers are checked whole against cuDNN's FP32 result
(which catches a wrong tile anywhere) and on a band of output rows against float64 (row fields
"reference" and "errors").

Results go to --out-dir as JSON ({"meta": {...}, "rows": [...]}) and Markdown, named by --tag
(default: the suites and the GPU), rewritten in place: the run's rows replace the file's rows of the
same suite, precision, layout, batch, mode, weights, layer, algorithm and config, and the others stay
(merge_results.row_key): a run of some algorithms leaves the other algorithms' rows of its layers.
"""
import argparse
import math
import os
import statistics
import sys
import time
import zlib

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchconv  # noqa: E402
from merge_results import load_rows, merge_rows, row_key  # noqa: E402
from suites import SUITES  # noqa: E402
from torchconv.timing import FP32_PEAK_TFLOPS, SPREAD_FLAG, hold_stream, interleaved, time_ms  # noqa: E402
from torchconv.timing import environment as timing_environment  # noqa: E402
# Dense peaks of the H100 SXM by precision (TF32 and FP16/BF16 tensor cores: NVIDIA's figures).
PEAK_TFLOPS = {"fp32": FP32_PEAK_TFLOPS, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0, "fp64": 67.0}

PRECISION_DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                   "fp64": torch.float64}


def compute_peak(precision, layer):
    """The multiply-add peak (TFLOP/s) a layer's roofline takes at `precision`: a depthwise layer (one
    channel per group) has no GEMM for the tensor cores, so at every precision its products run as
    FP32 FMAs. `layer` is a suite layer or a result row (both have C and groups)."""
    c, groups = (layer["C"], layer["groups"]) if isinstance(layer, dict) else (layer.C, layer.groups)
    if groups > 1 and c == groups and precision in ("tf32", "fp16", "bf16"):
        return FP32_PEAK_TFLOPS
    return PEAK_TFLOPS[precision]


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
    p.add_argument("--weights", default="frozen,trainable",
                   help="forward rows: frozen (weight cache may serve) and/or trainable (under no_grad)")
    p.add_argument("--layers", default=None, help="comma list of layer names to keep (default: all)")
    p.add_argument("--dtype", default=None, choices=["float32", "float64"],
                   help="float64: --precision fp64 (kept for old command lines)")
    p.add_argument("--precision", default="fp32", help="comma list of fp32, tf32, fp16, bf16, fp64")
    p.add_argument("--layout", default="nchw", help="comma list of nchw, nhwc")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=5, help="back-to-back calls per contender and round (at least)")
    p.add_argument("--min-round-ms", type=float, default=2.0,
                   help="more reps per round for fast layers, so a round of cuDNN lasts at least this long")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--full-reference-max-flops", type=float, default=1e12,
                   help="forward FLOPs up to which the reference is float64 (else cuDNN FP32)")
    p.add_argument("--profile", action="store_true", help="also report per-kernel GPU time under torch.profiler and the host time per call")
    p.add_argument("--stages", action="store_true",
                   help="per row, the time of each of our kernels (the algorithm's stages) under torch.profiler")
    p.add_argument("--benchmark-mode", action="store_true",
                   help="torchconv.set_benchmark(True): algorithms time their own configs (CSG's plans)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    p.add_argument("--tag", default=None, help="file name stem (default: <suites>-<gpu>)")
    return p.parse_args(argv)


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


def host_us(fn, device, reps=50, rounds=5):
    """µs of host time per call of fn: Python, dispatch, checks, allocation and launches, without the
    GPU's time. On a GPU the stream is held busy meanwhile (a sleep kernel queued first), so no call
    waits for the device and the clock measures only the host's work; under the timing protocol a
    layer whose kernels take less than this is bound by its host path. On a CPU, the call's wall time.
    Median over rounds."""
    on_gpu = device.type == "cuda"
    for _ in range(3):
        fn()
    times = []
    for _ in range(rounds):
        if on_gpu:
            torch.cuda.synchronize(device)
            hold_stream(reps * 200e-6)  # ~200 µs of host time per call
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t0) / reps * 1e6)
    if on_gpu:
        torch.cuda.synchronize(device)
    return statistics.median(times)


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


def copy_bandwidth_tbps(device, nbytes=1 << 30, reps=20):
    """The device's measured copy bandwidth in TB/s (bytes read plus bytes written by a
    device-to-device copy of `nbytes`): the memory side of the roofline, measured on the GPU the
    rows come from."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        dst.copy_(src)
    end.record()
    end.synchronize()
    return round(2 * nbytes * reps / (start.elapsed_time(end) * 1e-3) / 1e12, 2)


def environment(device):
    return {
        **timing_environment(device),
        "hbm_tbps": copy_bandwidth_tbps(device) if device.type == "cuda" else None,
        "reference": "cudnn" if device.type == "cuda" else "aten-cpu",
        "benchmark_mode": torchconv.get_benchmark(),
        "protocol": "interleaved rounds (torchconv.timing): median over rounds of reps calls; ratio = median of "
                    "per-round reference/ours; host path included; warm caches, no L2 flush",
    }


class Layer:
    """One (layer, batch) of a suite with its inputs, drawn from a seed derived from its name."""

    def __init__(self, layer, n, dtype, device, layout="nchw"):
        self.layer, self.n, self.device = layer, n, device
        gen = torch.Generator(device="cpu").manual_seed(zlib.crc32(f"{layer.name}/N{n}".encode()))
        fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        draw = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64 if dtype == torch.float64
                                          else torch.float32)
        self.x = draw(n, layer.C, layer.HW, layer.HW).to(device=device, dtype=dtype).contiguous(memory_format=fmt)
        fan_in = layer.C // layer.groups * layer.R * layer.kw
        self.w = (draw(layer.K, layer.C // layer.groups, layer.R, layer.kw) / fan_in ** 0.5).to(
            device=device, dtype=dtype).contiguous(memory_format=fmt)
        self.gy = draw(n, layer.K, layer.out_hw(), layer.out_w()).to(device=device, dtype=dtype).contiguous(
            memory_format=fmt)
        self.args = (layer.stride, layer.pad, layer.dilation, layer.groups)
        self._reference = {}

    def conv(self, algo):
        if algo == "cudnn":
            return lambda x, w: F.conv2d(x, w, None, *self.args)
        return lambda x, w: torchconv.conv2d(x, w, None, *self.args, algorithm=algo)

    def runner(self, algo, mode, weights):
        conv = self.conv(algo)
        if mode == "fwd" and weights == "frozen":
            return lambda: conv(self.x, self.w)
        if mode == "fwd":
            wt = self.w.detach().requires_grad_()

            def run():
                with torch.no_grad():
                    return conv(self.x, wt)
            return run
        xg, wg = self.x.detach().requires_grad_(), self.w.detach().requires_grad_()
        return lambda: torch.autograd.grad(conv(xg, wg), (xg, wg), self.gy)

    def reference(self, mode, max_flops):
        """(name, output[, grad_input, grad_weight]) of the reference for `mode`: float64 on the
        device, or for layers over `max_flops` cuDNN's FP32 result (which catches a wrong tile
        anywhere; the output's accuracy is then also measured on a float64 band of rows)."""
        if mode not in self._reference:
            use64 = self.device.type == "cpu" or self.layer.flops(self.n) <= max_flops
            dtype = torch.float64 if use64 else torch.float32
            x = self.x.detach().to(dtype).requires_grad_(mode == "fwdbwd")
            w = self.w.detach().to(dtype).requires_grad_(mode == "fwdbwd")
            with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
                out = F.conv2d(x, w, None, *self.args)
                tensors = [out.detach()]
                if mode == "fwdbwd":
                    tensors += [g.detach() for g in torch.autograd.grad(out, (x, w), self.gy.to(dtype))]
            if self.x.dtype in (torch.float16, torch.bfloat16) and not use64:
                tensors = [t.float() for t in tensors]
            self._reference[mode] = ("float64" if use64 else "cudnn-fp32 + float64 rows", tensors)
        return self._reference[mode]

    def output_band64(self, out):
        """Relative error of 8 output rows from the middle of the plane against float64."""
        layer, rows = self.layer, 8
        ho = layer.out_hw()
        y0 = max(0, min(ho - rows, ho // 2))
        lo = y0 * layer.stride
        hi = (y0 + rows - 1) * layer.stride + layer.dilation * (layer.R - 1) + 1
        ph, pw = layer.pads
        xp = F.pad(self.x.double(), [pw, pw, ph, ph])[:, :, lo:hi]
        ref = F.conv2d(xp, self.w.double(), None, (layer.stride, layer.stride), 0, layer.dilation, layer.groups)
        return rel_err(out[:, :, y0:y0 + rows], ref)

    def errors(self, algo, mode, max_flops):
        """({'output': e, 'grad_input': e, 'grad_weight': e, ...}, reference name) of one call."""
        name, ref = self.reference(mode, max_flops)
        x = self.x.detach().requires_grad_(mode == "fwdbwd")
        w = self.w.detach().requires_grad_(mode == "fwdbwd")
        out = self.conv(algo)(x, w)
        errs = {"output": rel_err(out, ref[0])}
        if name != "float64":
            errs["output_rows_float64"] = self.output_band64(out.detach())
        if mode == "fwdbwd":
            gx, gw = torch.autograd.grad(out, (x, w), self.gy)
            errs["grad_input"], errs["grad_weight"] = rel_err(gx, ref[1]), rel_err(gw, ref[2])
        return errs, name


def uses_weight_cache(layer, algo):
    """Whether the algorithm keeps a filter transform for a frozen weight on this layer."""
    torchconv.clear_weight_cache()
    with torch.no_grad():
        layer.conv(algo)(layer.x, layer.w)
    used = torchconv.weight_cache_size() > 0
    torchconv.clear_weight_cache()
    return used


def mode_flops_of(flops, mode):
    return flops * (3 if mode == "fwdbwd" else 1)


def roofline(layer, n, mode, precision, hbm_tbps):
    """(ms, 'memory' or 'compute'): the time the layer's bytes take at the copy bandwidth `hbm_tbps`, or
    its multiply-adds that read the image (padding taps excluded: no kernel needs to run them) at the
    precision's peak, whichever is longer."""
    elem = torch.finfo(PRECISION_DTYPE[precision]).bits // 8
    mem_ms = layer.bytes(n, mode, elem) / (hbm_tbps * 1e12) * 1e3
    fma_ms = mode_flops_of(layer.useful_flops(n), mode) / (compute_peak(precision, layer) * 1e12) * 1e3
    return max(mem_ms, fma_ms), ("memory" if mem_ms >= fma_ms else "compute")


def bench_layer(layer, n, algorithms, modes, weights, args, device, log):
    """Rows for one layer and batch: every algorithm of `algorithms` and cuDNN, interleaved."""
    L = Layer(layer, n, PRECISION_DTYPE[args.precision], device, args.layout)
    flops = layer.flops(n)
    runnable = []
    for spec in algorithms:
        algo, variant = split_spec(spec)
        if algo == "cudnn":
            continue
        if algo not in torchconv.available_algorithms(device.type):
            log(f"  {layer.name} N={n} {algo}: no {device.type} kernel in this build, skipped")
            continue
        reason = torchconv.unsupported_reason(algo, L.x, L.w, layer.stride, layer.dilation, layer.pad, layer.groups)
        if reason:
            continue
        runnable.append((spec, algo, variant))
    rows = []
    kinds = [(m, w) for m in modes for w in (weights if m == "fwd" else ["trainable"])]
    for mode, wkind in kinds:
        fns, info = {"cudnn": L.runner("cudnn", mode, wkind)}, {}
        # cuDNN's own error at this precision, next to ours (the accuracy bar is relative to it).
        reference_errs = L.errors("cudnn", mode, args.full_reference_max_flops)[0] if args.precision != "fp32" else None
        for spec, algo, variant in runnable:
            with use_variant(algo, variant):
                errs, ref_name = L.errors(algo, mode, args.full_reference_max_flops)
                fn = L.runner(algo, mode, wkind)
                fn()
                plan = torchconv.last_choice() if device.type == "cuda" else None
                workspace = torchconv.last_workspace_bytes()
                cached = wkind == "frozen" and uses_weight_cache(L, algo)
            info[spec] = dict(errs=errs, reference=ref_name, plan=plan, workspace=workspace, weight_cache=cached,
                              variant=variant)

            def timed(fn=fn, algo=algo, variant=variant):
                with use_variant(algo, variant):
                    fn()
            fns[spec] = timed if variant else fn
        # Fast layers get more calls per round, so that host jitter averages out within a round.
        reps = max(args.reps, min(100, math.ceil(args.min_round_ms / time_ms(fns["cudnn"], device, 3, args.warmup))))
        per_round = interleaved(fns, device, rounds=args.rounds, reps=reps, warmup=args.warmup,
                                seed=zlib.crc32(f"{layer.name}/{n}/{mode}/{wkind}".encode()))
        cudnn_ms = statistics.median(per_round["cudnn"])
        mode_flops = mode_flops_of(flops, mode)
        label = "cudnn" if device.type == "cuda" else "aten"
        bound_ms, bound = (roofline(layer, n, mode, args.precision, args.hbm_tbps) if device.type == "cuda"
                           else (None, None))
        base = dict(suite=None, layer=layer.name, N=n, C=layer.C, K=layer.K, H=layer.HW, W=layer.HW, R=layer.R,
                    S=layer.kw, stride=layer.stride, padding=layer.pad, dilation=layer.dilation, groups=layer.groups,
                    bound=bound, bound_ms=bound_ms,
                    mode=mode, weights=wkind, dtype=str(PRECISION_DTYPE[args.precision])[6:],
                    precision=args.precision, layout=args.layout,
                    rounds=args.rounds, reps=reps, cudnn_ms=cudnn_ms)
        rows.append(dict(base, algorithm=label, config="default", ms=cudnn_ms,
                         tflops=mode_flops / (cudnn_ms * 1e-3) / 1e12, ratio=1.0, ratio_min=1.0, ratio_max=1.0,
                         spread_flag=False, rel_err=max(reference_errs.values()) if reference_errs else None,
                         errors=reference_errs, weight_cache=False))
        for spec in info:
            i = info[spec]
            ratios = [c / o for c, o in zip(per_round["cudnn"], per_round[spec])]
            ms = statistics.median(per_round[spec])
            ratio = statistics.median(ratios)
            row = dict(base, algorithm=spec, config=i["variant"] or "default", ms=ms,
                       tflops=mode_flops / (ms * 1e-3) / 1e12, ratio=ratio, ratio_min=min(ratios),
                       ratio_max=max(ratios), spread_flag=(max(ratios) - min(ratios)) > SPREAD_FLAG * ratio,
                       rel_err=max(i["errs"].values()), errors=i["errs"], reference=i["reference"],
                       reference_rel_err=max(reference_errs.values()) if reference_errs else None,
                       weight_cache=i["weight_cache"], workspace_bytes=i["workspace"], plan=i["plan"])
            if args.stages:
                stage_us = {}
                with use_variant(*split_spec(spec)):
                    for k, v in kernel_times(L.runner(split_spec(spec)[0], mode, wkind), device).items():
                        name = short_kernel_name(k)
                        stage_us[name] = round(stage_us.get(name, 0.0) + v, 2)
                row["stages_us"] = stage_us
            rows.append(row)
        for r in rows[-(len(info) + 1):]:
            log(f"  {layer.name:>5} N={n:<3} {mode:<6} {wkind:<9} {r['algorithm']:<15} {r['ms']:9.4f} ms "
                f"{r['tflops']:7.2f} TFLOP/s x{r['ratio']:5.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]"
                + ("!" if r["spread_flag"] else "")
                + (f"  {100 * r['bound_ms'] / r['ms']:.0f}% of {r['bound']} bound" if r.get("bound_ms") else "")
                + (f"  err {r['rel_err']:.1e}" if r["rel_err"] is not None else "")
                + (f"  plan {r['plan']}" if r.get("plan") else ""))
    return rows


def profile_layer(layer, n, algorithms, dtype, device):
    """Per-kernel time (µs per forward) of each algorithm and the reference library on one layer,
    from torch.profiler (GPU kernels on a GPU, operators on a CPU), and the host time per forward
    call (host_us). Returns ({label: {kernel: µs}}, {label: host µs})."""
    L = Layer(layer, n, dtype, device)
    out, host = {}, {}
    for spec in algorithms:
        algo, variant = split_spec(spec)
        if algo != "cudnn" and (algo not in torchconv.available_algorithms(device.type) or torchconv.unsupported_reason(
                algo, L.x, L.w, layer.stride, layer.dilation, layer.pad, layer.groups)):
            continue
        label = spec if algo != "cudnn" or device.type == "cuda" else "aten"
        with use_variant(algo, variant):
            fn = L.runner(algo, "fwd", "frozen")
            out[label] = kernel_times(fn, device)
            host[label] = host_us(fn, device)
    return out, host


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def write_markdown(path, meta, rows, profiles, host_times=None):
    lines = [f"# torchconv benchmark — {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, CUDA {meta['cuda']}, {meta['date']}; "
             f"FP32 peak {meta['fp32_peak_tflops']} TFLOP/s; reference library: {meta['reference']}. "
             f"Protocol: {meta['protocol']}. ratio = reference ms / our ms (> 1: we are faster), "
             "[min-max] over rounds, ! = spread over 10%.", ""]
    ours = [r for r in rows if r["algorithm"] not in ("cudnn", "aten")]
    key = lambda r: (r["suite"], r.get("precision", "fp32"), r.get("layout", "nchw"), r["N"], r["mode"], r["weights"],
                     r["algorithm"])
    groups = sorted({key(r) for r in ours})
    if groups:
        lines += ["## Geomean ratio per suite, precision, layout, batch, mode and weights", "",
                  "| suite | precision | layout | N | mode | weights | algorithm | geomean ratio | layers | rows flagged |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for g in groups:
            sel = [r for r in ours if key(r) == g]
            lines.append("| " + " | ".join(str(v) for v in g) + f" | {geomean([r['ratio'] for r in sel]):.2f} | "
                         f"{len(sel)} | {sum(r['spread_flag'] for r in sel)} |")
        lines.append("")
    lines += ["## Rows", "",
              "TFLOP/s counts every filter tap; % of roofline is the layer's bytes at the measured copy bandwidth "
              "or its multiply-adds that read the image (padding taps excluded) at the peak, whichever is longer, "
              "over the row's time.", "",
              "| suite | layer | precision | layout | N | C | K | HW | R x S | s | d | g | mode | weights | algorithm | "
              "weight cache | ms | TFLOP/s | % peak | % of roofline (bound) | ref ms | ratio [min-max] | rel err |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        peak = compute_peak(r.get("precision", "fp32"), r) if meta["fp32_peak_tflops"] else None
        pct = f"{100 * r['tflops'] / peak:.1f}" if peak else "-"
        err = f"{r['rel_err']:.1e}" if r["rel_err"] is not None else "-"
        wc = "-" if r.get("weight_cache") is None else ("yes" if r["weight_cache"] else "no")
        roof = f"{100 * r['bound_ms'] / r['ms']:.0f} ({r['bound']})" if r.get("bound_ms") else "-"
        lines.append(f"| {r['suite']} | {r['layer']} | {r.get('precision', 'fp32')} | {r.get('layout', 'nchw')} | {r['N']} | {r['C']} | {r['K']} | {r['H']} | "
                     f"{r['R']}x{r.get('S', r['R'])} | {r['stride']} | {r.get('dilation', 1)} | {r['groups']} | "
                     f"{r['mode']} | {r['weights']} | {r['algorithm']} | {wc} | "
                     f"{r['ms']:.4f} | {r['tflops']:.2f} | {pct} | {roof} | {r['cudnn_ms']:.4f} | {r['ratio']:.2f} "
                     f"[{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]{'!' if r['spread_flag'] else ''} | {err} |")
    staged = [r for r in rows if r.get("stages_us") or r.get("workspace_bytes") or r.get("plan")]
    if staged:
        lines += ["", "## Workspace, plan and time per stage (µs per call, torch.profiler)", "",
                  "| layer | N | mode | weights | algorithm | workspace MiB | plan | stages |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in staged:
            st = "; ".join(f"{k} {v:.1f}" for k, v in (r.get("stages_us") or {}).items())
            ws = (r.get("workspace_bytes") or 0) / 2**20
            lines.append(f"| {r['layer']} | {r['N']} | {r['mode']} | {r['weights']} | {r['algorithm']} | {ws:.1f} | "
                         f"{r.get('plan') or '-'} | {st} |")
    if profiles:
        lines += ["", "## Per-kernel time (µs per forward, torch.profiler: GPU kernels on a GPU, operators on a CPU)",
                  "", "host: µs of host work per call with the device kept busy (bench.host_us); where it exceeds the "
                  "kernels' total, the protocol's time is the host path's.", ""]
        for key, per_algo in profiles.items():
            lines.append(f"### {key}")
            for algo, kernels in per_algo.items():
                top = "; ".join(f"`{k[:60]}` {v:.1f}" for k, v in list(kernels.items())[:4])
                host = (host_times or {}).get(key, {}).get(algo)
                host = f"host {host:.1f} µs, " if host is not None else ""
                lines.append(f"- **{algo}**: {host}kernels total {sum(kernels.values()):.1f} µs — {top}")
            lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def gpu_slug(meta):
    name = meta["gpu"].lower()
    for key in ("h100", "h200", "a100"):
        if key in name:
            return key
    return "cpu" if name == "cpu" else name.replace(" ", "-")


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    precisions = ["fp64"] if args.dtype == "float64" else args.precision.split(",")
    layouts = args.layout.split(",")
    for p in precisions:
        if p not in PRECISION_DTYPE:
            raise SystemExit(f"unknown precision {p!r} (known: {', '.join(PRECISION_DTYPE)})")
    for lay in layouts:
        if lay not in ("nchw", "nhwc"):
            raise SystemExit(f"unknown layout {lay!r} (known: nchw, nhwc)")
    if args.benchmark_mode:
        torchconv.set_benchmark(True)
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
    weights = args.weights.split(",")
    keep = set(args.layers.split(",")) if args.layers else None
    meta = environment(device)
    print(f"# {meta['gpu']} | torch {meta['torch']} | cuDNN {meta['cudnn']} | CUDA {meta['cuda']}", flush=True)

    rows, profiles, host_times = [], {}, {}
    for precision in precisions:
        for layout in layouts:
            # Both sides follow PyTorch's switch: ours reads it in C++ (csrc/precision.h).
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
            run_args = argparse.Namespace(**{**vars(args), "precision": precision, "layout": layout,
                                             "hbm_tbps": meta["hbm_tbps"]})
            for suite in suites:
                for layer in SUITES[suite]:
                    if keep is not None and layer.name not in keep:
                        continue
                    for n in ([layer.N] if layer.N else batches):
                        print(f"# {precision} {layout}", flush=True)
                        for row in bench_layer(layer, n, algorithms, modes, weights, run_args, device,
                                               lambda s: print(s, flush=True)):
                            row["suite"] = suite
                            rows.append(row)
                        if args.profile:
                            suffix = "" if (precision, layout) == ("fp32", "nchw") else f"/{precision}/{layout}"
                            key = f"{suite}/{layer.name}/N{n}{suffix}"
                            profiles[key], host_times[key] = profile_layer(
                                layer, n, algorithms, PRECISION_DTYPE[precision], device)

    os.makedirs(args.out_dir, exist_ok=True)
    stem = args.tag or f"{'-'.join(suites)}-{gpu_slug(meta)}"
    target = os.path.join(args.out_dir, stem + ".json")
    # The file is rewritten in place, by row: this run's rows replace those it measured anew; rows of
    # other algorithms, layers, precisions or batches stay (merge_results.row_key), and so do the
    # per-kernel profiles of the layers this run did not profile.
    if os.path.exists(target):
        earlier = load_rows(target)
        profiles = {**(earlier.get("profile") or {}), **profiles}
        host_times = {**(earlier.get("host_us") or {}), **host_times}
    merged = merge_rows(target, meta, rows,
                        lambda path, m, r: write_markdown(path, m, r, profiles, host_times),
                        {"argv": sys.argv[1:] if argv is None else list(argv), "profile": profiles or None,
                         "host_us": host_times or None}, key=row_key)
    print(f"wrote {os.path.join(args.out_dir, stem)}.json/.md ({len(rows)} rows of {len(merged)})")
    return rows


if __name__ == "__main__":
    main()
