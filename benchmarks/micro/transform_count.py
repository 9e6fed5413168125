"""Counts transform_count.cu's SASS: the instructions of each kernel's chunk by class, and per
transformed value. Not counted: the launch's fixed instructions and the global stores (and their
uniform-datapath address work) that only keep the results alive; counted instead: the shared-memory
stores the real kernel would issue (`ss8`: each point's 16-bit words, and split its low parts).

usage: python benchmarks/micro/transform_count.py SASS_FILE
"""
import collections
import re
import sys

# kernel (mangled-name part): (name, values a thread transforms per chunk, shared-memory stores per
# chunk in a real kernel)
KERNELS = {"ss8_transformILb1E": ("ss8 split", 64, 16), "ss8_transformILb0E": ("ss8 single", 64, 8),
           "rs_transformILb1E": ("rs split", 32, 0), "rs_transformILb0E": ("rs single", 32, 0)}
NOT_COUNTED = {"STG", "NOP", "EXIT", "BRA", "LDC", "ULDC", "R2UR", "USHF", "ULOP3", "UPRMT", "UIADD3", "UMOV"}


def count(path):
    per_kernel, current = {}, None
    for line in open(path):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = next((k for k in KERNELS if k in m.group(1)), None)
            current = per_kernel.setdefault(name, collections.Counter()) if name else None
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if m and current is not None:
            current[m.group(1)] += 1
    return per_kernel


def main(argv):
    counts = count(argv[0])
    lines = ["| kernel | instructions a chunk (counted) | per transformed value | by class |", "|---|---|---|---|"]
    for key, (name, values, stores) in KERNELS.items():
        c = counts[key]
        core = {k: v for k, v in c.items() if k not in NOT_COUNTED}
        if stores:
            core["STS"] = core.get("STS", 0) + stores
        total = sum(core.values())
        classes = ", ".join(f"{k} {v}" for k, v in sorted(core.items(), key=lambda kv: -kv[1]))
        lines.append(f"| {name} | {total} | {total / values:.2f} | {classes} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
