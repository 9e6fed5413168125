#!/usr/bin/env bash
# One device call after `git am docs/wip/weight-copy-nodiv.patch` on main: build, the whole suite
# (6 shards), then the GEMM NCHW rows whose grad_weight copies its channels_last target into the NCHW
# weight through the kernel (R10 / R12 at batch 8 in TF32 and bfloat16, at batch 32 in bfloat16),
# written under $OUT/rows for overlaying onto benchmarks/results/pass-times-resnet-yolo-h200.json.
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 480 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
P="python benchmarks/pass_times.py --suite resnet --weights trainable --layers R9,R10,R12 --algorithms gemm --precision tf32,bf16 --layout nchw"
left=$((590 - SECONDS)); [ $left -gt 30 ] && timeout $((left / 2)) $P --batch 8 --out-dir "$OUT/rows/gemm8" > "$OUT/gemm8.log" 2>&1
left=$((590 - SECONDS)); [ $left -gt 20 ] && timeout $left $P --batch 32 --out-dir "$OUT/rows/gemm32" > "$OUT/gemm32.log" 2>&1
cd "$OUT" && tar czf all.tgz suite rows ./*.log 2>/dev/null && rm -rf suite
tail -n 6 gemm8.log gemm32.log 2>/dev/null | cut -c1-200
