#!/usr/bin/env bash
# ncu of the TF32 Wt relayouts of a trainable weight (Y18: 1024 x 512 x 3 x 3, batch 1, NCHW), which
# a trainable weight's forward and grad_input pay over a frozen one's: the transpose kernel of each,
# against the 6.3 µs that reading 18.9 MB at 3 TB/s takes (Wt's writes
# stay in L2). Run after a build; writes $OUT/ncu/.
set -uo pipefail
mkdir -p "$OUT/ncu"
cat > /tmp/y18.py <<'PY'
import torch, torchconv
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
x = torch.randn(1, 512, 17, 17, device="cuda", requires_grad=True)
w = (torch.randn(1024, 512, 3, 3, device="cuda") / 48).requires_grad_(True)
for _ in range(3):
    y = torchconv.conv2d(x, w, None, padding=1, algorithm="gemm")
    (gx,) = torch.autograd.grad(y, (x,), torch.randn_like(y))
torch.cuda.synchronize()
print(torchconv.last_choice())
PY
timeout 100 ncu --clock-control none -k regex:relayout -c 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --section WarpStateStats python /tmp/y18.py > "$OUT/ncu/relayout.txt" 2>&1
echo "ncu relayout rc $?"
timeout 90 ncu --clock-control none -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  python /tmp/y18.py > "$OUT/ncu/times.txt" 2>&1
echo "ncu times rc $?"
grep -E "^  [a-z_]|Duration|gpu__time|dram__bytes|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per" "$OUT/ncu/times.txt" "$OUT/ncu/relayout.txt" | head -80
