#!/usr/bin/env bash
# Why the 16-bit NCHW planes forward (TcNchwPlanesLoader: A read transposed from shared memory) is
# behind the same layer's channels_last forward (A by im2col tensor copies): bfloat16 Y5 and Y9, one
# forward launch each from NCHW and from channels_last under ncu (an installed build: run after a
# build in the same call, ~2 min). Compare: DRAM throughput and bytes (the planes read as they are
# against the copy's), the warp stall reasons (long scoreboard = the cp.async waits; barrier = the
# stage hand-off), shared-memory wavefronts per request (the transposed A reads), and the tensor pipe.
set -uo pipefail
for L in Y5 Y9; do
  for layout in nchw nhwc; do
    timeout 80 ncu --clock-control none --kernel-name regex:tc_conv_wgmma --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats python benchmarks/profile_layer.py --layer $L --precision bf16 --layout $layout \
      --mode fwd --skip-reference --warmup 2 --reps 1 > $OUT/ncu_${L}_bf16_${layout}.txt 2>&1
    echo "ncu $L $layout rc=$?"
    grep -E "Duration|DRAM Throughput|Compute \(SM\) Th|Registers Per|Achieved Occ|Warp Cycles Per Issued" \
      $OUT/ncu_${L}_bf16_${layout}.txt | cut -c1-120
  done
done
