#!/usr/bin/env bash
# One device call for docs/wip/phases-columns.patch (`git am -3` on a branch of main): build; the
# whole suite in 6 shards (it holds the strided direct-weight and phase-launch tests); memcheck of the
# strided grad_input read by columns; bfloat16 channels_last rows of the strided layers (R4, R5, R7,
# R10, R11; trainable and frozen) for benchmarks/results/pass-times-resnet-yolo-h200 (overlay by row).
set -uo pipefail
mkdir -p "$OUT/s" "$OUT/suite"
t0=$SECONDS
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 python -m pip install --no-build-isolation --no-deps -e . > "$OUT/s/build.log" 2>&1 \
  || { tail -30 "$OUT/s/build.log"; exit 1; }
echo "build $((SECONDS - t0)) s"
PYTEST_SHARDS=6 BUILD=skip OUT="$OUT/suite" timeout 330 bash benchmarks/gpu_session.sh
echo "suite rc=$? at $SECONDS s"
P="pass_times.py --suite resnet --algorithms gemm --weights trainable,frozen --layout nhwc --precision bf16"
P="$P --layers R4,R5,R7,R10,R11"
PYTEST_SEL=skip MEMCHECK="tests/test_precision.py -k 'reads_a_16_bit_weight_as_it_is and st2'" \
  BUILD=skip OUT="$OUT/s" timeout $((590 - SECONDS)) bash benchmarks/gpu_session.sh "$P"
echo "session rc=$? at $SECONDS s"
(cd "$OUT" && tar czf logs.tgz s/*.log suite/*.log 2>/dev/null; rm -f s/build.log s/bench.log s/sanitizer-*.log suite/tests.log)
