#!/usr/bin/env bash
# One device call for docs/wip/loads-only.patch (an experiment, never to land), after `git am` of it
# on a branch: build, then pass_times of the bfloat16 channels_last large layers with the rule and
# wide, large, medium and ws forced, under TORCHCONV_EXP_NO_MMA=1 (every chunk's loads, barriers and
# waits, no MMAs: the outputs are wrong, the times are the loads' pace), printed beside the committed
# rows of the same passes (benchmarks/results/pass-times-resnet-yolo-h200.json, main's kernels: the
# patch's build serializes its MMAs behind the switch, so its own times with MMAs are not main's).
# A tile whose loads alone take most of its time is bound by them. (~250 s)
set -uo pipefail
export PYTHONUNBUFFERED=1
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 python -m pip install --no-build-isolation --no-deps -e . \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $SECONDS s"
P="--suite resnet,yolo --algorithms gemm --configs gemm:wgmma-wide,gemm:wgmma-large,gemm:wgmma-medium,gemm:wgmma-ws"
P="$P --weights trainable --layout nhwc --precision bf16 --layers R6,R9,R12,Y4,Y8,Y12,Y18"
TORCHCONV_EXP_NO_MMA=1 timeout 200 python benchmarks/pass_times.py $P --out-dir "$OUT/loads" > "$OUT/loads.log" 2>&1
echo "pass_times rc=$? at $SECONDS s"
python - "$OUT" <<'PY'
import glob, json, sys
def load(path):
    rows = json.load(open(path))["rows"]
    return {(r["layer"], r["pass_"], r["algorithm"]): r["us"] for r in rows
            if r.get("precision") == "bf16" and r.get("layout") == "nhwc" and r.get("weights") == "trainable"}
full = load("benchmarks/results/pass-times-resnet-yolo-h200.json")
loads = load(glob.glob(f"{sys.argv[1]}/loads/pass-times-*.json")[0])
print("layer pass contender: committed us / loads only us (ratio)")
for key in sorted(loads):
    if key[2] != "cudnn" and key[1] != "grad_weight" and key in full:
        print(*key, f"{full[key]:.1f} / {loads[key]:.1f} ({loads[key] / full[key]:.2f})")
PY
(cd "$OUT" && tar czf logs.tgz build.log loads loads.log)
