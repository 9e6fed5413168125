"""Renders staged_v_bound.cu's JSON (benchmarks/results/staged-v-bound-<gpu>.json) as Markdown.

usage: python benchmarks/micro/render_staged_v_bound.py RESULTS.json > RESULTS.md
"""

import json
import sys


def main(path):
    data = json.load(open(path))
    rows = data["rows"]
    print(f"# Staged-V Winograd reduction replayed on synthetic operands ({data['device']})\n")
    print(
        "Source: `benchmarks/micro/staged_v_bound.cu` (stand-alone; build and run line at its top). "
        "Each reduction row replays the real kernel's grid, block order, operand runs and pipeline "
        "at N = 32: `full` copies and MMAs, `copy` the copies and mbarriers alone, `mma` the MMAs and "
        "loop alone. `vbulk`: `tf32-wgmma-cluster-vbulk` (64 filters x 64 tiles x 8 points a block, "
        "64 KB a chunk, 3 stages, clusters of 2). `wide`: the wide tile that was tried (128 x 128 x 2 "
        "points, 32 KB a chunk, 4 stages, clusters of 8)."
        + (" `vbulk-f16`: `vbulk` with its operands as float16 (32 KB a chunk, one k16 MMA step where TF32 "
           "takes two k8)." if any(r.get("kernel") == "vbulk-f16" for r in rows) else "")
        + (" `gw-*`: grad_weight's GEMM if its dM and V were staged (filter tiles x channel tiles x the fused "
           "block's slices, 16-tile chunks): `gw-64x32` the fused wgmma grad_weight block's shape (64 filters x "
           "32 channels x 16 points, 96 KB a chunk, 2 stages), `gw-64x32-f16` in 16-bit words (48 KB, 4 stages), "
           "`gw-64x64x8` 64 x 64 x 8 points (64 KB, 3 stages); no clusters."
           if any(str(r.get("kernel", "")).startswith("gw-") for r in rows) else "")
        + (" `vbulk-f16-4st`: the float16 words' kernels as they run (4 stages of 32 KB, clusters of 2); `-rotate`: "
           "chunk c's copies from lane 0 of warp c mod 4, not all from thread 0; `vshare2-f16`: V shared by "
           "filter-block pairs in clusters of 4, each block copying half of every V chunk to both by multicast "
           "(operand GB and copy TB/s: bytes delivered; L2 reads 3/4 of them). `walk-*`: the same as a wave of "
           "persistent clusters, each taking every grid's worth of items on, the next item's chunks right after "
           "the last's (the walking clusters' pipeline without their epilogue; blocks: the grid); `-6st`: six stages "
           "(192 KB, more than fit beside the kernels' M)."
           if any(r.get("kernel") == "vbulk-f16-4st" for r in rows) else "")
        + (" `f4x4-f16-rotate`: F(4x4,3x3) on the staged path (12 of the 36 points a block, 3 a warpgroup, "
           "64 filters x 64 tiles of 4 x 4 outputs, 48 KB of float16 words a chunk, 4 stages, clusters of 3, "
           "copies from the stages' warps; `walk-` walking as above). Its layers' grids are F(4x4)'s (Y8: 9248 "
           "tiles where F(2x2) has 36992); the `walk-f16-rotate` row of Y4 is F(2x2)'s beside it."
           if any(r.get("kernel") == "f4x4-f16-rotate" for r in rows) else "")
        + " CUDA events, median of 7 launches.\n"
    )
    if "meta" in data:
        for key, value in data["meta"].items():
            print(f"- {key}: {value}")
        print()
    print("## Reductions\n")
    print("| kernel | layer | blocks | chunks | full µs | copy µs | mma µs | operand GB | copy TB/s | MMA TFLOP/s (mma) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    table = {}
    for r in rows:
        if "mode" in r:
            table.setdefault((r["kernel"], r["layer"]), {})[r["mode"]] = r
    for (kernel, layer), modes in table.items():
        def us(mode):
            return f"{modes[mode]['us']:.1f}" if mode in modes else "-"

        any_row = next(iter(modes.values()))
        gb = next((m["operand_gb"] for m in modes.values() if m["operand_gb"] > 0), 0.0)
        copy = f"{modes['copy']['tb_per_s']:.2f}" if "copy" in modes else "-"
        mma = f"{modes['mma']['mma_tflops']:.0f}" if "mma" in modes else "-"
        print(f"| {kernel} | {layer} | {any_row['blocks']} | {any_row['chunks']} | {us('full')} | {us('copy')} | "
              f"{us('mma')} | {gb:.3f} | {copy} | {mma} |")
    print("\n## Exchanging 112 KB per block between the blocks of a cluster\n")
    print("| how | cluster | blocks | µs per exchange | GB/s per block |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "us_per_rep" in r:
            print(f"| {r['kernel']} | {r['cluster']} | {r['blocks']} | {r['us_per_rep']:.2f} | {r['gb_per_s_per_block']:.1f} |")
    intake = [r for r in rows if r.get("kernel") == "intake"]
    if intake:
        print("\n## The SMs' intake of bulk copies alone (one block an SM, 32 MB into each block)\n")
        print("Bulk copies from a 16 MB source (`l2`, L2-resident) or a 4 GB one (`dram`) into a ring of slots, one "
              "block an SM, no MMAs. `issuers`: the threads issuing the copies (lane 0 of as many warps, or lanes "
              "0, 8, 16, 24 of one warp); each issuer owns the slots s with s mod issuers its own (a slot's copies "
              "from one thread), or, `a piece each`, every issuer copies its piece of every slot. `pieces a copy`: "
              "the bulk copies a slot's bytes are issued as, all counted on its mbarrier. `bytes counted`: where "
              "the issuer's `mbarrier.arrive.expect_tx` sits. `slots freed by`: the thread that waits for each "
              "slot to land and arrives on its empty mbarrier. Multicast: each block copies 1 / cluster of every "
              "slot to all blocks of its cluster (L2 read once a cluster). Bytes a clock an SM: what lands in each "
              "block, over its own clocks.\n")
        print("| source | blocks | cluster | multicast | issuers | bytes counted | pieces a copy | source order | "
              "slots freed by | copies in flight | copy KB | µs | delivered TB/s | read from L2 TB/s | "
              "bytes a clock an SM |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        arrivals = {0: "before the copy", 1: "after the copy", 2: "before, relaxed"}
        for r in intake:
            n = r.get("producers", 1)
            issuers = f"{n} " + ("lanes of a warp" if r.get("producer_lanes") else "warp" if n == 1 else "warps")
            issuers += ", a piece each" if r.get("split_issue") else ""
            cells = [r["source"], r["blocks"], r["cluster"], "yes" if r["multicast"] else "no", issuers,
                     arrivals[r.get("arrival", 0)], r.get("pieces", 1),
                     "in order" if r.get("sequential") else "scattered",
                     "the copying thread" if r.get("one_thread") else "another warp", r["depth"], r["copy_kb"],
                     f"{r['us']:.1f}", f"{r['delivered_tb_per_s']:.2f}", f"{r['l2_read_tb_per_s']:.2f}",
                     f"{r['bytes_per_clock_sm']:.1f}"]
            print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
