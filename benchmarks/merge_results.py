"""Merges bench.py result files of one suite run in several invocations (different batches,
precisions or layouts) into one file, JSON and Markdown:

    python benchmarks/merge_results.py results/resnet-yolo-tc-h100.json a.json b.json ...
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import write_markdown  # noqa: E402


def merge(out_path, paths):
    parts = [json.load(open(p)) for p in paths]
    merged = {"meta": parts[0]["meta"], "argv": [p["argv"] for p in parts],
              "rows": [r for p in parts for r in p["rows"]], "profile": None}
    with open(out_path, "w") as f:
        json.dump(merged, f, indent=1)
    write_markdown(os.path.splitext(out_path)[0] + ".md", merged["meta"], merged["rows"], {})
    return merged


if __name__ == "__main__":
    merge(sys.argv[1], sys.argv[2:])
    print(f"wrote {sys.argv[1]} from {len(sys.argv) - 2} files")
