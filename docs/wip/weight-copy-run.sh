#!/usr/bin/env bash
# One device call after `git am docs/wip/weight-copy-pipelined.patch` on main: build, the whole suite
# (6 shards), the copy against ATen's (weight_copy_ab.py), and the GEMM NCHW grad_weight rows whose
# channels_last target the copy ends (R10 / R12, TF32 batch 8, bfloat16 batch 32) under $OUT/rows, to
# overlay onto benchmarks/results/pass-times-resnet-yolo-h200.json. One archive back ($OUT/all.tgz).
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 470 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
left=$((575 - SECONDS))
[ $left -gt 20 ] && timeout 25 python docs/wip/weight_copy_ab.py 2>&1 | grep -v -i warn | tee "$OUT/copy_ab.txt"
P="python benchmarks/pass_times.py --weights trainable --suite resnet --layers R10,R12 --algorithms gemm --layout nchw"
for run in "tf32b8|$P --precision tf32 --batch 8" "bf16b32|$P --precision bf16 --batch 32"; do
  name=${run%%|*}; cmd=${run#*|}
  left=$((575 - SECONDS)); [ $left -gt 20 ] || { echo "no time for $name"; continue; }
  timeout $((left < 100 ? left : 100)) $cmd --out-dir "$OUT/rows/$name" > "$OUT/$name.log" 2>&1
  tail -n 3 "$OUT/$name.log" | cut -c1-200
done
cd "$OUT" && tar czf all.tgz suite rows ./*.log copy_ab.txt && rm -rf suite rows
