"""Renders cluster_placement.cu's JSON (benchmarks/results/cluster-placement-<gpu>.json) as Markdown.

usage: python benchmarks/micro/render_cluster_placement.py RESULTS.json > RESULTS.md
"""

import json
import sys


def main(path):
    data = json.load(open(path))
    print(f"# Where thread-block clusters put their blocks ({data['gpu']}, {data['sms']} SMs)\n")
    print(
        "Source: `benchmarks/micro/cluster_placement.cu` (stand-alone; build and run line at its top). A kernel "
        "of 256 threads that may hold two blocks an SM. Capacity: the occupancy query's clusters of each size "
        "held at once with the kernel's shared memory (two blocks an SM) and with just over half an SM's "
        "(one an SM) -- what the GEMM's split estimate asks (`tc_lone_clusters_by_size`). Launches: every "
        "block of a launch of that many clusters resident at once; the SMs its blocks used and how many of "
        "them held two.\n")
    print("| cluster size | clusters, two blocks an SM | clusters, one an SM |")
    print("|---|---|---|")
    for c in data["capacity"]:
        print(f"| {c['size']} | {c['clusters_two_an_sm']} | {c['clusters_one_an_sm']} |")
    print("\n| cluster size | clusters | blocks | one-an-SM capacity | SMs used | SMs with two | all resident |")
    print("|---|---|---|---|---|---|---|")
    for r in data["launches"]:
        resident = "no" if r["not_all_resident"] else "yes"
        print(f"| {r['size']} | {r['clusters']} | {r['blocks']} | {r['lone_capacity']} | {r['sms_used']} "
              f"| {r['sms_with_two']} | {resident} |")


if __name__ == "__main__":
    main(sys.argv[1])
