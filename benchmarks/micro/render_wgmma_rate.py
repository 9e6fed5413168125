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


if __name__ == "__main__":
    main(sys.argv[1])
