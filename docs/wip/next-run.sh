#!/usr/bin/env bash
# One device call after `git am docs/wip/weight-grad-finish.patch docs/wip/weight-copy-words.patch
# docs/wip/no-aten-source-copy.patch` on main: build, the whole suite (6 shards), the weight copy
# beside ATen's (weight_copy_ab.py), the grad_weight kernels of the layers whose finish runs
# (pass_kernels.py: the finish kernel's device time beside the GEMM's, or its absence), then the rows
# the patch moves -- grad_weight through the workspace's finish or written by the blocks: TF32
# channels_last at batches 1, 8 and 32 (mma.sync, every split count) and bfloat16 channels_last at
# batch 32 (Y18's splits that clusters do not hold), and the NCHW grad_weight rows that end in the
# weight copy -- under $OUT/rows, to overlay onto benchmarks/results/pass-times-resnet-yolo-h200.json.
# One archive back ($OUT/all.tgz).
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 470 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
left=$((575 - SECONDS))
[ $left -gt 30 ] && timeout 30 python docs/wip/pass_kernels.py --layers R12,Y19,R10 --batch 1 --precision tf32 \
  --layouts nhwc --passes grad_weight 2>&1 | grep -v -i warn | tee "$OUT/gw_kernels.txt" | cut -c1-150
left=$((575 - SECONDS))
[ $left -gt 30 ] && timeout 25 python docs/wip/weight_copy_ab.py 2>&1 | grep -v -i warn | tee "$OUT/copy_ab.txt"
P="python benchmarks/pass_times.py --weights trainable --algorithms gemm"
for run in "b1|$P --suite resnet,yolo --layers R8,R11,R12,Y9,Y13,Y19 --precision tf32 --layout nhwc --batch 1" \
           "b8|$P --suite resnet,yolo --layers R8,R10,R11,R12,Y13,Y19 --precision tf32 --layout nhwc --batch 8" \
           "b32|$P --suite resnet,yolo --layers R10,R12,Y8,Y19 --precision tf32 --layout nhwc --batch 32" \
           "bf16|$P --suite yolo --layers Y18 --precision bf16 --layout nhwc --batch 32" \
           "copy1|$P --suite resnet --layers R12 --precision tf32 --layout nchw --batch 1" \
           "copy8|$P --suite resnet --layers R10,R12 --precision tf32 --layout nchw --batch 8" \
           "copy32|$P --suite resnet --layers R10,R12 --precision bf16 --layout nchw --batch 32"; do
  name=${run%%|*}; cmd=${run#*|}
  left=$((575 - SECONDS)); [ $left -gt 20 ] || { echo "no time for $name"; continue; }
  timeout $((left < 120 ? left : 120)) $cmd --out-dir "$OUT/rows/$name" > "$OUT/$name.log" 2>&1
  tail -n 6 "$OUT/$name.log" | cut -c1-200
done
cd "$OUT" && tar czf all.tgz suite rows ./*.log copy_ab.txt 2>/dev/null; rm -rf suite rows
