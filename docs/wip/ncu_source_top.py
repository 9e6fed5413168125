"""The instructions of an ncu SASS source page (CSV) that hold the most excessive shared-memory
wavefronts, warp-stall samples and executed instructions, with the kernel's totals:
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python docs/wip/ncu_source_top.py sass.csv
"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main(path, top=25):
    rows = list(csv.reader(open(path, errors="replace")))
    header_at = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    header, data = rows[header_at], rows[header_at + 1:]
    source = header.index("Source")
    for name in ("L1 Wavefronts Shared Excessive", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal",
                 "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if name not in header:
            print("no column", name)
            continue
        col = header.index(name)
        print(f"== {name}: total {sum(number(r[col]) for r in data if len(r) > col):.0f}")
        if name.endswith("Shared") or name.endswith("Ideal"):
            continue
        for r in sorted(data, key=lambda r: -number(r[col]) if len(r) > col else 0.0)[:top]:
            print(f"{number(r[col]):12.0f}  {r[source][:110]}")


if __name__ == "__main__":
    main(sys.argv[1])
