#!/usr/bin/env bash
# Where the instructions of Y0's forward go (bfloat16 channels_last, `wgmma-medium`, 74 000 blocks of 2
# chunks; an RGB stem padded to 8 channels): one launch under ncu with the source counters, the SASS
# source page exported (an installed build: run after a build in the same call, ~2 min).
# Read: instructions executed per SASS run of equal counts (once a block = before the loop and the
# epilogue, twice = the loop of 2 chunks), the stall samples, and the issue-slot use.
set -uo pipefail
timeout 240 ncu --clock-control none --kernel-name regex:tc_conv_wgmma --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
  --section SourceCounters --section InstructionStats --import-source yes -o $OUT/y0 -f \
  python benchmarks/profile_layer.py --layer Y0 --precision bf16 --layout nhwc --mode fwd --skip-reference \
  --warmup 2 --reps 1 > $OUT/ncu_y0_run.txt 2>&1
echo "ncu rc=$?"
ncu -i $OUT/y0.ncu-rep --print-details all > $OUT/ncu_y0.txt 2>&1
ncu -i $OUT/y0.ncu-rep --page source --csv --print-source sass > $OUT/sass_y0.csv 2>&1
python docs/wip/ncu_source_top.py $OUT/sass_y0.csv > $OUT/top_sass_y0.txt 2>&1
grep -E "Duration|Issue Slots|Executed Ipc|Warp Cycles Per Issued|Achieved Occ|Registers Per|DRAM Throughput|Compute \(SM\)" \
  $OUT/ncu_y0.txt | cut -c1-120
head -30 $OUT/top_sass_y0.txt
# A device call returns only a few files: one archive of them all.
(cd $OUT && tar czf ncu.tgz ncu_* sass_* top_* && rm -f ncu_* sass_* top_* y0.ncu-rep)
