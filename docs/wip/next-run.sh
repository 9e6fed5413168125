#!/usr/bin/env bash
# One device call on main (no patch): build, then the depthwise channels_last rows that
# benchmarks/results/depthwise-h200.json lacks -- float32 and float16 forward at batch 1 (frozen and
# trainable) and the float16 forward + backward at batch 32 -- and a rerun of the 16-bit forward rows at
# batch 32, whose rnx-128 rows predate the rows kernel for groups of 4 -- to merge with
#   python benchmarks/merge_results.py benchmarks/results/depthwise-h200.json <the run's json files>
# then python benchmarks/render_readme.py. One archive back ($OUT/all.tgz).
set -uo pipefail
mkdir -p "$OUT/dw"
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 timeout 260 python -m pip install --no-build-isolation --no-deps -e . \
  > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build $SECONDS s"
bench() {  # name, timeout, bench.py arguments
  local name=$1 t=$2; shift 2
  local left=$((580 - SECONDS)); [ $left -lt 25 ] && { echo "skip $name"; return; }
  [ $t -gt $left ] && t=$left
  timeout $t python benchmarks/bench.py --suite depthwise --algorithms cudnn,direct --layout nhwc \
    --out-dir "$OUT/dw/$name" --tag depthwise-h200 "$@" > "$OUT/dw/$name.log" 2>&1; echo "$name rc $?"
}
bench fp32n1 60 --precision fp32 --batch 1 --mode fwd --weights frozen,trainable
bench fp16n1 60 --precision fp16 --batch 1 --mode fwd --weights frozen,trainable
bench fp16bwd 120 --precision fp16 --batch 32 --mode fwdbwd --weights trainable
bench bf16fwd 100 --precision bf16 --batch 32 --mode fwd --weights frozen,trainable
bench fp16fwd 100 --precision fp16 --batch 32 --mode fwd --weights frozen,trainable
cd "$OUT" && tar czf all.tgz dw 2>/dev/null; rm -rf dw
