#!/usr/bin/env bash
# Result rows at the landed code (one device call from the repository root): build, the GEMM's
# forward+backward with a trainable weight against cuDNN (resnet + yolo, N = 32) at bf16 / fp16
# channels_last and TF32 NCHW, then per-pass device times at bf16 / fp16 channels_last (their rows in
# pass-times-resnet-yolo-h200 predate the cluster split sums). Both tools merge by row into the
# committed files, copied to $OUT first: check the rows, then copy the files (json and md) back over.
set -uo pipefail
export PYTHONUNBUFFERED=1
S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > $OUT/gs.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"; head -4 $OUT/session.log | tail -2
cp benchmarks/results/resnet-yolo-h200.json benchmarks/results/pass-times-resnet-yolo-h200.json $OUT/
run() {  # cap, command...
  local cap=$1; shift
  local left=$((585 - (SECONDS - S))); [ $left -gt $cap ] && left=$cap
  [ $left -lt 20 ] && { echo "skip: $*"; return; }
  local t0=$SECONDS
  timeout $left python "$@" --out-dir $OUT >> $OUT/bench.log 2>&1; echo "rc=$? $((SECONDS-t0)) s: $*" | cut -c1-200
}
B="benchmarks/bench.py --suite resnet,yolo --algorithms cudnn,gemm --batch 32 --mode fwdbwd --weights trainable"
run 110 $B --precision bf16 --layout nhwc
run 110 $B --precision fp16 --layout nhwc
run 110 $B --precision tf32 --layout nchw
P="benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable"
run 100 $P --precision bf16 --layout nhwc
run 100 $P --precision fp16 --layout nhwc
ls $OUT
grep -E "wrote|geomean|Error|error" $OUT/bench.log | tail -12 | cut -c1-200
