#!/usr/bin/env bash
# One device call (docs/wip/split-sweep.patch applied on a branch with `git am`, the branch checked
# out): build, then every wgmma config forced at 1-8 splits (as the launch decides) on the TF32 1x1
# layers, forward and grad_input, NCHW planes and channels_last, batches 1, 8, 16, 32 -- the data for
# a term of the fallback tiles (tiny, small, medium) in cluster_split_estimate, which would replace
# TF32 1x1's lone_splits_only and split margin (docs/precision.md, "Small batches: TF32 1x1 launches
# by terms of their own"). Every output in one archive.
set -uo pipefail
mkdir -p "$OUT/sw"
{ time MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 pip install --no-build-isolation --no-deps -e . ; } > "$OUT/sw/build.log" 2>&1
echo "build rc $?"; tail -3 "$OUT/sw/build.log"
for layout in nchw nhwc; do
  for n in 1 8 16 32; do
    OUT="$OUT/sw" timeout 45 python docs/wip/split_sweep.py --layers R5,R8,R11,Y5,Y9,Y13,Y19 --precision tf32 \
      --layout $layout --passes fwd,gi --batch $n --plain --splits 1,2,3,4,6,8 \
      --configs wgmma-tiny,wgmma-small,wgmma-medium,wgmma-large,wgmma-wide > "$OUT/sw/sweep-$layout-n$n.txt" 2>&1
    echo "sweep $layout n$n rc $?"
  done
done
cd "$OUT" && tar czf sw.tgz sw && rm -rf sw
