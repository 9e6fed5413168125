"""Each pass of a convolution apart -- forward, grad_input, grad_weight -- ours against cuDNN at the
same precision and memory format (cudnn.benchmark on; fp32 = TF32 off), by the device's time alone
(torchconv.timing's device-time rounds: the host queues the calls behind a sleep kernel, so launch
and dispatch costs are left out). On a CPU (a smoke run) the reference is ATen's CPU convolution and
the times are wall clock.

A diagnostic for the algorithms' rules: which pass of a layer holds a forward+backward ratio. The
default suite, `pointwise`, is the 1x1 layers of MobileNetV3-Large and EfficientNet-B0 at batch 32
(7x7 and 14x14 planes, squeeze-and-excitation's 1x1 planes, few channels on 56x56 and 112x112) and
ResNet-50's two 56x56 1x1 layers; --suite takes the benchmark suites too (resnet, yolo, winograd,
...). Each pass is timed on the operators directly, with the configs our rules picked
(torchconv.last_choice); an algorithm that cannot run a layer (Winograd on a 1x1 layer) has no row
for it. Each layer with a frozen weight (the GEMM's re-laid filter matrix, cached as in inference)
and/or a trainable one (read in place, as in a training step; the operators run under
torch.no_grad(), so no graph is recorded). One result file per suite and GPU, rewritten in place: a run's rows
replace the file's rows of the same layer, precision, layout, weights, batch, pass and contender.

    python benchmarks/pass_times.py --algorithms gemm,csg
    python benchmarks/pass_times.py --suite resnet,yolo --precision tf32,bf16 --layout nchw,nhwc \
        --algorithms gemm,winograd --weights trainable
    python benchmarks/pass_times.py --suite resnet --layers R9,R12 --precision bf16 --layout nhwc \
        --algorithms gemm --configs gemm:wgmma-large,gemm:wgmma-small --out-dir /tmp/sweep
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchconv  # noqa: E402
from bench import PRECISION_DTYPE, environment, geomean, gpu_slug  # noqa: E402
from merge_results import merge_rows  # noqa: E402
from suites import SUITES, Layer  # noqa: E402
from torchconv import timing  # noqa: E402

# (name, C, K, H=W, bias): 1x1 stride-1 layers.
LAYERS = [
    ("mbv3-160-960@7", 160, 960, 7, False),
    ("mbv3-960-160@7", 960, 160, 7, False),
    ("mbv3-672-160@7", 672, 160, 7, False),
    ("mbv3-112-672@14", 112, 672, 14, False),
    ("mbv3-80-184@14", 80, 184, 14, False),
    ("mbv3-184-80@14", 184, 80, 14, False),
    ("mbv3-40-120@28", 40, 120, 28, False),
    ("mbv3-24-72@56", 24, 72, 56, False),
    ("mbv3-se-168-672@1", 168, 672, 1, True),
    ("mbv3-se-672-168@1", 672, 168, 1, True),
    ("mbv3-se-32-120@1", 32, 120, 1, True),
    ("effb0-se-28-672@1", 28, 672, 1, True),
    ("effb0-240-80@14", 240, 80, 14, False),
    ("effb0-144-24@56", 144, 24, 56, False),
    ("effb0-32-16@112", 32, 16, 112, False),
    ("r50-256-64@56", 256, 64, 56, False),
    ("r50-64-256@56", 64, 256, 56, False),
]
# The pointwise suite as layers, and which of them carry a bias.
POINTWISE = [Layer(name, k, c, hw, 1) for name, c, k, hw, _ in LAYERS]
BIASED = {name for name, *_, bias in LAYERS if bias}
PASSES = ("forward", "grad_input", "grad_weight")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="pointwise", help="pointwise, or a comma list of " + ", ".join(SUITES))
    p.add_argument("--precision", default="fp32", help="comma list of fp32, tf32, fp16, bf16")
    p.add_argument("--layout", default="nchw", help="comma list of nchw, nhwc")
    p.add_argument("--algorithms", default="gemm,csg")
    p.add_argument("--configs", default="",
                   help="comma list of algorithm:config contenders, each pass run with that tile config forced "
                        "(torchconv.set_config; forced configs run unsplit), e.g. gemm:wgmma-large,gemm:wgmma-small")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--layers", default=None, help="comma list of layer names (default: all)")
    p.add_argument("--weights", default="frozen,trainable", help="frozen and/or trainable")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    return p.parse_args(argv)


def pass_calls(forward, backward, x, w, b, gy, conv):
    """{pass: callable} for one contender: the forward operator and the backward one under each mask."""
    calls = {"forward": lambda: forward(x, w, b, *conv)}
    for i, name in enumerate(PASSES[1:]):
        mask = [i == 0, i == 1, False]
        calls[name] = lambda mask=mask: backward(gy, x, w, *conv, mask)
    return calls


def forced(algorithm, config, fn):
    """fn with `algorithm`'s tile config forced for its call (the rule's again after it)."""
    def run():
        torchconv.set_config(algorithm, config)
        try:
            return fn()
        finally:
            torchconv.set_config(algorithm, "")
    return run


def reference_name(device):
    return "cudnn" if device.type == "cuda" else "aten"


def suite_layers(suite):
    """[(suite name, Layer)] of a --suite value."""
    if suite == "pointwise":
        return [("pointwise", layer) for layer in POINTWISE]
    return [(name, layer) for name in suite.split(",") for layer in SUITES[name]]


def bench_layer(suite, layer, args, device, weights, precision, layout):
    dtype = PRECISION_DTYPE[precision]
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    n = layer.N or args.batch
    gen = torch.Generator(device=device).manual_seed(0)
    draw = lambda *shape: torch.randn(*shape, device=device, generator=gen).to(dtype)
    x = draw(n, layer.C, layer.HW, layer.HW).contiguous(memory_format=fmt)
    fan_in = layer.C // layer.groups * layer.R * layer.kw
    w = (draw(layer.K, layer.C // layer.groups, layer.R, layer.kw) / fan_in ** 0.5).contiguous(memory_format=fmt)
    w.requires_grad_(weights == "trainable")
    b = draw(layer.K) if layer.name in BIASED else None
    gy = draw(n, layer.K, layer.out_hw(), layer.out_w()).contiguous(memory_format=fmt)
    stride, pads, dilation = [layer.stride] * 2, list(layer.pads), [layer.dilation] * 2
    conv = (stride, pads, dilation, layer.groups)
    aten = torch.ops.aten
    ref_name = reference_name(device)
    contenders = {ref_name: {
        "forward": lambda: aten.convolution(x, w, b, stride, pads, dilation, False, [0, 0], layer.groups),
        **{name_: (lambda mask=[i == 0, i == 1, False]:
                   aten.convolution_backward(gy, x, w, None, stride, pads, dilation, False, [0, 0], layer.groups,
                                             mask))
           for i, name_ in enumerate(PASSES[1:])}}}
    for algo in args.algorithms.split(","):
        if torchconv.unsupported_reason(algo, x, w, layer.stride, layer.dilation, layer.pads, layer.groups, b):
            continue  # the algorithm's own limits (in C++) refuse this layer: no row
        ops = torch.ops.torchconv
        contenders[algo] = pass_calls(getattr(ops, f"conv2d_{algo}"), getattr(ops, f"conv2d_{algo}_backward"),
                                      x, w, b, gy, conv)
    for spec in filter(None, args.configs.split(",")):
        algo, config = spec.split(":")
        if torchconv.unsupported_reason(algo, x, w, layer.stride, layer.dilation, layer.pads, layer.groups, b):
            continue
        ops = torch.ops.torchconv
        calls = pass_calls(getattr(ops, f"conv2d_{algo}"), getattr(ops, f"conv2d_{algo}_backward"), x, w, b, gy, conv)
        contenders[spec] = {name: forced(algo, config, fn) for name, fn in calls.items()}
    rows = []
    for pass_name in PASSES:
        fns = {algo: calls[pass_name] for algo, calls in contenders.items()}
        choices = {}
        for algo in list(fns):
            if algo != ref_name:
                try:
                    fns[algo]()
                except ValueError:  # a forced config this call cannot run (its clear error): no row
                    if ":" not in algo:
                        raise
                    del fns[algo]
                    continue
                choices[algo] = " ".join(c for c in torchconv.last_choice().split() if c.startswith(pass_name + ":"))
        times = timing.interleaved(fns, device, rounds=args.rounds, reps=args.reps, device_time=True)
        ref = statistics.median(times[ref_name])
        for algo, samples in times.items():
            ratios = [r / o for r, o in zip(times[ref_name], samples)]
            rows.append(dict(suite=suite, layer=layer.name, C=layer.C, K=layer.K, HW=layer.HW, N=n, R=layer.R,
                             S=layer.kw, stride=layer.stride, groups=layer.groups, dilation=layer.dilation,
                             bias=b is not None, weights=weights, precision=precision, layout=layout,
                             pass_=pass_name, algorithm=algo, us=statistics.median(samples) * 1e3,
                             cudnn_us=ref * 1e3, ratio=statistics.median(ratios), ratio_min=min(ratios),
                             ratio_max=max(ratios), choice=choices.get(algo, "")))
    return rows


def write_markdown(path, meta, rows):
    ref_name = "cudnn" if meta["reference"] == "cudnn" else "aten"
    algos = [a for a in dict.fromkeys(r["algorithm"] for r in rows) if a != ref_name]
    suites = ", ".join(dict.fromkeys(k[0] for k in map(group_key, rows)))
    lines = [f"# Per-pass device time — {suites} — {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, CUDA {meta['cuda']}, {meta['date']}. "
             f"Each pass timed alone on the operators by the device's time (the host queues behind a sleep "
             f"kernel); {ref_name} at the row's precision and memory format (fp32 = TF32 off, tf32 = PyTorch's "
             f"default). us = median over rounds; ratio = {ref_name} / ours [min-max over rounds]; choice = the "
             "config our rule picked (torchconv.last_choice).", "",
             "## Geomean ratio per pass", "",
             "| pass | suite | precision | layout | weights | N | algorithm | geomean ratio | layers |",
             "|---|---|---|---|---|---|---|---|---|"]
    # Rows of each batch apart: a layer's ratio moves with the batch.
    batch_key = lambda r: group_key(r) + (str(r["N"]),)
    for pass_name in PASSES:
        for k in dict.fromkeys(map(batch_key, rows)):
            for a in algos:
                ratios = [r["ratio"] for r in rows
                          if r["pass_"] == pass_name and batch_key(r) == k and r["algorithm"] == a]
                if ratios:
                    lines.append(f"| {pass_name} | {' | '.join(k)} | {a} | {geomean(ratios):.2f}x | {len(ratios)} |")
    lines.append("")
    # A table line per layer, precision, layout, weights and batch: its rows by algorithm.
    lines_of = {}
    for r in rows:
        line = (r["layer"],) + group_key(r)[1:] + (r["N"],)
        lines_of.setdefault(r["pass_"], {}).setdefault(line, {})[r["algorithm"]] = r
    for pass_name in PASSES:
        lines += [f"## {pass_name}", "",
                  f"| layer | precision | layout | weights | N | {ref_name} us | " +
                  " | ".join(f"{a} us | {a} ratio | {a} choice" for a in algos) + " |",
                  "|---|---|---|---|---|---|" + "---|---|---|" * len(algos)]
        for k, by in lines_of.get(pass_name, {}).items():
            cells = [f"{by[a]['us']:.1f} | {by[a]['ratio']:.2f} [{by[a]['ratio_min']:.2f}-{by[a]['ratio_max']:.2f}] | "
                     f"`{by[a]['choice']}`" if a in by else "- | - | -" for a in algos]
            lines.append(f"| {' | '.join(k[:-1])} | {k[-1]} | {by[ref_name]['us']:.1f} | " +
                         " | ".join(cells) + " |")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    keep = set(args.layers.split(",")) if args.layers else None
    meta = environment(device)
    rows = []
    with torch.no_grad():
        for precision in args.precision.split(","):
            # Both sides follow PyTorch's switch: ours reads it in C++ (csrc/precision.h).
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
            for layout in args.layout.split(","):
                for weights in args.weights.split(","):
                    for suite, layer in suite_layers(args.suite):
                        if keep is None or layer.name in keep:
                            new = bench_layer(suite, layer, args, device, weights, precision, layout)
                            rows += new
                            print(precision, layout, weights, layer.name,
                                  " ".join(f"{r['pass_']}:{r['algorithm']} {r['us']:.1f}" for r in new), flush=True)
    os.makedirs(args.out_dir, exist_ok=True)
    suite_part = "" if args.suite == "pointwise" else args.suite.replace(",", "-") + "-"
    stem = os.path.join(args.out_dir, f"pass-times-{suite_part}{gpu_slug(meta)}")
    # Rewritten in place: the run's rows replace the file's rows of the same layer, precision, layout,
    # weights, batch, pass and contender; the others stay.
    merged = merge_rows(stem + ".json", meta, rows, write_markdown,
                        extra={"argv": sys.argv[1:] if argv is None else list(argv)}, key=row_key)
    print(f"wrote {stem}.json/.md ({len(rows)} rows of {len(merged)})")
    return rows


# Rows written before suites, precisions, layouts and weights were told apart: the pointwise suite's,
# FP32 NCHW, frozen weights.
ROW_DEFAULTS = {"suite": "pointwise", "precision": "fp32", "layout": "nchw", "weights": "frozen"}


def group_key(row):
    """The (suite, precision, layout, weights) a row belongs to."""
    return tuple(row.get(k, default) for k, default in ROW_DEFAULTS.items())


def row_key(row):
    """What a row measures: a rerun's row of the same key replaces it."""
    suite, precision, layout, weights = group_key(row)
    return (suite, row["layer"], precision, layout, weights, row["N"], row["pass_"], row["algorithm"])


if __name__ == "__main__":
    main()
