"""Renders wgmma_rate.cu's JSON (benchmarks/results/wgmma-rate-<gpu>.json) as Markdown.

usage: python benchmarks/micro/render_wgmma_rate.py RESULTS.json > RESULTS.md
"""

import json
import sys

KINDS = ("bf16-ss", "bf16-rs", "e4m3-ss", "e4m3-rs", "tf32-ss")


def main(path):
    data = json.load(open(path))
    print(f"# wgmma rates by shape and operand source ({data['gpu']})\n")
    print(
        "Source: `benchmarks/micro/wgmma_rate.cu` (stand-alone; build and run line at its top). One block per "
        "SM, 1, 2 or 4 warpgroups each issuing m64 x N MMAs over 4 k-steps per iteration into `sets` "
        "accumulator sets, one commit group in flight. `ss`: A and B from shared memory (128-byte swizzled "
        "K-major tiles); `rs`: A from registers. Cells: the fraction of the dense peak per clock and SM "
        "(bfloat16 2048, e4m3 4096, TF32 1024 MACs), at the clock measured on block 0; TFLOP/s in "
        "`benchmarks/results/wgmma-rate-h200.json`. CUDA events, median of 5 launches.\n"
    )
    for key, value in data.get("meta", {}).items():
        print(f"- {key}: {value}")
    print()
    table = {}
    for r in data["rows"]:
        table.setdefault((r["kind"], r["n"]), {})[r["warpgroups"]] = r
    print("| kind | N | sets | 1 warpgroup | 2 | 4 | TFLOP/s (most warpgroups) |")
    print("|---|---|---|---|---|---|---|")
    for kind in KINDS:
        for (k, n), cells in sorted(table.items(), key=lambda kv: kv[0][1]):
            if k != kind:
                continue
            last = cells[max(cells)]
            values = " | ".join(f"{cells[w]['of_peak']:.2f}" if w in cells else "-" for w in (1, 2, 4))
            print(f"| {kind} | {n} | {last['sets']} | {values} | {last['tflops']:.0f} |")
    if data.get("contention"):
        print("\n## The MMAs beside other shared-memory traffic\n")
        print(
            "Two warpgroups run the MMA loop (2 sets) while a third streams accesses until they finish: `lds` / "
            "`sts` 16-byte shared loads / stores, `ldg` 16-byte global loads hitting in L1 (32 KB buffer), `bulk` "
            "one thread's bulk copies of that buffer from L2 into shared memory (four 8 KB copies in flight). "
            "`alone`: the same traffic with no MMAs. Bytes per clock and SM on block 0: the MMAs' shared-memory "
            "operand reads (A and B, or B alone for `rs`, at the rate reached) and the traffic's.\n")
        print("| MMAs | traffic | alone: traffic B/clk | with MMAs: MMA of peak | MMA operand B/clk | traffic B/clk "
              "| sum B/clk |")
        print("|---|---|---|---|---|---|---|")
        pairs = {}
        for r in data["contention"]:
            pairs.setdefault((r["kind"], r["n"], r["traffic"]), {})[r["mmas"]] = r
        for (kind, n, traffic), p in pairs.items():
            a, w = p[False], p[True]
            print(f"| {kind} N = {n} | {traffic} | {a['traffic_bytes_per_clock']:.1f} | {w['mma_of_peak']:.2f} | "
                  f"{w['mma_operand_bytes_per_clock']:.1f} | {w['traffic_bytes_per_clock']:.1f} | "
                  f"{w['sum_bytes_per_clock']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
