#!/usr/bin/env bash
# Where a 16-bit 1x1 forward block spends its life (run after a build in the same call, ~2 min). The
# channels_last bfloat16 1x1 layers run at 1.2-3.3x their HBM bound (cuDNN 1.1-2.4x), and a split
# sweep's forced configs (docs/wip/README.md) put a wave of blocks at ~4.5 µs + ~0.6 µs a chunk
# whatever the tile (Y5 forward: 18 waves of large tiles 87 µs, 12 waves of medium ones 63; Y9
# grad_input: 9 waves of large tiles with 2 chunks each, 50.9 µs), like the config estimate's
# kBlockFixedChunks = 20. This run says what the fixed part is: the forward of Y9 (4 chunks a block)
# and Y19 (16 chunks) under ncu, one launch each (the rule's large tile for both).
# Read: Duration and DRAM throughput (SpeedOfLight), the warp stall reasons (WarpStateStats: long
# scoreboard / barrier / membar / wait), the source lines with most stall samples (SourceCounters: the
# prologue's mbarrier and tensor-map setup, the first chunk's wait, the epilogue's staging and
# stores), and the launch's blocks per SM (LaunchStats / Occupancy).
set -uo pipefail
for layer in Y9 Y19; do
  timeout 150 ncu --clock-control none --kernel-name regex:tc_conv_wgmma --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis_Tables --section SourceCounters \
    python benchmarks/profile_layer.py --layer $layer --precision bf16 --layout nhwc --mode fwd --skip-reference \
    --warmup 2 --reps 1 > $OUT/ncu_${layer}_bf16_fwd.txt 2>&1
  echo "ncu $layer rc=$?"
  grep -E "Duration|DRAM Throughput|Stall|stall|Block Limit|Achieved Occupancy|Est. Speedup" $OUT/ncu_${layer}_bf16_fwd.txt \
    | cut -c1-160 | head -30
done
