#!/usr/bin/env bash
# Device calls after `git am docs/wip/weight-copy-nodiv.patch docs/wip/winograd-16bit-stem-weight.patch
# docs/wip/gemm-padded-grad-weight.patch docs/wip/swizzle-one-place.patch` on main.
# `suite` (one call): build, the whole suite (6 shards), then the kernels of the stems' passes (no
# ATen kernel left: Y0's 16-bit Winograd forward and grad_input, R1's and Y0's GEMM grad_weight).
# `rows` (the next call, on the same build while the machine is warm, else it builds): the GEMM NCHW
# passes whose grad_weight copies its channels_last target into the NCHW weight through the copy
# kernel (R9 / R10 / R12, batches 8 and 32, TF32 and bfloat16), the stems' GEMM passes (R1, Y0) and
# Y0's 16-bit Winograd passes at batch 8, written under $OUT/rows for overlaying onto
# benchmarks/results/pass-times-resnet-yolo-h200.json.
set -uo pipefail
mode="${1:-suite}"
if [ "$mode" = suite ]; then
  PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 480 bash benchmarks/gpu_session.sh > /dev/null 2>&1
  grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
  K="python docs/wip/pass_kernels.py --batch 8 --calls 5"
  for spec in "Y0 forward,grad_input bf16 winograd" "R1,Y0 grad_weight bf16 gemm" "R1,Y0 grad_weight tf32 gemm"; do
    set -- $spec
    left=$((585 - SECONDS)); [ "$left" -gt 15 ] || break
    echo "### $spec" >> "$OUT/stem-kernels.txt"
    timeout $((left < 40 ? left : 40)) $K --layers "$1" --passes "$2" --precision "$3" --algorithm "$4" \
      --layouts nhwc,nchw >> "$OUT/stem-kernels.txt" 2>&1
  done
  grep -E "^###|^[RY][0-9]+ |us  x" "$OUT/stem-kernels.txt" | cut -c1-120
  cd "$OUT" && tar czf all.tgz suite stem-kernels.txt && rm -rf suite
elif [ "$mode" = rows ]; then
  python -c "import torchconv._C" 2>/dev/null || MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 \
    python -m pip install --no-build-isolation --no-deps -e . > /tmp/build.log 2>&1
  P="python benchmarks/pass_times.py --weights trainable"
  G="$P --suite resnet --layers R9,R10,R12 --algorithms gemm --precision tf32,bf16 --layout nchw"
  for run in "gemm8|$G --batch 8" "gemm32|$G --batch 32" \
             "stems|$P --suite resnet,yolo --layers R1,Y0 --algorithms gemm --precision tf32,bf16 --layout nchw,nhwc --batch 8" \
             "y0|$P --suite yolo --layers Y0 --algorithms winograd --precision bf16,fp16 --layout nhwc,nchw --batch 8"; do
    name=${run%%|*}; cmd=${run#*|}
    left=$((585 - SECONDS)); [ $left -gt 20 ] || { echo "no time for $name"; continue; }
    timeout $((left < 150 ? left : 150)) $cmd --out-dir "$OUT/rows/$name" > "$OUT/$name.log" 2>&1
  done
  cd "$OUT" && tar czf all.tgz rows ./*.log && rm -rf rows
  tail -n 4 ./*.log | cut -c1-200
fi
