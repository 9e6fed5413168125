"""Re-check a committed result file: re-run its rows on the current build (same layers, batches,
modes, weights and algorithms, cuDNN timed alongside) and print old against new, or, with
--against NEW.json, compare two result files without running anything.

    python benchmarks/compare.py benchmarks/results/resnet-yolo-h100.json --layers R2,R11
    python benchmarks/compare.py OLD.json --against benchmarks/results/resnet-yolo-h100.json
    python benchmarks/compare.py benchmarks/results/resnet-yolo-h100.json --layers Y8   # every precision/layout

Two things are compared per row: our time (old ms against new ms: did our kernels change?) and
the ratio to cuDNN (which also moves with cuDNN's own time, whose choice of kernel under
cudnn.benchmark can differ between processes). A ratio is "within noise" when the new one is within
10% of the old one or inside the spread (ratio_min-ratio_max) either run measured; a time when it
is within 10%. Rows of files written before the interleaved
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
    """(layer, N, mode, weights, algorithm, precision, layout): layer names are unique across the
    suites, and a row of the 'winograd' suite is the same layer as in 'resnet' or 'yolo'. Rows of
    files written before --precision / --layout are fp32 / nchw."""
    weights = row.get("weights") or ("frozen" if row["mode"] == "fwd" else "trainable")
    return (row["layer"], row["N"], row["mode"], weights, row["algorithm"], row.get("precision", "fp32"),
            row.get("layout", "nchw"))


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data.get("meta", {}), {key(r): r for r in data["rows"] if r["algorithm"] not in ("cudnn", "aten")}


def rerun(old_rows, layers, rounds, reps):
    """Runs bench.bench_layer for every (suite, layer, N, precision, layout) of the old rows with their
    algorithms, both sides at the row's precision and layout."""
    import torch

    import bench
    from suites import SUITES

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    by_layer = {}
    for (layer, n, mode, weights, algo, precision, layout), row in old_rows.items():
        if layers and layer not in layers:
            continue
        entry = by_layer.setdefault((row.get("suite"), layer, n, precision, layout), [set(), set(), set()])
        entry[0].add(mode), entry[1].add(weights), entry[2].add(algo)
    new = {}
    hbm_tbps = bench.copy_bandwidth_tbps(device) if device.type == "cuda" else None  # the rows' roofline
    for (suite, name, n, precision, layout), (modes, weights, algos) in sorted(by_layer.items()):
        suite_layers = {layer.name: layer for s in SUITES.values() for layer in s}
        layer = suite_layers[name]
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        args = bench.parse_args(["--rounds", str(rounds), "--reps", str(reps), "--precision", precision,
                                 "--layout", layout])
        args.hbm_tbps = hbm_tbps
        rows = bench.bench_layer(layer, n, ["cudnn", *sorted(algos)], sorted(modes), sorted(weights), args, device,
                                 lambda s: None)
        for r in rows:
            r["suite"] = suite
            if r["algorithm"] not in ("cudnn", "aten"):
                new[key(r)] = r
    return new


def within_noise(old, new):
    """Within NOISE of each other, or one run's ratio inside the other run's spread over rounds."""
    if abs(new["ratio"] / old["ratio"] - 1) <= NOISE:
        return True
    return any("ratio_min" in b and b["ratio_min"] <= a["ratio"] <= b["ratio_max"] for a, b in ((old, new), (new, old)))


def geomean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--against", default=None, help="a second result file (no run)")
    p.add_argument("--layers", default=None, help="comma list of layers to re-run (default: all)")
    p.add_argument("--algorithms", default=None, help="comma list of algorithms to compare (default: all)")
    p.add_argument("--modes", default=None, help="comma list of modes to compare, fwd / fwdbwd (default: both)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    old_meta, old = load(args.file)
    if args.algorithms:
        keep = set(args.algorithms.split(","))
        old = {k: r for k, r in old.items() if k[4] in keep}
    if args.modes:
        modes = set(args.modes.split(","))
        old = {k: r for k, r in old.items() if k[2] in modes}
    layers = set(args.layers.split(",")) if args.layers else None
    if args.against:
        new_meta, new = load(args.against)
        source = args.against
    else:
        new, source = rerun(old, layers, args.rounds, args.reps), "this build"
    common = [k for k in old if k in new and (layers is None or k[0] in layers)]
    print(f"# {args.file} ({old_meta.get('date', '?')}) against {source}: {len(common)} rows in common")
    print(f"{'layer':>5} {'N':>3} {'mode':<6} {'weights':<9} {'algorithm':<16} {'prec':<4} {'layout':<6} "
          f"{'old ms':>9} {'new ms':>9} "
          f"{'change':>7} {'old x':>6} {'new x':>6} {'new min-max':>12} {'change':>7}")
    outside = slower = 0
    groups = {}
    for k in common:
        o, n = old[k], new[k]
        ok = within_noise(o, n)
        outside += not ok
        time_change = n["ms"] / o["ms"] - 1
        slower += abs(time_change) > NOISE
        groups.setdefault((k[4], k[5], k[6], k[1], k[2], k[3]), []).append((o["ratio"], n["ratio"]))
        spread = f"{n['ratio_min']:.2f}-{n['ratio_max']:.2f}" if "ratio_min" in n else "-"
        print(f"{k[0]:>5} {k[1]:>3} {k[2]:<6} {k[3]:<9} {k[4]:<16} {k[5]:<4} {k[6]:<6} {o['ms']:9.4f} {n['ms']:9.4f} "
              f"{100 * time_change:+6.1f}% {o['ratio']:6.2f} {n['ratio']:6.2f} {spread:>12} "
              f"{100 * (n['ratio'] / o['ratio'] - 1):+6.1f}%" + ("" if ok else "  ratio outside noise")
              + ("  time changed" if abs(time_change) > NOISE else ""))
    print("\ngeomean ratio to cuDNN, old -> new:")
    for (algo, precision, layout, n, mode, weights), pairs in sorted(groups.items()):
        print(f"  {algo:<16} {precision:<4} {layout:<6} N={n:<3} {mode:<6} {weights:<9} "
              f"{geomean([a for a, _ in pairs]):.2f} -> "
              f"{geomean([b for _, b in pairs]):.2f} ({len(pairs)} rows)")
    print(f"\nour time: {len(common) - slower} of {len(common)} rows within {NOISE:.0%} of the old time")
    print(f"ratio to cuDNN: {len(common) - outside} of {len(common)} rows within noise ({NOISE:.0%} or the measured "
          "spread)")
    return common, outside


if __name__ == "__main__":
    main()
