"""Renders the README's results section from the committed result files, so that no number can stand
in the README that is not in a file under benchmarks/results/.

    python benchmarks/render_readme.py           # rewrite README.md between the markers
    python benchmarks/render_readme.py --check   # exit 1 if README.md is not what the files give
"""
import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
README = os.path.join(ROOT, "README.md")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from merge_results import auto_choice  # noqa: E402
BEGIN, END = "<!-- results:begin (benchmarks/render_readme.py) -->", "<!-- results:end -->"
ALGORITHMS = ("direct", "csg", "gemm", "winograd")
# (mode, weights, N) columns of the suite table
SUITE_COLUMNS = [("fwd", "frozen", 1), ("fwd", "frozen", 32), ("fwd", "trainable", 32), ("fwdbwd", "trainable", 1),
                 ("fwdbwd", "trainable", 32)]


def load(suite):
    """(file name, data) of a suite's result file, the H100's where there is one, else the H200's."""
    for gpu in ("h100", "h200"):
        name = f"{suite}-{gpu}.json"
        path = os.path.join(RESULTS, name)
        if os.path.exists(path):
            with open(path) as f:
                return name, json.load(f)
    return None, None


def load_every_gpu(suite):
    """(file name, data) of each GPU's result file of a suite, the H100's first."""
    found = []
    for gpu in ("h100", "h200"):
        name = f"{suite}-{gpu}.json"
        path = os.path.join(RESULTS, name)
        if os.path.exists(path):
            with open(path) as f:
                found.append((name, json.load(f)))
    return found


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def source(name, data, rows=None):
    """Where a table's rows come from: the file, its GPU and libraries, and the day of its last run, or,
    where the table's `rows` were taken on several days (a file merges runs by row), the first and last."""
    m = data["meta"]
    days = sorted({r["date"][:10] for r in rows or () if r.get("date")})
    when = f"rows taken {days[0]} to {days[-1]}" if len(days) > 1 else days[0] if days else m["date"][:10]
    return f"`benchmarks/results/{name}` ({m['gpu']}, cuDNN {m['cudnn']}, torch {m['torch']}, {when})"


def is_fp32(row):
    return row.get("precision", "fp32") == "fp32" and row.get("layout", "nchw") == "nchw"


def suite_table(name, data):
    rows = [r for r in data["rows"] if r["algorithm"] in ALGORITHMS and is_fp32(r)]
    suites = sorted({r["suite"] for r in rows})
    layers = len({r["layer"] for r in rows})
    head = " | ".join(f"{m} N={n}" + (" (trainable weights)" if m == "fwd" and w == "trainable" else "")
                      for m, w, n in SUITE_COLUMNS)
    lines = [f"Layer suites {' + '.join(suites)} ({layers} layers, FP32): geomean over the layers of the ratio "
             f"cuDNN ms / torchconv ms (> 1: torchconv is faster), each layer's ratio the median of 5 interleaved "
             f"rounds; rows flagged for a spread over 10% in brackets. From {source(name, data, rows)}.", "",
             f"| algorithm | {head} |", "|---|" + "---|" * len(SUITE_COLUMNS)]
    for algo in ALGORITHMS:
        cells = []
        for mode, weights, n in SUITE_COLUMNS:
            sel = [r for r in rows if r["algorithm"] == algo and r["mode"] == mode and r["weights"] == weights
                   and r["N"] == n]
            g = geomean([r["ratio"] for r in sel])
            flagged = sum(r["spread_flag"] for r in sel)
            cells.append("-" if g is None else f"{g:.2f}x" + (f" [{flagged}]" if flagged else ""))
        lines.append(f"| `{algo}` | " + " | ".join(cells) + " |")
    worst = max((r["rel_err"] for r in rows if r.get("rel_err") is not None), default=None)
    if worst is not None:
        lines += ["", f"Largest error of any row against the reference (output, and both gradients for fwd+bwd): "
                      f"{worst:.1e}."]
    return lines


