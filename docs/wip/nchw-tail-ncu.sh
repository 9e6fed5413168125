#!/usr/bin/env bash
# Where Y19's 16-bit NCHW forward loses with the last wave's tiles split (committed rows: 57.3 µs
# whole, 61.1 with the large tile's last wave split in 4; channels_last 30.7 -> 28.8). Run on main
# after a build in the same call (~3 min). The rule's launch (wgmma-large/splits=4/tail) against the
# same tile whole (a forced config runs unsplit), NCHW and channels_last, timed by CUDA events, then
# each forward kernel under ncu. Read: the tail launch's Duration against the whole one's, SM active
# cycles against elapsed (the tail wave's share), and in the stall sampling whether the NCHW tail's
# time sits in tc_cluster_split_sums (its reads of each split's sums a row per thread from distributed
# shared memory, its 2-byte stores) or elsewhere -- before changing the NCHW cluster finish.
set -uo pipefail
run() {  # $1 = label, $2 = layout, $3 = forced config or ''
  TORCHCONV_GEMM_CONFIG=$3 python benchmarks/profile_layer.py --layer Y19 --precision fp16 --layout $2 --mode fwd \
    --skip-reference --warmup 3 --reps 20 | tail -1
  TORCHCONV_GEMM_CONFIG=$3 timeout 120 ncu --clock-control none --kernel-name regex:tc_conv_wgmma --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats --section SourceCounters \
    --print-details all python benchmarks/profile_layer.py --layer Y19 --precision fp16 --layout $2 --mode fwd \
    --skip-reference --warmup 2 --reps 1 > $OUT/ncu_Y19_fp16_$1.txt 2>&1
  echo "ncu $1 rc=$?"
  grep -E "^\s+(Duration|Elapsed Cycles|SM Active Cycles|Grid Size|Cluster Size)" $OUT/ncu_Y19_fp16_$1.txt | cut -c1-120
}
run nchw-tail nchw ''
run nchw-whole nchw wgmma-large
run nhwc-tail nhwc ''
run nhwc-whole nhwc wgmma-large
