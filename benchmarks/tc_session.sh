#!/usr/bin/env bash
# The tensor-core benchmark runs of one device session (bench.py's protocol, cuDNN at the same
# precision and layout in the same process), then examples/resnet50.py per precision. The committed
# result files are copied to $OUT and the runs merge into them in place (merge_results.py): copy
# resnet-yolo-h100.* and models-h100.* back from $OUT to benchmarks/results/.
# TC_RUNS picks the runs (default: all of them): half-n32 half-n1 half-nchw tf32-nchw tf32-nhwc tf32-fwdbwd
# resnet50 (tf32-fwdbwd: forward + both gradients in TF32, NCHW, for the gradients' error rows).
set -uo pipefail
RUNS=" ${TC_RUNS:-half-n32 half-n1 half-nchw tf32-nchw tf32-nhwc tf32-fwdbwd resnet50} "
run() { [[ "$RUNS" == *" $1 "* ]]; }
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
cp benchmarks/results/resnet-yolo-h100.json benchmarks/results/models-h100.json "$OUT"/
B="python benchmarks/bench.py --suite resnet,yolo --algorithms cudnn,gemm --rounds 5 --out-dir $OUT --tag resnet-yolo-h100"
run half-n32 && $B --batch 32 --mode fwd,fwdbwd --weights frozen --precision fp16,bf16 --layout nhwc >> "$OUT/bench.log" 2>&1
run half-n1 && $B --batch 1 --mode fwd --weights frozen --precision fp16 --layout nhwc >> "$OUT/bench.log" 2>&1
run half-nchw && $B --batch 32 --mode fwd --weights frozen --precision fp16 --layout nchw >> "$OUT/bench.log" 2>&1
run tf32-nchw && $B --batch 32 --mode fwd --weights frozen --precision tf32 --layout nchw >> "$OUT/bench.log" 2>&1
run tf32-nhwc && $B --batch 32 --mode fwd --weights frozen --precision tf32 --layout nhwc >> "$OUT/bench.log" 2>&1
run tf32-fwdbwd && $B --batch 32 --mode fwdbwd --weights frozen --precision tf32 --layout nchw >> "$OUT/bench.log" 2>&1
if run resnet50; then
  timeout "${RESNET_TIMEOUT:-230}" python examples/resnet50.py --precision "${RESNET_PRECISIONS:-tf32,amp-bf16}" --explain-batch 0 \
    --out-dir "$OUT" --tag resnet50-precision > "$OUT/resnet50.log" 2>&1; echo "resnet50 rc=$?"
  python benchmarks/merge_results.py "$OUT/models-h100.json" "$OUT/resnet50-precision.json" --skip-precision fp32
  rm -f "$OUT"/resnet50-precision.*
fi
python - "$OUT/resnet-yolo-h100.json" <<'PY'
import json, math, sys
all_rows = json.load(open(sys.argv[1]))["rows"]
rows = [r for r in all_rows if r["algorithm"] == "gemm" and r["precision"] != "fp32"]
key = lambda r: (r["precision"], r["layout"], r["N"], r["mode"])
cudnn = {key(r) + (r["layer"],): r for r in all_rows if r["algorithm"] == "cudnn"}
for k in sorted({key(r) for r in rows}):
    sel = [r for r in rows if key(r) == k]
    g = math.exp(sum(math.log(r["ratio"]) for r in sel) / len(sel))
    # Each of output, grad_input and grad_weight against cuDNN's error on the same quantity.
    worst = max(r["errors"][q] / max(cudnn[k + (r["layer"],)]["errors"][q], 1e-30)
                for r in sel for q in r["errors"])
    print(*k, f"geomean {g:.3f}", f"layers {len(sel)}", f"max err/cudnn err (per quantity) {worst:.2f}")
PY
