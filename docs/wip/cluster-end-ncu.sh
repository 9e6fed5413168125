#!/usr/bin/env bash
# Where the end of a split grad_weight through a cluster (tc_weight_grad_cluster_finish) spends its
# time: R12 (N = 32) grad_weight in bfloat16 channels_last (its cluster kernel 38.5 µs against 34.4 for
# the same kernel writing a workspace, same 3 splits; profiler, session diagnostic) and in TF32 NCHW
# (~11 µs a wave of clusters). One launch each under ncu (an installed build: run after a build in the
# same call). Read: the warp stall reasons (barrier = the cluster barriers; long scoreboard = the DSMEM
# and global loads), the source lines with most stall samples, and the global stores' sectors per
# request (the finish stores gw element by element: 2- or 4-byte stores, strided in NCHW).
set -uo pipefail
for case in "bf16 nhwc" "tf32 nchw"; do
  set -- $case
  timeout 150 ncu --clock-control none --kernel-name regex:tc_weight_grad_wgmma --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis_Tables --section SourceCounters \
    --section LaunchStats --section Occupancy --print-details all python benchmarks/profile_layer.py --layer R12 --precision $1 --layout $2 --mode fwdbwd \
    --skip-reference --warmup 2 --reps 1 > $OUT/ncu_R12_$1_$2.txt 2>&1
  echo "ncu R12 $1 $2 rc=$?"
  # Per instruction (which copies' shared stores are excessive): the SASS source page of a saved report.
  ncu --clock-control none --kernel-name regex:tc_weight_grad_wgmma --launch-skip 2 --launch-count 1 \
    --section SourceCounters --import-source yes -o $OUT/R12_$1_$2 -f python benchmarks/profile_layer.py --layer R12 \
    --precision $1 --layout $2 --mode fwdbwd --skip-reference --warmup 2 --reps 1 > /dev/null 2>&1
  ncu -i $OUT/R12_$1_$2.ncu-rep --page source --csv --print-source sass > $OUT/sass_R12_$1_$2.csv 2>&1
  python docs/wip/ncu_source_top.py $OUT/sass_R12_$1_$2.csv > $OUT/top_R12_$1_$2.txt 2>&1
  rm -f $OUT/R12_$1_$2.ncu-rep
  grep -E "Duration|Stall|stall|Uncoalesced|sectors|Cluster|Est. Speedup" $OUT/ncu_R12_$1_$2.txt | cut -c1-160 | head -30
done
# A device call returns only a few files: one archive of them all.
(cd $OUT && tar czf ncu.tgz ncu_* sass_* top_* && rm -f ncu_* sass_* top_*)
