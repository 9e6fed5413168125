#!/usr/bin/env bash
# One device call for docs/wip/tf32-weight-relayout.patch and split-terms.patch on top of it (applied
# on a branch, `git am` each, the branch checked out): build + whole suite in 6 shards, then the TF32
# NCHW trainable rows of the 3x3 layers whose Wt it re-lays (batches 1, 8, 32; cuDNN in the same run),
# every output in one archive.
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 420 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR" "$OUT/suite/session.log"
mkdir -p "$OUT/rows"
for n in 1 8 32; do
  timeout 60 python benchmarks/pass_times.py --suite resnet,yolo --batch $n --precision tf32 --layout nchw \
    --algorithms gemm --weights trainable --layers R6,R7,R9,R10,R12,Y8,Y12,Y18 \
    --out-dir "$OUT/rows/n$n" > "$OUT/rows/log$n.txt" 2>&1
  echo "rows n$n rc $?"
done
cd "$OUT" && tar czf out.tgz suite rows && rm -rf suite rows
