#!/usr/bin/env bash
# tf32-1x1-copy-experiment.patch (an experiment, never to land: git am on a branch, then drop it), one
# device call (~4 min): the TF32 channels_last per-pass rows of the GEMM with the rule (1x1 sources
# gathered by the threads, rounded in shared memory) and with TORCHCONV_EXP_TF32_1X1_COPY=1 (a rounded
# channels_last copy first, then the im2col tensor copies), cuDNN in both runs. Prints the 1x1
# layers' forward and grad_input side by side. Results under $OUT only (session diagnostic).
set -uo pipefail
export PYTHONUNBUFFERED=1
S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
rm -f $OUT/build.log $OUT/session.log
L=R3,R5,R8,R11,Y5,Y9,Y13,Y19
mkdir -p $OUT/rule $OUT/copy
timeout 100 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --layers $L \
  --out-dir $OUT/rule --precision tf32 --layout nhwc > $OUT/rule.log 2>&1; echo "rule rc=$?"
TORCHCONV_EXP_TF32_1X1_COPY=1 timeout 100 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm \
  --weights trainable --layers $L --out-dir $OUT/copy --precision tf32 --layout nhwc > $OUT/copy.log 2>&1; echo "copy rc=$?"
python - <<'PY'
import glob, json, os
out = os.environ["OUT"]
def rows(d):
    f = glob.glob(os.path.join(out, d, "*.json"))[0]
    return {(r["layer"], r["pass_"]): r for r in json.load(open(f))["rows"] if r["algorithm"] == "gemm"}
a, b = rows("rule"), rows("copy")
for k in sorted(a):
    if k in b and k[1] != "grad_weight":
        print(f"{k[0]:4} {k[1]:11} rule {a[k]['us']:7.1f} copy {b[k]['us']:7.1f}  cudnn {a[k]['cudnn_us']:6.1f} / {b[k]['cudnn_us']:6.1f}  {b[k]['choice']}")
PY
