#!/usr/bin/env bash
# tf32-gw-round-once.patch (on a branch: git am docs/wip/tf32-gw-round-once.patch), one device call
# from the repository root: build, per-pass rows of the GEMM at TF32 channels_last merged by row into
# a copy of the committed file (copy the json and md back after checking), the whole suite (6
# shards), compute-sanitizer memcheck of the TF32 grad_weight tests on channels_last and strided
# sources, the passes that moved more than 3%. Expect the TF32 channels_last grad_weight (mma.sync
# tc-large / tc-medium) to move, nothing else; ~7 min.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/logs; S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
cp $OUT/build.log /tmp/logs/pip.log; rm -f $OUT/build.log $OUT/session.log
cp benchmarks/results/pass-times-resnet-yolo-h200.json $OUT/
t0=$SECONDS
timeout 90 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --out-dir $OUT \
  --precision tf32 --layout nhwc > /tmp/logs/pt.log 2>&1; echo "pt rc=$? $((SECONDS-t0)) s"
t0=$SECONDS
for i in 0 1 2 3 4 5; do TORCHCONV_TEST_SHARD=$i/6 OMP_NUM_THREADS=2 timeout 215 python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2 3 4 5; do tail -1 /tmp/logs/t$i.log | grep -oE '[0-9]+ (passed|failed)' | tr '\n' ' '; echo -n '| '; done)"
grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | head -10
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python -m pytest -q -p no:cacheprovider tests/test_precision.py \
  -k "(test_tf32_grad_weight and not nchw) or test_grad_weight_of_many_splits" > /tmp/logs/mc.log 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|passed|failed" /tmp/logs/mc.log | tail -2
tar czf $OUT/logs.tgz -C /tmp logs
python - <<'PY'
import json, os
out = os.environ["OUT"]
key = lambda r: (r["layer"], r["pass_"], r["precision"])
keep = lambda r: r["algorithm"] == "gemm" and r.get("weights") == "trainable" and r["layout"] == "nhwc" and r["precision"] == "tf32"
old = {key(r): r for r in json.load(open("benchmarks/results/pass-times-resnet-yolo-h200.json"))["rows"] if keep(r)}
for r in json.load(open(os.path.join(out, "pass-times-resnet-yolo-h200.json")))["rows"]:
    if keep(r) and key(r) in old:
        o = old[key(r)]
        if o["choice"] != r["choice"] or abs(r["us"] / o["us"] - 1) > 0.03:
            print(f"PT {r['layer']:4} {r['pass_']:11} {o['us']:7.1f} -> {r['us']:7.1f} (cudnn {o['cudnn_us']:6.1f} -> {r['cudnn_us']:6.1f}) {r['choice'].split(':')[1]}")
PY
