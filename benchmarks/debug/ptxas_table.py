"""Registers, spills and shared memory per kernel from `nvcc -Xptxas -v` output (stdin), one line each.
Usage: nvcc ... -Xptxas=-v -c csrc/cuda/direct.cu 2>&1 | python benchmarks/debug/ptxas_table.py [pattern]"""
import re
import subprocess
import sys

pattern = sys.argv[1] if len(sys.argv) > 1 else ""
name = spill = None
for line in sys.stdin:
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
        name = m.group(1)
    elif "spill" in line:
        spill = re.search(r"(\d+) bytes spill stores", line).group(1)
    m = re.search(r"Used (\d+) registers", line)
    if m and name and pattern in name:
        pretty = subprocess.run(["c++filt"], input=name, capture_output=True, text=True).stdout.strip()
        pretty = re.sub(r"torchconv::cuda::\(anonymous namespace\)::", "", pretty)
        print(f"{m.group(1):>4} regs {spill:>4} B spilled  {pretty[:150]}")
        name = None
