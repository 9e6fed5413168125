#!/usr/bin/env bash
# One device call after `git am docs/wip/weight-copy-nodiv.patch docs/wip/winograd-16bit-stem-weight.patch`
# on main: build, the whole suite (6 shards), the kernels of Y0's 16-bit Winograd passes (no ATen cast
# of the weight left), then rows: the GEMM NCHW passes whose grad_weight copies its channels_last
# target into the NCHW weight through the copy kernel (R9 / R10 / R12, batches 8 and 32, TF32 and
# bfloat16) and Y0's 16-bit Winograd passes at batches 1 and 8; written under $OUT/rows for
# overlaying onto benchmarks/results/pass-times-resnet-yolo-h200.json.
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 480 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
timeout 40 python docs/wip/pass_kernels.py --layers Y0 --batch 8 --passes forward,grad_input --calls 5 \
  --precision bf16 --layouts nhwc,nchw --algorithm winograd > "$OUT/y0-kernels.txt" 2>&1
grep -E "^[RY][0-9]+ |us  x" "$OUT/y0-kernels.txt" | cut -c1-120
P="python benchmarks/pass_times.py --weights trainable"
G="$P --suite resnet --layers R9,R10,R12 --algorithms gemm --precision tf32,bf16 --layout nchw"
W="$P --suite yolo --layers Y0 --algorithms winograd --precision bf16,fp16 --layout nhwc,nchw"
for run in "gemm8|$G --batch 8" "gemm32|$G --batch 32" "y0b1|$W --batch 1" "y0b8|$W --batch 8"; do
  name=${run%%|*}; cmd=${run#*|}
  left=$((590 - SECONDS)); [ $left -gt 20 ] || { echo "no time for $name"; continue; }
  timeout $((left < 90 ? left : 90)) $cmd --out-dir "$OUT/rows/$name" > "$OUT/$name.log" 2>&1
done
cd "$OUT" && tar czf all.tgz suite rows ./*.log y0-kernels.txt 2>/dev/null && rm -rf suite
tail -n 4 ./*.log 2>/dev/null | cut -c1-200
