#!/usr/bin/env bash
# The tensor-core benchmark runs of one device session (bench.py's protocol, cuDNN at the same
# precision and layout in the same process), merged into results/resnet-yolo-tc-<gpu>.json, then
# examples/resnet50.py per precision. Writes to $OUT.
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
B="python benchmarks/bench.py --suite resnet,yolo --algorithms cudnn,gemm --rounds 5 --out-dir $OUT"
$B --batch 32 --mode fwd,fwdbwd --weights frozen --precision fp16,bf16 --layout nhwc --tag tc-n32 > "$OUT/bench.log" 2>&1
$B --batch 1 --mode fwd --weights frozen --precision fp16 --layout nhwc --tag tc-n1 >> "$OUT/bench.log" 2>&1
$B --batch 32 --mode fwd --weights frozen --precision tf32 --layout nchw --tag tc-tf32 >> "$OUT/bench.log" 2>&1
python benchmarks/merge_results.py "$OUT/resnet-yolo-tc-h100.json" "$OUT"/tc-n32.json "$OUT"/tc-n1.json "$OUT"/tc-tf32.json
rm -f "$OUT"/tc-n32.* "$OUT"/tc-n1.* "$OUT"/tc-tf32.*
timeout "${RESNET_TIMEOUT:-230}" python examples/resnet50.py --precision "${RESNET_PRECISIONS:-fp32,tf32,amp-bf16}" --explain-batch 0 \
  --out-dir "$OUT" --tag resnet50-precision-h100 > "$OUT/resnet50.log" 2>&1; echo "resnet50 rc=$?"
python - "$OUT/resnet-yolo-tc-h100.json" <<'PY'
import json, math, sys
rows = json.load(open(sys.argv[1]))["rows"]
keys = sorted({(r["precision"], r["layout"], r["N"], r["mode"]) for r in rows if r["algorithm"] == "gemm"})
for k in keys:
    sel = [r for r in rows if r["algorithm"] == "gemm" and (r["precision"], r["layout"], r["N"], r["mode"]) == k]
    g = math.exp(sum(math.log(r["ratio"]) for r in sel) / len(sel))
    worst = max(r["rel_err"] / max(r["reference_rel_err"] or 1e-30, 1e-30) for r in sel)
    print(*k, f"geomean {g:.3f}", f"layers {len(sel)}", f"max err/cudnn err {worst:.2f}")
PY
