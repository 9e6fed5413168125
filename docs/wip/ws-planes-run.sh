#!/usr/bin/env bash
# One device call after `git am docs/wip/ws-planes.patch` on main: build, the whole suite (6 shards),
# then the 16-bit NCHW 1x1 rows the rule now gives the warp-specialized tile (R3, R8, Y5, Y9 at batch
# 32, bfloat16 and float16; R3 / Y5 at batch 8 too) under $OUT/rows, to overlay onto
# benchmarks/results/pass-times-resnet-yolo-h200.json. One archive back ($OUT/all.tgz).
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 470 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
P="python benchmarks/pass_times.py --weights trainable --suite resnet,yolo --algorithms gemm --layout nchw"
for run in "b32|$P --layers R3,R8,Y5,Y9 --precision bf16,fp16 --batch 32" "b8|$P --layers R3,Y5 --precision bf16 --batch 8"; do
  name=${run%%|*}; cmd=${run#*|}
  left=$((575 - SECONDS)); [ $left -gt 20 ] || { echo "no time for $name"; continue; }
  timeout $((left < 120 ? left : 120)) $cmd --out-dir "$OUT/rows/$name" > "$OUT/$name.log" 2>&1
  tail -n 5 "$OUT/$name.log" | cut -c1-200
done
cd "$OUT" && tar czf all.tgz suite rows ./*.log && rm -rf suite rows
