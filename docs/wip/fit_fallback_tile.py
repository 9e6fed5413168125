"""Offline, from tf32-1x1-tiny-sweep.sh's archive: fits a term for the rule's fallback tiles (tiny,
small, medium) to the TF32 1x1 sweep and simulates cluster_split_estimate's choice with it, so that a
rule can be compared with the current one before a device call lands it.

    python3 docs/wip/fit_fallback_tile.py SWEEP_DIR [--tile wgmma-tiny]

SWEEP_DIR holds sweep-tf32-<layout>-n<batch>.json (split_sweep.py's rows: label "rule" or
"<config>/s<splits>", us = the device's time). The model is the estimate's (docs/precision.md): a
launch takes its waves of blocks times a block's chunks at a chunk cost plus a fixed cost, in a large
block's chunk-times; the cluster capacities come from benchmarks/results/cluster-placement-h200.json.
What it prints:
1. The simulator checked against the device: the current rule's simulated choice beside the choice
   the sweep's rule run recorded (a mismatch means the simulator, not the rule, is off).
2. The fallback tile's fitted terms (fixed cost, chunk cost; a grid search minimizing the squared log
   error of its measured time against a large unsplit launch's, ratio to ratio).
3. The candidate rule (the estimate with the fitted tile as one more candidate, without TF32 1x1's
   lone-only splits and margin unless --lone-only) against the current rule: geomean and worst of the measured times of
   their choices, per layout.
Strided grad_inputs (phases) are left out, as the simulator does not model them.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from suites import RESNET, YOLO  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
LAYERS = {layer.name: layer for layer in RESNET + YOLO}
# Tile (rows, destination channels, blocks an SM): gemm_tc.cu's WgmmaTileConfig instances.
TILES = {"wgmma-tiny": (64, 64, 2), "wgmma-small": (64, 128, 2), "wgmma-medium": (128, 64, 3),
         "wgmma-large": (128, 128, 2), "wgmma-wide": (128, 256, 1)}
# The kOneTap32 terms (gemm_tc.cu).
FIXED, LONE_CHUNK, WIDE_CHUNK, WIDE_FIXED, MARGIN, WIDE_MIN = 6.5, 0.65, 0.85, 8.0 / 0.85, 0.75, 2
TAIL_MIN, TAIL_MARGIN, MAX_SPLITS = 4, 0.9, 8


def cdiv(a, b):
    return -(-a // b)


def capacities():
    placement = json.load(open(os.path.join(ROOT, "benchmarks/results/cluster-placement-h200.json")))
    two = {c["size"]: c["clusters_two_an_sm"] for c in placement["capacity"]}
    one = {c["size"]: c["clusters_one_an_sm"] for c in placement["capacity"]}
    return placement["sms"], two, one


SMS, TWO, ONE = capacities()


def estimate(tile, rows, outputs, chunks, lone_only=True, tail=True):
    """cluster_split_estimate for TF32 1x1 (large or wide): (splits or 'Nt' for the last wave's, time in
    a large block's chunk-times)."""
    bm, bn, per_sm = TILES[tile]
    blocks, slots, shares = cdiv(rows, bm) * cdiv(outputs, bn), per_sm * SMS, per_sm > 1
    fixed = FIXED if tile == "wgmma-large" else WIDE_FIXED
    clusters = TWO if per_sm == 2 else ONE

    def lone(s):
        return blocks <= SMS if s == 1 else shares and blocks < ONE[s]

    def time(waves, s):
        return waves * (cdiv(chunks, s) * (LONE_CHUNK if shares and lone(s) else 1.0) + fixed)

    unsplit = time(cdiv(blocks, slots), 1)
    best = (1, unsplit)
    least = 1 if shares else (WIDE_MIN if tile == "wgmma-wide" else 1)
    for s in range(2, MAX_SPLITS + 1):
        only = lone_only and shares
        if only and not lone(s):
            continue
        if chunks < s * least or cdiv(chunks, cdiv(chunks, s)) != s:
            continue
        if clusters[s] == 0 or cdiv(blocks, clusters[s]) > cdiv(blocks * s, slots):
            continue
        t = time(cdiv(blocks, clusters[s]), s)
        if t < best[1] and (not only or t <= MARGIN * unsplit):
            best = (s, t)
    if tail:
        tb = None
        for s in range(2, MAX_SPLITS + 1):
            if chunks < s * TAIL_MIN:
                break
            if cdiv(chunks, cdiv(chunks, s)) != s:
                continue
            per_wave = clusters[s] * s
            if clusters[s] == 0 or blocks < per_wave or blocks % per_wave == 0:
                continue
            whole = blocks // per_wave * per_wave
            t = whole // per_wave * (chunks + fixed) + cdiv(blocks - whole, clusters[s]) * (cdiv(chunks, s) + fixed)
            if tb is None or t < tb[1]:
                tb = (f"{s}t", t)
        if tb and tb[1] < TAIL_MARGIN * best[1]:
            best = tb
    return best[0], best[1] * (WIDE_CHUNK if tile == "wgmma-wide" else 1.0)


def large_unsplit_time(rows, outputs, chunks):
    """The estimate's unsplit large launch (a lone block's chunk at LONE_CHUNK)."""
    blocks = cdiv(rows, 128) * cdiv(outputs, 128)
    return cdiv(blocks, 2 * SMS) * (chunks * (LONE_CHUNK if blocks <= SMS else 1.0) + FIXED)


def rest_of_rule(layout, rows, outputs, chunks):
    """What run_wgmma launches for TF32 1x1 after the estimate keeps a launch whole (its code after the
    split branch): the wide tile, the large one, the large one's wave-filling splits, else tiny."""
    if outputs <= 64:  # no split estimate: medium from a wave of its tiles, its wave-filling splits, else tiny
        if cdiv(rows, 128) * cdiv(outputs, 64) >= SMS:
            return "wgmma-medium", 1
        splits = wave_filling_splits(cdiv(rows, 128) * cdiv(outputs, 64), 3 * SMS, min(chunks // 8, MAX_SPLITS))
        return ("wgmma-medium", splits) if splits >= 2 else ("wgmma-tiny", 1)
    wide_blocks = cdiv(rows, 128) * cdiv(outputs, 256)
    two_waves, one_wave_long = wide_blocks >= 2 * SMS, chunks >= 8 and wide_blocks >= SMS
    wide_tile = one_wave_long if layout == "nchw" else (two_waves or one_wave_long)
    if wide_tile and outputs > 128:
        return "wgmma-wide", 1
    if cdiv(rows, 64) * cdiv(outputs, 128) >= SMS:
        return "wgmma-large", 1
    splits = wave_filling_splits(cdiv(rows, 128) * cdiv(outputs, 128), 2 * SMS, min(chunks // 8, MAX_SPLITS))
    return ("wgmma-large", splits) if splits >= 2 else ("wgmma-tiny", 1)


def wave_filling_splits(base, slots, cap):
    """common/launch.cuh's: the fewest splits up to `cap` filling the waves to 90%, else the fullest."""
    best, best_fill = 1, 0.0
    for s in range(1, cap + 1):
        fill = base * s / (cdiv(base * s, slots) * slots)
        if fill >= 0.9:
            return s
        if fill > best_fill:
            best, best_fill = s, fill
    return best


def fallback_time(tile, rows, outputs, chunks, fixed, chunk_cost):
    bm, bn, per_sm = TILES[tile]
    return cdiv(cdiv(rows, bm) * cdiv(outputs, bn), per_sm * SMS) * (chunks * chunk_cost + fixed)


def cases(sweep_dir):
    for path in sorted(glob.glob(os.path.join(sweep_dir, "sweep-tf32-*-n*.json"))):
        layout, batch = re.search(r"sweep-tf32-(\w+)-n(\d+)\.json", path).groups()
        rows = json.load(open(path))
        for key in sorted({(r["layer"], r["pass_"]) for r in rows}):
            layer = LAYERS[key[0]]
            if layer.R * layer.kw != 1 or (key[1] == "gi" and layer.stride != 1):
                continue
            times = {r["label"]: r for r in rows if (r["layer"], r["pass_"]) == key and r["us"] == r["us"]}
            if not times.get("rule", {}).get("choice", "").split(":")[-1].startswith("wgmma-"):
                continue  # a pass the wgmma rule does not take (A by a matrix, mma.sync tiles)
            out_hw = layer.out_hw()
            n = int(batch)
            geometry = ((n * out_hw * out_hw, layer.K, cdiv(layer.C, 32)) if key[1] == "fwd"
                        else (n * layer.HW * layer.HW, layer.C, cdiv(layer.K, 32)))
            yield layout, n, key, geometry, times


def rule_choice(layout, geometry, lone_only=True, fallback=None):
    """The config and splits run_wgmma launches for a TF32 1x1 pass: the estimate's splits, else the
    rest of the rule; fallback = (tile, fixed, chunk_cost): one more candidate of the estimate, unsplit."""
    rows, outputs, chunks = geometry
    if outputs <= 64:
        return rest_of_rule(layout, rows, outputs, chunks)
    best = ("wgmma-large",) + estimate("wgmma-large", rows, outputs, chunks, lone_only)
    if outputs > 128:
        wide = ("wgmma-wide",) + estimate("wgmma-wide", rows, outputs, chunks, lone_only)
        if wide[2] < best[2]:
            best = wide
    if fallback is not None:
        t = fallback_time(fallback[0], rows, outputs, chunks, fallback[1], fallback[2])
        if t < best[2]:
            return fallback[0], 1
    if best[1] != 1:
        return best[:2]
    return rest_of_rule(layout, rows, outputs, chunks)


def label(choice):
    tile, splits = choice
    return f"{tile}/splits={splits.rstrip('t') + '/tail' if isinstance(splits, str) else splits}"


def measured(times, choice):
    tile, splits = choice
    return times.get(f"{tile}/s{splits}", {}).get("us") if not isinstance(splits, str) else None


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("sweep_dir")
    p.add_argument("--tile", default="wgmma-tiny", choices=["wgmma-tiny", "wgmma-small", "wgmma-medium"])
    p.add_argument("--lone-only", action="store_true", help="the candidate keeps the lone-only splits and margin")
    args = p.parse_args()
    data = list(cases(args.sweep_dir))
    print("1. the current rule, simulated and recorded:")
    agree = 0
    for layout, n, key, geometry, times in data:
        sim, recorded = label(rule_choice(layout, geometry)), times["rule"]["choice"].split(":")[-1].split(" ")[0]
        agree += sim == recorded
        if sim != recorded:
            print(f"   {layout} n{n:<2} {key[0]:4} {key[1]:3} simulated {sim:28} recorded {recorded}")
    print(f"   {agree} of {len(data)} passes agree")
    # 2. Fit: the tile's time over a large unsplit launch's, measured against modelled.
    pairs = []
    for layout, n, key, geometry, times in data:
        tile_us, large_us = times.get(f"{args.tile}/s1", {}).get("us"), times.get("wgmma-large/s1", {}).get("us")
        if tile_us and large_us:
            pairs.append((geometry, tile_us / large_us))
    best = None
    for fixed10 in range(0, 201, 5):
        for cost100 in range(20, 301, 5):
            f, c = fixed10 / 10, cost100 / 100
            err = sum((math.log(fallback_time(args.tile, *g, f, c) / large_unsplit_time(*g)) - math.log(r)) ** 2
                      for g, r in pairs)
            if best is None or err < best[0]:
                best = (err, f, c)
    print(f"2. {args.tile}: fixed {best[1]:.1f} chunk-times, chunk {best[2]:.2f} (squared log error {best[0]:.3f} over "
          f"{len(pairs)} passes)")
    # 3. The candidate against the current rule, by the measured times of their choices.
    for layout in sorted({d[0] for d in data}):
        ratios = []
        for lay, n, key, geometry, times in data:
            if lay != layout:
                continue
            now = times["rule"]["us"]
            cand = rule_choice(lay, geometry, lone_only=args.lone_only, fallback=(args.tile, best[1], best[2]))
            cand_us = now if label(cand) == label(rule_choice(lay, geometry)) else measured(times, cand)
            if cand_us is None:  # a last-wave split the current rule does not take: the sweep forces none
                print(f"   {lay} n{n} {key[0]} {key[1]}: {label(cand)} not measured")
                continue
            ratios.append((cand_us / now, n, key, cand))
        worst = max(ratios, key=lambda r: r[0])
        print(f"3. {layout}: candidate / current rule geomean {geomean([r[0] for r in ratios]):.3f} over {len(ratios)} "
              f"passes; worst {worst[0]:.2f} (n{worst[1]} {worst[2][0]} {worst[2][1]} -> {label(worst[3])})")


if __name__ == "__main__":
    main()
