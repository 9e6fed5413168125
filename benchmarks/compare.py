"""Re-check a committed result file: re-run its rows on the current build (same layers, batches,
modes, weights and algorithms, cuDNN timed alongside) and print old against new, or, with
--against NEW.json, compare two result files without running anything.

    python benchmarks/compare.py benchmarks/results/resnet-yolo-h100.json --layers R2,R11
    python benchmarks/compare.py OLD.json --against benchmarks/results/resnet-yolo-h100.json

A row is "within noise" when the new ratio to cuDNN is within 10% of the old one or inside the
spread (ratio_min-ratio_max) either run measured. Rows of files written before the interleaved
protocol have no spread and no "weights" field (their forward rows used frozen weights).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

NOISE = 0.10


def key(row):
    weights = row.get("weights") or ("frozen" if row["mode"] == "fwd" else "trainable")
    return (row.get("suite"), row["layer"], row["N"], row["mode"], weights, row["algorithm"])


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data.get("meta", {}), {key(r): r for r in data["rows"] if r["algorithm"] not in ("cudnn", "aten")}


def rerun(old_rows, layers, rounds, reps):
    """Runs bench.bench_layer for every (suite, layer, N) of the old rows with their algorithms."""
    import torch

    import bench
    from suites import SUITES

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    args = bench.parse_args(["--rounds", str(rounds), "--reps", str(reps)])
    by_layer = {}
    for (suite, layer, n, mode, weights, algo) in old_rows:
        if layers and layer not in layers:
            continue
        entry = by_layer.setdefault((suite, layer, n), [set(), set(), set()])
        entry[0].add(mode), entry[1].add(weights), entry[2].add(algo)
    new = {}
    for (suite, name, n), (modes, weights, algos) in sorted(by_layer.items()):
        suite_layers = {layer.name: layer for s in SUITES.values() for layer in s}
        layer = suite_layers[name]
        rows = bench.bench_layer(layer, n, ["cudnn", *sorted(algos)], sorted(modes), sorted(weights), args, device,
                                 lambda s: None)
        for r in rows:
            r["suite"] = suite
            if r["algorithm"] not in ("cudnn", "aten"):
                new[key(r)] = r
    return new


def within_noise(old, new):
    lo = min(old.get("ratio_min", old["ratio"]), new["ratio_min"] if "ratio_min" in new else new["ratio"])
    hi = max(old.get("ratio_max", old["ratio"]), new["ratio_max"] if "ratio_max" in new else new["ratio"])
    close = abs(new["ratio"] / old["ratio"] - 1) <= NOISE
    return close or lo <= new["ratio"] <= hi and lo <= old["ratio"] <= hi


def geomean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--against", default=None, help="a second result file (no run)")
    p.add_argument("--layers", default=None, help="comma list of layers to re-run (default: all)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    old_meta, old = load(args.file)
    layers = set(args.layers.split(",")) if args.layers else None
    if args.against:
        new_meta, new = load(args.against)
        source = args.against
    else:
        new, source = rerun(old, layers, args.rounds, args.reps), "this build"
    common = [k for k in old if k in new and (layers is None or k[1] in layers)]
    print(f"# {args.file} ({old_meta.get('date', '?')}) against {source}: {len(common)} rows in common")
    print(f"{'suite':<9} {'layer':>5} {'N':>3} {'mode':<6} {'weights':<9} {'algorithm':<16} {'old':>6} {'new':>6} "
          f"{'new min-max':>12} {'change':>7}")
    outside = 0
    groups = {}
    for k in common:
        o, n = old[k], new[k]
        ok = within_noise(o, n)
        outside += not ok
        groups.setdefault((k[5], k[2], k[3], k[4]), []).append((o["ratio"], n["ratio"]))
        spread = f"{n['ratio_min']:.2f}-{n['ratio_max']:.2f}" if "ratio_min" in n else "-"
        print(f"{str(k[0]):<9} {k[1]:>5} {k[2]:>3} {k[3]:<6} {k[4]:<9} {k[5]:<16} {o['ratio']:6.2f} {n['ratio']:6.2f} "
              f"{spread:>12} {100 * (n['ratio'] / o['ratio'] - 1):+6.1f}%" + ("" if ok else "  outside noise"))
    print("\ngeomean ratio to cuDNN, old -> new:")
    for (algo, n, mode, weights), pairs in sorted(groups.items()):
        print(f"  {algo:<16} N={n:<3} {mode:<6} {weights:<9} {geomean([a for a, _ in pairs]):.2f} -> "
              f"{geomean([b for _, b in pairs]):.2f} ({len(pairs)} rows)")
    print(f"\n{len(common) - outside} of {len(common)} rows within noise ({NOISE:.0%} or the measured spread)")
    return common, outside


if __name__ == "__main__":
    main()
