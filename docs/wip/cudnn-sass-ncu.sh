#!/usr/bin/env bash
# What cuDNN's kernels for one 3x3 layer execute (no build needed): its forward and grad_input kernels
# of Y8 (bfloat16 channels_last, N = 32) under ncu, then per kernel the launch shape (grid, cluster),
# the SASS lines with the most stall samples and the executed count of the copy, barrier and MMA
# opcodes -- which tiles, copies and hand-over it uses (docs/precision.md, "cuDNN's Y8 forward beside
# ours"). One archive back ($OUT/ncu.tgz). ~30 s.
set -uo pipefail
mkdir -p "$OUT/n"
cat > "$OUT/n/cudnn_y8.py" <<'PY'
import torch, torch.nn.functional as F
torch.backends.cudnn.benchmark = True
fmt = torch.channels_last
x = torch.randn(32, 128, 68, 68, device="cuda", dtype=torch.bfloat16).to(memory_format=fmt).requires_grad_()
w = (torch.randn(256, 128, 3, 3, device="cuda", dtype=torch.bfloat16) / 34).to(memory_format=fmt).requires_grad_()
g = torch.randn(32, 256, 68, 68, device="cuda", dtype=torch.bfloat16).to(memory_format=fmt)
for _ in range(4):
    F.conv2d(x, w, padding=1).backward(g)
torch.cuda.synchronize()
PY
for spec in fprop:sm90_xmma_fprop dgrad:sm90_xmma_dgrad; do
  IFS=: read -r name rx <<< "$spec"
  timeout 150 ncu --clock-control none --kernel-name regex:$rx --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section InstructionStats --section WarpStateStats --section SourceCounters --section LaunchStats \
    -o "$OUT/n/$name" -f python "$OUT/n/cudnn_y8.py" > "$OUT/n/run_$name.txt" 2>&1
  echo "== $name rc=$?"
  ncu -i "$OUT/n/$name.ncu-rep" --print-details all > "$OUT/n/ncu_$name.txt" 2>&1
  ncu -i "$OUT/n/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/n/sass_$name.csv" 2>&1
  grep -E "Duration|Grid Size|Cluster Size|Block Size|Warp Cycles Per Issued" "$OUT/n/ncu_$name.txt" | cut -c1-110
  python docs/wip/ncu_source_top.py "$OUT/n/sass_$name.csv" 2>&1 | sed -n '/Warp Stall/,/Instructions Executed/p' | head -26
  python - "$OUT/n/sass_$name.csv" <<'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
h = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
head, data = rows[h], rows[h + 1:]
src, ex = head.index("Source"), head.index("Instructions Executed")
kinds = ("UTMA", "UBLK", "LDGSTS", "SYNCS", "BAR", "HGMMA", "STG", "LDG", "STS", "LDS", "ELECT", "UCGABAR", "FENCE")
count = collections.Counter()
for r in data:
    words = r[src].split()
    if not words or len(r) <= ex:
        continue
    op = words[1] if words[0].startswith("@") else words[0]
    if any(k in op for k in kinds):
        count[op] += float(r[ex].replace(",", "") or 0)
for op, n in count.most_common():
    print(f"  {n:12.0f}  {op}")
PY
done
(cd "$OUT/n" && rm -f ./*.ncu-rep && tar czf ../ncu.tgz .) && rm -rf "$OUT/n"
