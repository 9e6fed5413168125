#!/usr/bin/env bash
# One device call after `git am docs/wip/staged-sums-unroll.patch docs/wip/tf32-weigh-clusters.patch`
# on main: build, the whole suite (6 shards), the TF32 channels_last grad_weight kernels at batch 1
# (pass_kernels.py), then the rows the patches move -- TF32 channels_last grad_weight of one split
# (R10 / R11 / R12 at batches 1 and 8), of splits as clusters (Y19 and R8 at batch 1, R11 at batch 8;
# R8's 7 splits take two rounds of four loads), and the split counts the clusters' estimate may move
# (batch 32: R10, R12, Y8, Y19; batch 8: Y13, Y19) -- under $OUT/rows, to overlay onto
# benchmarks/results/pass-times-resnet-yolo-h200.json. One archive back ($OUT/all.tgz).
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 470 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
left=$((575 - SECONDS))
[ $left -gt 30 ] && timeout 30 python docs/wip/pass_kernels.py --layers R11,R12,Y19,R8 --batch 1 --precision tf32 \
  --layouts nhwc --passes grad_weight 2>&1 | grep -v -i warn | tee "$OUT/gw_kernels.txt" | cut -c1-150
P="python benchmarks/pass_times.py --weights trainable --algorithms gemm"
for run in "b1|$P --suite resnet,yolo --layers R8,R10,R11,R12,Y19 --precision tf32 --layout nhwc --batch 1" \
           "b8|$P --suite resnet,yolo --layers R10,R11,R12,Y13,Y19 --precision tf32 --layout nhwc --batch 8" \
           "b32|$P --suite resnet,yolo --layers R10,R12,Y8,Y19 --precision tf32 --layout nhwc --batch 32"; do
  name=${run%%|*}; cmd=${run#*|}
  left=$((575 - SECONDS)); [ $left -gt 20 ] || { echo "no time for $name"; continue; }
  timeout $((left < 120 ? left : 120)) $cmd --out-dir "$OUT/rows/$name" > "$OUT/$name.log" 2>&1
  tail -n 6 "$OUT/$name.log" | cut -c1-200
done
cd "$OUT" && tar czf all.tgz suite rows ./*.log gw_kernels.txt 2>/dev/null; rm -rf suite rows
