#!/usr/bin/env bash
# Device calls after `git am docs/wip/weight-copy.patch docs/wip/winograd-strided-filters.patch` on
# main. `suite` (one call): build, the whole suite, then every suite layer's passes at batch 8 checked
# for kernels not ours (pass_kernels.py --foreign-only; before the patches: Winograd's weight copy in
# every channels_last trainable pass, Winograd's TF32 grad_weight copy, the GEMM's NCHW grad_weight
# copy of several taps). `rows` (the next call, on the same build while the machine is warm, else it
# builds): the per-pass rows the copies were part of, written under $OUT/rows for overlaying onto
# benchmarks/results/pass-times-resnet-yolo-h200.json.
set -uo pipefail
mode="${1:-suite}"
if [ "$mode" = suite ]; then
  PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 480 bash benchmarks/gpu_session.sh > /dev/null 2>&1
  grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
  F="$OUT/foreign.txt"
  D="python docs/wip/pass_kernels.py --layers all --batch 8 --passes forward,grad_input,grad_weight --calls 5 --foreign-only"
  for spec in "tf32 nchw,nhwc gemm" "bf16 nhwc,nchw gemm" "bf16 nhwc,nchw winograd" "tf32 nchw,nhwc winograd"; do
    set -- $spec
    echo "### $spec" >> "$F"
    timeout 60 $D --precision "$1" --layouts "$2" --algorithm "$3" >> "$F" 2>&1
  done
  grep -E "^###|checked|^[RY][0-9]+ " "$F" | cut -c1-120
  cd "$OUT" && tar czf all.tgz suite foreign.txt && rm -rf suite
elif [ "$mode" = rows ]; then
  python -c "import torchconv._C" 2>/dev/null || MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 \
    python -m pip install --no-build-isolation --no-deps -e . > /tmp/build.log 2>&1
  P="python benchmarks/pass_times.py --suite resnet,yolo --weights trainable"
  $P --batch 32 --layers R2,R6,R9,R12,Y2,Y4,Y8,Y12,Y18 --algorithms winograd --precision bf16,tf32 --layout nhwc \
    --out-dir "$OUT/rows/wino32" > "$OUT/wino32.log" 2>&1
  $P --batch 8 --layers R7,R9,R10,R12,Y12,Y18 --algorithms gemm --precision tf32,bf16 --layout nchw \
    --out-dir "$OUT/rows/gemm8" > "$OUT/gemm8.log" 2>&1
  $P --batch 32 --layers R7,R9,R10,R12,Y12,Y18 --algorithms gemm --precision tf32,bf16 --layout nchw \
    --out-dir "$OUT/rows/gemm32" > "$OUT/gemm32.log" 2>&1
  cd "$OUT" && tar czf all.tgz rows ./*.log && rm -rf rows
  tail -3 wino32.log gemm8.log gemm32.log
fi
