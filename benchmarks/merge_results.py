"""Merges new result rows into a suite's current result file, rewritten in place (JSON and
Markdown): rows of the target whose group -- suite, precision, layout, batch, mode (and weights) --
appears among the new rows are replaced by them; the others stay. With --by-row only the rows of
the same group, layer, algorithm and config are replaced (`row_key`: a rerun of some algorithms on
some layers, as bench.py merges its runs; every row carries the cuDNN time of its own run, so its
ratio stays its own). Each row keeps the date of the run that produced it. Bench files (bench.py) and
model files (models.py, examples/resnet50.py) both merge this way:

    python benchmarks/merge_results.py benchmarks/results/resnet-yolo-h100.json new-fp16.json new-tf32.json
    python benchmarks/merge_results.py benchmarks/results/models-h100.json resnet50-precision.json --skip-precision fp32
    python benchmarks/merge_results.py benchmarks/results/resnet-yolo-h100.json winograd-rerun.json --by-row

--roofline recomputes every GPU bench row's roofline (bench.roofline) instead, after its definition
changed; no source files:

    python benchmarks/merge_results.py benchmarks/results/depthwise-h100.json --roofline
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def group(row):
    return (row.get("suite"), row.get("precision", "fp32"), row.get("layout", "nchw"), row["N"], row["mode"],
            row.get("weights"))


def row_key(row):
    """A row's place in a result file: its group, layer, algorithm and config."""
    return group(row) + (row.get("layer"), row.get("algorithm"), row.get("config"))


def auto_choice(row):
    """How a model row's `auto` picked its algorithms: "benchmark" (timed, benchmark mode) or "rule"
    (examples/resnet50.py --no-benchmark writes config "default"); rows without a config are
    benchmark mode's (benchmarks/models.py)."""
    return "benchmark" if row.get("config", "benchmark") == "benchmark" else "rule"


def load_rows(path):
    with open(path) as f:
        data = json.load(f)
    date = data.get("meta", {}).get("date")
    for r in data["rows"]:
        r.setdefault("date", date)
    return data


def merge_rows(target, meta, new_rows, write_markdown, extra=None, by_row=False, key=None):
    """Rewrites `target` (JSON, created when missing) and its Markdown twin with `new_rows` merged
    in; `meta` (and `extra` top-level fields, e.g. argv) describe the newest run. A target row goes
    where a new row has its `key` (default: its group, or with `by_row` its `row_key`). Returns the
    rows."""
    old = load_rows(target) if os.path.exists(target) else {"meta": {}, "rows": []}
    for r in new_rows:
        r.setdefault("date", meta.get("date"))
    if key is None:
        key = row_key if by_row else group
    replaced = {key(r) for r in new_rows}
    rows = [r for r in old["rows"] if key(r) not in replaced] + list(new_rows)
    meta = dict(meta)
    meta["runs"] = sorted({r["date"] for r in rows if r.get("date")})
    write_result(target, {"meta": meta, **(extra or {}), "rows": rows}, write_markdown)
    return rows


def write_result(target, data, write_markdown):
    """Writes a result file (JSON) and its Markdown twin."""
    with open(target, "w") as f:
        json.dump(data, f, indent=1)
    write_markdown(os.path.splitext(target)[0] + ".md", data["meta"], data["rows"])


def merge(target, sources, skip_precisions=(), by_row=False):
    """merge_rows with the rows of result files `sources` (bench or model files)."""
    meta, new_rows = {}, []
    for path in sources:
        data = load_rows(path)
        meta = data["meta"]
        new_rows += [r for r in data["rows"] if r.get("precision", "fp32") not in skip_precisions]
    if all(r.get("layer") == "model" for r in new_rows):
        from models import write_markdown
    else:
        from bench import write_markdown as bench_markdown

        def write_markdown(path, meta, rows):
            bench_markdown(path, meta, rows, {})
    return merge_rows(target, meta, new_rows, write_markdown, by_row=by_row)


def recompute_roofline(target):
    """Rewrites `target` with each row's bound and bound_ms from bench.roofline at the copy bandwidth
    its meta records (rows of suite layers measured on a GPU; others unchanged). Returns the rows."""
    from bench import roofline, write_markdown
    from suites import SUITES

    layers = {(suite, layer.name): layer for suite, members in SUITES.items() for layer in members}
    data = load_rows(target)
    hbm_tbps = data["meta"]["hbm_tbps"]
    for r in data["rows"]:
        layer = layers.get((r.get("suite"), r.get("layer")))
        if layer is not None and r.get("bound_ms") is not None:
            r["bound_ms"], r["bound"] = roofline(layer, r["N"], r["mode"], r.get("precision", "fp32"), hbm_tbps)
    write_result(target, data, lambda path, meta, rows: write_markdown(path, meta, rows, {}))
    return data["rows"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target")
    p.add_argument("sources", nargs="*")
    p.add_argument("--roofline", action="store_true", help="recompute every row's roofline (no sources)")
    p.add_argument("--skip-precision", default="", help="comma list of precisions whose new rows are left out")
    p.add_argument("--by-row", action="store_true", help="replace only rows of the same group, layer, algorithm and config")
    args = p.parse_args(argv)
    if args.roofline:
        rows = recompute_roofline(args.target)
        print(f"recomputed the roofline of {args.target} ({len(rows)} rows)")
        return
    if not args.sources:
        p.error("give result files to merge, or --roofline")
    rows = merge(args.target, args.sources, tuple(s for s in args.skip_precision.split(",") if s), args.by_row)
    print(f"wrote {args.target} ({len(rows)} rows) from {len(args.sources)} files")


if __name__ == "__main__":
    main()