def big_table(name, data):
    rows = [r for r in data["rows"] if r["mode"] == "fwd"]
    peak = data["meta"].get("fp32_peak_tflops")
    lines = [f"Seed 000's large layers (N = 1, C = K = 64, 4096 x 4096, valid), forward. "
             f"From {source(name, data, rows)}.",
             "", "| layer | algorithm | ms | TFLOP/s | % of FP32 peak | cuDNN ms | ratio [min-max] |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["algorithm"] == "cudnn":
            continue
        pct = f"{100 * r['tflops'] / peak:.0f}%" if peak else "-"
        lines.append(f"| {r['layer']} | `{r['algorithm']}` | {r['ms']:.1f} | {r['tflops']:.1f} | {pct} | "
                     f"{r['cudnn_ms']:.1f} | {r['ratio']:.2f}x [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] |")
    return lines


def depthwise_table(name, data):
    direct = [r for r in data["rows"] if r["algorithm"] == "direct"]
    # Forward rows with frozen weights (the weight cache may serve), forward + backward trainable ones.
    rows = [r for r in direct if r.get("precision", "fp32") == "fp32" and r.get("layout", "nchw") == "nchw"
            and r.get("weights", "frozen") == ("frozen" if r["mode"] == "fwd" else "trainable")]
    nhwc = [r for r in direct if r.get("layout", "nchw") == "nhwc"]
    if not rows:  # a file of channels_last rows alone
        return depthwise_nhwc_table(name, data, nhwc) if nhwc else []
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    pick = lambda layer, n, mode: next((r for r in rows if r["layer"] == layer and r["N"] == n  # noqa: E731
                                        and r["mode"] == mode), None)
    cols = [(32, "fwd"), (32, "fwdbwd"), (1, "fwd"), (1, "fwdbwd")]
    lines = [f"Depthwise and small-group layers (the `direct` algorithm's depthwise specialist, FP32): ratio reference "
             f"ms / torchconv ms, and the share of the layer's roofline (its bytes at the measured copy bandwidth or "
             f"its multiply-adds that read the image, padding taps excluded, at the FP32 FMA peak, whichever is "
             f"longer) reached at N = 32. The reference is "
             f"`F.conv2d` in the same process with cuDNN on (`cudnn.benchmark`, TF32 off); on the depthwise layers "
             f"profiled, PyTorch ran its own `at::native` depthwise kernels rather than cuDNN's. "
             f"From {source(name, data, rows)}.", "",
             "| layer | R x S | stride | groups | " + " | ".join(f"{m} N={n}" for n, m in cols)
             + " | % of roofline (fwd N=32) |", "|---|---|---|---|" + "---|" * len(cols) + "---|"]
    for layer in layers:
        first = next(r for r in rows if r["layer"] == layer)
        cells = []
        for n, mode in cols:
            r = pick(layer, n, mode)
            cells.append("-" if r is None else f"{r['ratio']:.2f}x")
        fwd = pick(layer, 32, "fwd")
        roof = f"{100 * fwd['bound_ms'] / fwd['ms']:.0f}% ({fwd['bound']})" if fwd and fwd.get("bound_ms") else "-"
        lines.append(f"| {layer} | {first['R']}x{first['S']} | {first['stride']} | {first['groups']} | "
                     + " | ".join(cells) + f" | {roof} |")
    geo = []
    for n, mode in cols:
        g = geomean([r["ratio"] for r in rows if r["N"] == n and r["mode"] == mode])
        geo.append("-" if g is None else f"**{g:.2f}x**")
    lines.append("| geomean | | | | " + " | ".join(geo) + " | |")
    worst = max((r["rel_err"] for r in rows if r.get("rel_err") is not None), default=None)
    if worst is not None:
        lines += ["", f"Largest error of any row against float64 (output, and both gradients for fwd+bwd): {worst:.1e}."]
    if nhwc:
        lines += [""] + depthwise_nhwc_table(name, data, nhwc)
    return lines


def depthwise_nhwc_table(name, data, rows):
    """The channels_last rows (the NHWC specialist), one column per precision, batch and mode, each
    against cuDNN at the same precision and memory format; where a precision, batch and mode have rows
    of frozen and of trainable weights, a column each (frozen: the filter's re-layout from the weight
    cache; trainable: re-laid every call)."""
    order = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
    key = lambda r: (r["precision"], r["N"], r["mode"], r.get("weights", "frozen"))  # noqa: E731
    cols = sorted({key(r) for r in rows}, key=lambda c: (order[c[0]], -c[1], c[2], c[3]))
    both = {c[:3] for c in cols if (c[:3] + ("frozen",)) in cols and (c[:3] + ("trainable",)) in cols}
    label = lambda c: f"{c[0]} {c[2]} N={c[1]}" + (f" {c[3]}" if c[:3] in both else "")  # noqa: E731
    pick = {(r["layer"],) + key(r): r for r in rows}
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    lines = [f"The same layers in channels_last (the `direct` algorithm's NHWC specialist, in the input's dtype): "
             f"ratio cuDNN ms / torchconv ms with cuDNN at the same precision and memory format, and the share of "
             f"the roofline reached by the bfloat16 forward at N = 32 (bytes at 2 per element, or multiply-adds that read the image at "
             f"the FP32 FMA peak: a depthwise layer has no GEMM for the tensor cores)"
             + ("; frozen weights' float32 filter comes from the weight cache, a trainable weight's is re-laid "
                "every call" if both else "") + f". From {source(name, data, rows)}.",
             "", "| layer | " + " | ".join(label(c) for c in cols) + " | % of roofline (bf16 fwd N=32) |",
             "|---|" + "---|" * len(cols) + "---|"]
    for layer in layers:
        cells = [f"{pick[(layer,) + c]['ratio']:.2f}x" if (layer,) + c in pick else "-" for c in cols]
        r = pick.get((layer, "bf16", 32, "fwd", "frozen"))
        roof = f"{100 * r['bound_ms'] / r['ms']:.0f}% ({r['bound']})" if r and r.get("bound_ms") else "-"
        lines.append(f"| {layer} | " + " | ".join(cells) + f" | {roof} |")
    geo = [geomean([r["ratio"] for r in rows if key(r) == c]) for c in cols]
    lines.append("| geomean | " + " | ".join(f"**{g:.2f}x**" for g in geo) + " | |")
    worst = max((r["rel_err"] / r["reference_rel_err"] for r in rows
                 if r.get("rel_err") is not None and r.get("reference_rel_err")), default=None)
    if worst is not None:
        lines += ["", f"Largest error over cuDNN's at the same precision (float16 / bfloat16 rows): {worst:.2f}x."]
    return lines


def tensor_core_table(name, data):
    rows = [r for r in data["rows"] if r["algorithm"] == "gemm" and not is_fp32(r)]
    if not rows:
        return []
    keys = sorted({(r["precision"], r["layout"], r["N"], r["mode"]) for r in rows},
                  key=lambda k: (k[0] == "tf32", k[0], k[2] == 1, k[3], k[1]))
    lines = [f"Tensor-core precisions on the resnet + yolo layers: the `gemm` algorithm against cuDNN at the same "
             f"precision and memory format in the same process (`cudnn.benchmark` on; fp16 / bf16 inputs, weights "
             f"and outputs; tf32 = float32 with `torch.backends.cudnn.allow_tf32` on for both). Geomean of the ratio "
             f"cuDNN ms / torchconv ms with the lowest and highest layer, and our error against float64 over "
             f"cuDNN's own error at the same precision (each side's largest of the output and, for fwd+bwd, both "
             f"gradients; the layer where that ratio is highest). "
             f"From {source(name, data, rows)}.", "",
             "| precision | layout | N | mode | layers | geomean [lowest-highest layer] | error / cuDNN's (largest) |",
             "|---|---|---|---|---|---|---|"]
    for precision, layout, n, mode in keys:
        sel = [r for r in rows if (r["precision"], r["layout"], r["N"], r["mode"]) == (precision, layout, n, mode)]
        ratios = [r["ratio"] for r in sel]
        worst = max(r["rel_err"] / r["reference_rel_err"] for r in sel if r.get("reference_rel_err"))
        lines.append(f"| {precision} | {layout} | {n} | {'fwd+bwd' if mode == 'fwdbwd' else mode} | {len(sel)} | "
                     f"**{geomean(ratios):.2f}x** [{min(ratios):.2f}-{max(ratios):.2f}] | {worst:.2f} |")
    over = [r for r in rows if r.get("reference_rel_err") and r["rel_err"] > 2 * r["reference_rel_err"]]
    if over:
        lines += ["", "Layers over twice cuDNN's error: " + ", ".join(
            f"{r['layer']} {r['precision']} {r['mode']} ({r['rel_err']:.1e} against cuDNN's {r['reference_rel_err']:.1e})"
            for r in over) + ". cuDNN's error there is at FP32's level: with TF32 allowed, it ran a non-TF32 algorithm "
            "on those layers."]
    passes = passes_over_twice(rows, data["rows"])
    if passes:
        lines += ["", "Passes over twice cuDNN's error on the same quantity (the table's column compares each "
                  "layer's largest): " + ", ".join(
                      f"{r['layer']} {r['precision']} {r['layout']} {q} ({ours:.1e} against cuDNN's {theirs:.1e})"
                      for r, q, ours, theirs in passes) + ". cuDNN, allowed TF32, ran algorithms at FP32's error on "
                  "those passes; channels_last calls of ours keep TF32 there (docs/precision.md, What runs)."]
    return lines


def passes_over_twice(rows, all_rows):
    """(row, quantity, ours, cuDNN's) for each quantity of `rows` (output, grad_input, grad_weight) whose
    error is over twice cuDNN's on the same quantity in the row's cuDNN twin (same layer and setting)."""
    key = lambda r: (r["suite"], r["layer"], r["precision"], r["layout"], r["N"], r["mode"],  # noqa: E731
                     r.get("weights"))
    cudnn = {key(r): r for r in all_rows if r["algorithm"] == "cudnn" and r.get("errors")}
    found = []
    for r in rows:
        theirs = cudnn.get(key(r), {}).get("errors", {})
        for q, ours in (r.get("errors") or {}).items():
            if theirs.get(q) and ours > 2 * theirs[q]:
                found.append((r, q, ours, theirs[q]))
    return found


# A models row's mode as the README names it.
MODEL_MODES = {"fwd": "inference", "fwd-graph": "inference, CUDA graph", "train": "training step",
               "per-sample": "per-sample gradients (vmap of grad)"}


def precision_models_table(name, data):
    rows = [r for r in data["rows"] if r["suite"] == "resnet50" and r["algorithm"] == "auto"]
    if all(is_fp32(r) for r in rows):
        return []
    lines = [f"torchvision ResNet-50 (random weights) per precision, every convolution `auto`, its algorithm timed "
             f"(benchmark mode) or chosen by the rule (`--no-benchmark`) as the row says, "
             f"against cuDNN at the same setting (fp32 rows: `benchmarks/models.py`; the others: `examples/resnet50.py`; "
             f"amp = `torch.autocast`, model and input in the row's layout; a CUDA graph's replay times the device "
             f"alone, without the host's path). From {source(name, data, rows)}.", "",
             "| precision | layout | N | mode | choice | torchconv ms | cuDNN ms | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mode = MODEL_MODES[r["mode"]]
        lines.append(f"| {r['precision']} | {r['layout']} | {r['N']} | {mode} | {auto_choice(r)} | {r['ms']:.2f} | "
                     f"{r['cudnn_ms']:.2f} | {r['ratio']:.2f}x |")
    return lines


def models_table(name, data):
    rows = [r for r in data["rows"] if r["algorithm"] == "auto" and is_fp32(r)]
    lines = [f"Whole torchvision models (random weights, FP32), every convolution `auto` in benchmark mode. "
             f"From {source(name, data, rows)}.", "",
             "| model | N | mode | torchconv ms | cuDNN ms | ratio [min-max] | logits rel. error |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        mode = MODEL_MODES[r["mode"]]
        lines.append(f"| {r['suite']} | {r['N']} | {mode} | {r['ms']:.2f} | {r['cudnn_ms']:.2f} | {r['ratio']:.2f}x "
                     f"[{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] | {r['rel_err']:.1e} |")
    return lines


def zoo_table(name, data):
    rows = data["rows"]
    ok = [r for r in rows if r["ok"]]
    worst_logits = max(r["logit_err"] for r in ok)
    ratio = lambda r: f"{r['ratio']:.2f}x / {r['train_ratio']:.2f}x"  # noqa: E731
    if all("layer_grad_err" in r for r in ok):  # each convolution's gradients (benchmarks/layer_grads.py)
        over = [r for r in ok if r["layer_grad_over"]]
        grads = ("every convolution's gradients in one training step within 1e-5 of a float64 convolution of the "
                 f"tensors it saw (worst {max(r['layer_grad_err'] for r in ok):.1e})" if not over
                 else "every convolution's gradients in one training step within 1e-5 of a float64 convolution of "
                 "the tensors it saw except " + ", ".join(f"{r['model']} ({'; '.join(r['layer_grad_over'])})"
                                                           for r in over))
    else:  # rows from before the layer check: the whole model's gradients
        worse = [r for r in ok if r["grad_err"] > 2 * r["cudnn_grad_err"]]
        grads = ("one step's gradients against float64 within 2x of cuDNN FP32's own error on every model" if not worse
                 else "one step's gradients against float64 within 2x of cuDNN FP32's own error except on "
                 + ", ".join(f"{r['model']} ({r['grad_err']:.1e} against cuDNN's {r['cudnn_grad_err']:.1e})"
                             for r in worse)
                 + "; whole-model gradients jump at max-pool and ReLU near-ties, cuDNN's as often as ours on "
                 "squeezenet1_1, and the check is now made layer by layer: docs/measurement.md")
    # A run stopped part-way wrote the models it reached; "models" lists what it was to measure.
    planned = data.get("models") or [r["model"] for r in rows]
    missing = [m for m in planned if m not in {r["model"] for r in rows}]
    not_run = f" ({', '.join(missing)} not reached: the run stopped)" if missing else ""
    return [f"Model zoo: {len(ok)} of {len(planned)} torchvision models of different families ran converted in "
            f"benchmark mode{not_run} (batch {rows[0]['batch']}; largest logits rel. error {worst_logits:.1e}; {grads}). "
            f"Inference / training-step ratio to cuDNN FP32: " + ", ".join(f"{r['model']} {ratio(r)}" for r in ok)
            + f". From {source(name, data, rows)}."]


# The staged-V tiles' operands are float16 words from commit dfa3df4 on; rows measured before it (the
# H100 files) ran them on TF32 words.
F16_STAGED_V_SINCE = "2026-11-28T21:00:00+00:00"


def computed_as(rows):
    """How most of a group's layers were computed, from their forward plans (last_choice): TF32 tensor
    cores, 3xBF16 (float16's split operands) or IEEE FP32, and how many ran the staged-V tiles or the
    F(4x4) cluster, whose operands are the TF32 values as float16 words under power-of-two scales, or
    for float16 calls V's bfloat16 halves (docs/winograd.md)."""
    kinds = {}
    for r in rows:
        plan = (r.get("plan") or "").split()[0] if r.get("plan") else ""
        kind = "3xbf16" if ":3xbf16" in plan else "tf32" if ":tf32" in plan else "ieee"
        kinds[kind] = kinds.get(kind, 0) + 1
    kind = max(kinds, key=kinds.get)
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(rows[0]["precision"])
    if kind == "ieee":
        return "widened, IEEE FP32" if dtype else "IEEE FP32"
    how = "3xBF16 tensor cores (operands split in two)" if kind == "3xbf16" else "TF32 tensor cores"
    staged = sum(1 for r in rows if any(t in (r.get("plan") or "") for t in ("-vbulk/", "-uvmulticast/"))
                 and (r.get("date") or "") >= F16_STAGED_V_SINCE)
    f4x4 = sum(1 for r in rows if "f4x4:tf32-wgmma-cluster/" in (r.get("plan") or ""))
    if kind == "tf32" and (staged or f4x4):
        parts = [f"{staged} staged-V layer{'s' if staged > 1 else ''}"] if staged else []
        parts += [f"{f4x4} with F(4x4) cluster passes"] if f4x4 else []
        how += f" ({', '.join(parts)}: the TF32 values as scaled float16 words)"
    elif kind == "3xbf16" and staged:
        how = how[:-1] + f"; {staged} staged-V layer{'s' if staged > 1 else ''}, V's two halves staged)"
    return f"{dtype} read and written, {how}" if dtype else how


def winograd_tensor_core_table(name, data):
    """The `winograd` rows at tf32, bf16 and fp16 (3x3 stride-1 layers), each group labelled by how its
    layers were computed (computed_as)."""
    rows = [r for r in data["rows"] if r["algorithm"] == "winograd" and not is_fp32(r)]
    if not rows:
        return []
    order = {"tf32": 0, "bf16": 1, "fp16": 2}
    keys = sorted({(r["precision"], r["layout"], r["N"], r["mode"]) for r in rows},
                  key=lambda k: (order.get(k[0], 3), k[1], k[2], k[3]))
    lines = [f"Winograd at the tensor-core precisions on the 3x3 stride-1 layers of resnet + yolo, against cuDNN at "
             f"the same precision and memory format in the same process (ratio cuDNN ms / torchconv ms; error over "
             f"cuDNN's at the same precision, largest layer). Layers of at most 4 channels or filters per group (Y0, "
             f"an RGB stem) run the IEEE shallow and narrow kernels at every precision. "
             f"From {source(name, data, rows)}.", "",
             "| precision | computed as | layout | N | mode | layers | geomean [lowest-highest layer] | "
             "error / cuDNN's (largest) |",
             "|---|---|---|---|---|---|---|---|"]
    for precision, layout, n, mode in keys:
        sel = [r for r in rows if (r["precision"], r["layout"], r["N"], r["mode"]) == (precision, layout, n, mode)]
        ratios = [r["ratio"] for r in sel]
        errs = [r["rel_err"] / r["reference_rel_err"] for r in sel if r.get("reference_rel_err")]
        worst = f"{max(errs):.2f}" if errs else "-"
        lines.append(f"| {precision} | {computed_as(sel)} | {layout} | {n} | "
                     f"{'fwd+bwd' if mode == 'fwdbwd' else mode} | {len(sel)} | "
                     f"**{geomean(ratios):.2f}x** [{min(ratios):.2f}-{max(ratios):.2f}] | {worst} |")
    return lines


def render():
    parts = []
    for suite, table in (("resnet-yolo", suite_table), ("resnet-yolo", tensor_core_table),
                         ("resnet-yolo", winograd_tensor_core_table), ("big", big_table),
                         ("depthwise", depthwise_table), ("models", models_table), ("models", precision_models_table),
                         ("zoo", zoo_table)):
        # Winograd's tensor-core rows, the depthwise rows and the models' per-precision rows from every
        # GPU's file: each file's rows are its own code's.
        every_gpu = table in (winograd_tensor_core_table, depthwise_table, precision_models_table)
        files = load_every_gpu(suite) if every_gpu else [load(suite)]
        for name, data in files:
            lines = table(name, data) if data is not None else []
            if lines:
                parts += lines + [""]
    if not parts:
        parts = ["No result files yet: run the benchmarks (below) and then this script.", ""]
    return "\n".join([BEGIN, ""] + parts + [END])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    with open(README) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} section")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + render() + tail
    if args.check:
        if new != text:
            print("README.md's results section differs from what benchmarks/results/ gives; run "
                  "python benchmarks/render_readme.py", file=sys.stderr)
            return 1
        return 0
    with open(README, "w") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
