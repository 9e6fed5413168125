#!/usr/bin/env bash
# One device call after `git am docs/wip/weight-copy-pipelined.patch docs/wip/ws-planes.patch
# docs/wip/gw-small-grid-splits.patch` on main (the three patches, one build): build, the whole suite
# (6 shards), the weight copy against ATen's, then the rows each patch moves -- GEMM NCHW grad_weight
# R10 / R12 (TF32 batch 8, bfloat16 batch 32), the 16-bit NCHW 1x1 passes R3, R8, Y5, Y9 (batch 32,
# bfloat16 and float16), the TF32 passes of the deep layers at batches 1 and 8 (grad_weight's
# small-grid splits) -- under $OUT/rows, to overlay onto
# benchmarks/results/pass-times-resnet-yolo-h200.json. One archive back ($OUT/all.tgz).
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 470 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
left=$((575 - SECONDS))
[ $left -gt 20 ] && timeout 25 python docs/wip/weight_copy_ab.py 2>&1 | grep -v -i warn | tee "$OUT/copy_ab.txt"
P="python benchmarks/pass_times.py --weights trainable --algorithms gemm"
for run in "planes|$P --suite resnet,yolo --layers R3,R8,Y5,Y9 --precision bf16,fp16 --layout nchw --batch 32" \
           "gw8|$P --suite resnet --layers R10,R12 --precision tf32 --layout nchw --batch 8" \
           "gw32|$P --suite resnet --layers R10,R12 --precision bf16 --layout nchw --batch 32" \
           "tf32b1|$P --suite resnet,yolo --layers R11,R12,Y13,Y19 --precision tf32 --layout nchw,nhwc --batch 1" \
           "tf32b8|$P --suite resnet,yolo --layers R8,R11,Y13,Y19 --precision tf32 --layout nchw,nhwc --batch 8"; do
  name=${run%%|*}; cmd=${run#*|}
  left=$((575 - SECONDS)); [ $left -gt 20 ] || { echo "no time for $name"; continue; }
  timeout $((left < 120 ? left : 120)) $cmd --out-dir "$OUT/rows/$name" > "$OUT/$name.log" 2>&1
  tail -n 5 "$OUT/$name.log" | cut -c1-200
done
cd "$OUT" && tar czf all.tgz suite rows ./*.log copy_ab.txt 2>/dev/null; rm -rf suite rows
