"""Rows of kernel variants that did not land, kept as a result so that what docs say of them is a
committed measurement: each variant's rows come from a pass_times.py run (the rows of that run's date
in its JSON, cuDNN timed in the same process), tagged with the variant's name.

    python benchmarks/trial_rows.py --suite gemm-trials \
        --variant "before=m0/pass-times-resnet-yolo-h200.json" --variant "after=m1/pass-times-resnet-yolo-h200.json"

Writes benchmarks/results/<suite>-<gpu>.json and .md, rewritten whole (one current file per suite):
the sums of each variant's passes, then each layer's passes side by side. `--render JSON` writes only
the Markdown of a committed JSON.
"""
import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import gpu_slug  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def variant_rows(name, path):
    """The rows that the run which last wrote `path` measured, tagged `variant`."""
    with open(path) as f:
        data = json.load(f)
    date = data["meta"]["date"]
    return data["meta"], [dict(r, variant=name) for r in data["rows"] if r.get("date") == date]


def write_markdown(path, data):
    """The Markdown of a result's JSON data (meta, variants, rows)."""
    meta, rows = data["meta"], data["rows"]
    variants = [(v["name"], v["description"]) for v in data["variants"]]
    lines = [f"# GEMM variants that did not land -- {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, CUDA {meta['cuda']}. Per-pass device times "
             "(benchmarks/pass_times.py: batch 32, trainable weights, the suite's layers), one run per variant, "
             "each with cuDNN at the same precision and layout in the same process. Variants: " +
             "; ".join(f"`{v}` ({d})" for v, d in variants) + ".", "",
             "| variant | precision | layout | pass | layers | ours µs | cuDNN µs | cuDNN / ours |",
             "|---|---|---|---|---|---|---|---|"]
    sums = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        if r["algorithm"] == "gemm":
            s = sums[(r["variant"], r["precision"], r["layout"], r["pass_"])]
            s[0] += 1
            s[1] += r["us"]
            s[2] += r["cudnn_us"]
    for (v, precision, layout, pass_), (n, ours, cudnn) in sums.items():
        lines.append(f"| {v} | {precision} | {layout} | {pass_} | {n} | {ours:.0f} | {cudnn:.0f} | {cudnn / ours:.2f}x |")
    by_layer = defaultdict(dict)
    for r in rows:
        if r["algorithm"] == "gemm":
            by_layer[(r["precision"], r["layout"], r["layer"], r["pass_"])][r["variant"]] = r
    for group in sorted({k[:2] for k in by_layer}):
        names = [v for v, _ in variants if any(v in by_layer[k] for k in by_layer if k[:2] == group)]
        lines += ["", f"## {group[0]} {group[1]}: µs (cuDNN µs in the same run)", "",
                  "| layer | pass | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for key, per in by_layer.items():
            if key[:2] == group:
                cells = [f"{per[v]['us']:.1f} ({per[v]['cudnn_us']:.1f})" if v in per else "-" for v in names]
                lines.append(f"| {key[2]} | {key[3]} | " + " | ".join(cells) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", help="the result file's suite name")
    p.add_argument("--variant", action="append", default=[],
                   help="NAME=PATH[=DESCRIPTION]: a pass_times.py JSON whose last run measured the variant")
    p.add_argument("--out-dir", default=RESULTS)
    p.add_argument("--render", metavar="JSON", help="only write the Markdown of this result JSON (to --markdown)")
    p.add_argument("--markdown", help="with --render: the Markdown's path (default: beside the JSON)")
    args = p.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            write_markdown(args.markdown or os.path.splitext(args.render)[0] + ".md", json.load(f))
        return
    if not args.suite or not args.variant:
        p.error("--suite and --variant, or --render")
    described, rows, meta = {}, [], None  # a variant may come in several runs (precisions, layouts)
    for spec in args.variant:
        name, path, *description = spec.split("=", 2)
        meta, new = variant_rows(name, path)
        described.setdefault(name, description[0] if description else os.path.basename(path))
        rows += new
    variants = list(described.items())
    stem = os.path.join(args.out_dir, f"{args.suite}-{gpu_slug(meta)}")
    data = {"meta": {k: meta[k] for k in ("gpu", "torch", "cudnn", "cuda")},
            "variants": [{"name": v, "description": d} for v, d in variants], "rows": rows}
    with open(stem + ".json", "w") as f:
        json.dump(data, f, indent=1)
    write_markdown(stem + ".md", data)
    print(f"wrote {stem}.json/.md ({len(rows)} rows)")


if __name__ == "__main__":
    main()
