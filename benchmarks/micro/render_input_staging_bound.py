"""Renders input_staging_bound.cu's JSON (benchmarks/results/input-staging-bound-<gpu>.json) as Markdown.

usage: python benchmarks/micro/render_input_staging_bound.py RESULTS.json > RESULTS.md
"""

import json
import sys

MODES = ("copy", "staged", "staged-one-warp")


def main(path):
    data = json.load(open(path))
    print(f"# The NCHW input staged by tensor copies, replayed without MMAs ({data['gpu']})\n")
    print(
        "Source: `benchmarks/micro/input_staging_bound.cu` (stand-alone; build and run line at its top). "
        f"N = {data['N']}, the single wgmma block's grid and walk, chunks of 16 channels. Time an SM spends "
        "per chunk (µs) with 1, 2 or 3 buffers: `copy` the tensor copies alone, `staged` a producer warp's "
        "copies and 512 threads reading their patches from the buffers, `staged-one-warp` the same with the "
        "copies issued by the consumers' thread 0 once every warp has read a buffer. Boxes: `row32` the "
        "reverted try's three 16-tile boxes (4 rows) per chunk, `2x16` one box of 2 tile rows x 16 tiles "
        "(6 rows x 40 columns x 16 channels), `2x16c8` that box as two of 8 channels. Slots per tile: the "
        "block shape's 32 tile slots over the layer's tiles. CUDA events, median of 7 launches.\n"
    )
    for key, value in data.get("meta", {}).items():
        print(f"- {key}: {value}")
    print()
    heads = " | ".join(f"{m} {b}" for m in MODES for b in (1, 2, 3))
    print(f"| layer | boxes | KB a chunk | slots per tile | {heads} |")
    print("|---|---|---|---|" + "---|" * (3 * len(MODES)))
    table = {}
    for r in data["rows"]:
        table.setdefault((r["layer"], r["boxes"]), {})[(r["mode"], r["buffers"])] = r
    for (layer, boxes), cells in table.items():
        any_row = next(iter(cells.values()))
        values = " | ".join(
            f"{cells[(m, b)]['us_per_chunk']:.2f}" if (m, b) in cells else "-" for m in MODES for b in (1, 2, 3))
        print(f"| {layer} | {boxes} | {any_row['kb_per_chunk']:.1f} | {any_row['tile_slots_per_tile']:.3f} | {values} |")


if __name__ == "__main__":
    main(sys.argv[1])
