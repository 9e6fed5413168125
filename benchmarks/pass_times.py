"""Each pass of a convolution apart -- forward, grad_input, grad_weight -- ours against cuDNN FP32
(TF32 off, cudnn.benchmark on), by the device's time alone (torchconv.timing's device-time rounds:
the host queues the calls behind a sleep kernel, so launch and dispatch costs are left out). On a
CPU (a smoke run) the reference is ATen's CPU convolution and the times are wall clock.

A diagnostic for the GEMM's tile rules: the 1x1 layers of MobileNetV3-Large and EfficientNet-B0 at
batch 32 (7x7 and 14x14 planes, squeeze-and-excitation's 1x1 planes, few channels on 56x56 and
112x112) and ResNet-50's two 56x56 1x1 layers, each pass timed on the operators directly, with the
configs our rules picked (torchconv.last_choice). Each layer twice (--weights): with a frozen weight
(the GEMM's re-laid filter matrix, cached as in inference) and a trainable one (read in place, as in
a training step; the operators run under torch.no_grad(), so no graph is recorded). One result file
per GPU, rewritten in place.

    python benchmarks/pass_times.py --algorithms gemm,csg
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchconv  # noqa: E402
from bench import environment, gpu_slug  # noqa: E402
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
PASSES = ("forward", "grad_input", "grad_weight")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algorithms", default="gemm,csg")
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


def reference_name(device):
    return "cudnn" if device.type == "cuda" else "aten"


def bench_layer(layer, args, device, weights):
    name, c, k, hw, bias = layer
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(args.batch, c, hw, hw, device=device, generator=gen)
    w = (torch.randn(k, c, 1, 1, device=device, generator=gen) / c ** 0.5).requires_grad_(weights == "trainable")
    b = torch.randn(k, device=device, generator=gen) if bias else None
    gy = torch.randn(args.batch, k, hw, hw, device=device, generator=gen)
    conv = ((1, 1), (0, 0), (1, 1), 1)
    aten = torch.ops.aten
    contenders = {reference_name(device): {
        "forward": lambda: aten.convolution(x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
        **{name_: (lambda mask=[i == 0, i == 1, False]:
                   aten.convolution_backward(gy, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask))
           for i, name_ in enumerate(PASSES[1:])}}}
    for algo in args.algorithms.split(","):
        ops = torch.ops.torchconv
        contenders[algo] = pass_calls(getattr(ops, f"conv2d_{algo}"), getattr(ops, f"conv2d_{algo}_backward"),
                                      x, w, b, gy, conv)
    rows = []
    for pass_name in PASSES:
        fns = {algo: calls[pass_name] for algo, calls in contenders.items()}
        choices = {}
        ref_name = reference_name(device)
        for algo in fns:
            if algo != ref_name:
                fns[algo]()
                choices[algo] = " ".join(c for c in torchconv.last_choice().split() if c.startswith(pass_name + ":"))
        times = timing.interleaved(fns, device, rounds=args.rounds, reps=args.reps, device_time=True)
        ref = statistics.median(times[ref_name])
        for algo, samples in times.items():
            ratios = [r / o for r, o in zip(times[ref_name], samples)]
            rows.append(dict(layer=name, C=c, K=k, HW=hw, N=args.batch, R=1, S=1, stride=1, groups=1, dilation=1,
                             bias=bias, weights=weights, precision="fp32", layout="nchw", pass_=pass_name, algorithm=algo,
                             us=statistics.median(samples) * 1e3, cudnn_us=ref * 1e3,
                             ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios),
                             choice=choices.get(algo, "")))
    return rows


def write_markdown(path, meta, rows):
    ref_name = "cudnn" if meta["reference"] == "cudnn" else "aten"
    algos = [a for a in dict.fromkeys(r["algorithm"] for r in rows) if a != ref_name]
    lines = [f"# Per-pass device time of 1x1 layers — {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, CUDA {meta['cuda']}, {meta['date']}. "
             "FP32 NCHW (TF32 off), batch as listed; each pass timed alone on the operators by the device's "
             f"time (the host queues behind a sleep kernel). us = median over rounds; ratio = {ref_name} / ours "
             "[min-max over rounds]; choice = the config our rule picked (torchconv.last_choice).", ""]
    for pass_name in PASSES:
        lines += [f"## {pass_name}", "",
                  f"| layer | weights | N | {ref_name} us | " +
                  " | ".join(f"{a} us | {a} ratio | {a} choice" for a in algos) + " |",
                  "|---|---|---|---|" + "---|---|---|" * len(algos)]
        # Rows written before the weights were told apart had frozen weights.
        keys = dict.fromkeys((r["layer"], r.get("weights", "frozen")) for r in rows if r["pass_"] == pass_name)
        for layer, weights in keys:
            by = {r["algorithm"]: r for r in rows
                  if r["layer"] == layer and r.get("weights", "frozen") == weights and r["pass_"] == pass_name}
            cells = [f"{by[a]['us']:.1f} | {by[a]['ratio']:.2f} [{by[a]['ratio_min']:.2f}-{by[a]['ratio_max']:.2f}] | "
                     f"`{by[a]['choice']}`" for a in algos]
            lines.append(f"| {layer} | {weights} | {by[ref_name]['N']} | {by[ref_name]['us']:.1f} | " +
                         " | ".join(cells) + " |")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    keep = set(args.layers.split(",")) if args.layers else None
    meta = environment(device)
    rows = []
    with torch.no_grad():
        for weights in args.weights.split(","):
            for layer in LAYERS:
                if keep is None or layer[0] in keep:
                    new = bench_layer(layer, args, device, weights)
                    rows += new
                    print(weights, " ".join(f"{r['pass_']}:{r['algorithm']} {r['us']:.1f}" for r in new), flush=True)
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, f"pass-times-{gpu_slug(meta)}")
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "argv": sys.argv[1:] if argv is None else list(argv), "rows": rows}, f, indent=1)
    write_markdown(stem + ".md", meta, rows)
    print(f"wrote {stem}.json/.md ({len(rows)} rows)")
    return rows


if __name__ == "__main__":
    main()
