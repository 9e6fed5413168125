#!/usr/bin/env bash
# Where the ping-pong tile's cycles go (docs/precision.md, "Nor the ring's depth"): with
# docs/wip/pingpong.patch applied (`git am -3` on a branch of main), build, then its Y8 forward
# (bfloat16 channels_last, N = 32) under ncu: SM throughput, cycles an issue, the stall reasons
# (average warps a cycle an issue) and the SASS lines with the most stall samples -- to set beside
# cuDNN's (docs/wip/cudnn-sass-ncu.sh). One archive back ($OUT/pp.tgz). ~250 s.
set -uo pipefail
t0=$SECONDS
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 python -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log"; exit 1; }
echo "build $((SECONDS - t0)) s"
mkdir -p "$OUT/p"
cat > "$OUT/p/y8.py" <<'PY'
import torch, torchconv
torchconv.set_config("gemm", "wgmma-pingpong")
fmt = torch.channels_last
x = torch.randn(32, 128, 68, 68, device="cuda", dtype=torch.bfloat16).to(memory_format=fmt)
w = (torch.randn(256, 128, 3, 3, device="cuda", dtype=torch.bfloat16) / 34).to(memory_format=fmt)
for _ in range(4):
    torchconv.conv2d(x, w, None, padding=1, algorithm="gemm")
torch.cuda.synchronize()
print(torchconv.last_choice())
PY
timeout 150 ncu --clock-control none --kernel-name regex:tc_conv_wgmma_pingpong --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section InstructionStats --section WarpStateStats --section SourceCounters \
  --section LaunchStats --section Occupancy -o "$OUT/p/pp" -f python "$OUT/p/y8.py" > "$OUT/p/run.txt" 2>&1
echo "ncu rc=$?"
ncu -i "$OUT/p/pp.ncu-rep" --print-details all > "$OUT/p/ncu_pp.txt" 2>&1
ncu -i "$OUT/p/pp.ncu-rep" --page source --csv --print-source sass > "$OUT/p/sass_pp.csv" 2>&1
ncu -i "$OUT/p/pp.ncu-rep" --page raw --csv > "$OUT/p/raw_pp.csv" 2>&1
grep -E "Duration|Grid Size|Block Size|Registers Per|Compute \(SM\) Throughput|Warp Cycles Per Issued|Issue Slots Busy" \
  "$OUT/p/ncu_pp.txt" | cut -c1-110
python - "$OUT/p/raw_pp.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
h, v = rows[0], rows[-1]
prefix, suffix = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
stalls = []
for name, value in zip(h, v):
    if name.startswith(prefix) and name.endswith(suffix):
        try:
            stalls.append((float(value.replace(",", "")), name[len(prefix):-len(suffix)]))
        except ValueError:
            pass
for value, name in sorted(stalls, reverse=True)[:10]:
    print(f"  {value:6.2f}  {name}")
PY
python docs/wip/ncu_source_top.py "$OUT/p/sass_pp.csv" 2>&1 | sed -n '/Warp Stall/,/Instructions Executed/p' | head -30
rm -f "$OUT/p/pp.ncu-rep"; (cd "$OUT" && tar czf pp.tgz p build.log && rm -rf p build.log)
