#!/usr/bin/env bash
# The three landable patches in one device call (~9 min; to check one alone, git am only that one): on a
# branch, `git am docs/wip/auto-rgb-stems.patch docs/wip/nchw-source-copies.patch
# docs/wip/tf32-gw-round-once.patch`, then run this from the repository root. One build; the rule's
# GPU tests; per-pass rows of the GEMM at TF32 NCHW and channels_last merged by row into a copy of
# the committed file (copy json and md back after checking); the whole suite (6 shards); memcheck
# of the tests of both kernels; the passes that moved more than 3%. A failing test names its patch:
# test_tuning / models' stems -> auto-rgb-stems; NCHW-source tests -> nchw-source-copies; TF32
# grad_weight on channels_last or strided sources -> tf32-gw-round-once.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/logs; S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
cp $OUT/build.log /tmp/logs/pip.log; rm -f $OUT/build.log $OUT/session.log
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_tuning.py tests/test_reliability.py tests/test_module.py \
  > /tmp/logs/rule.log 2>&1; echo "rule tests rc=$? $(tail -1 /tmp/logs/rule.log)"
cp benchmarks/results/pass-times-resnet-yolo-h200.json $OUT/
t0=$SECONDS
timeout 150 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --out-dir $OUT \
  --precision tf32 --layout nchw,nhwc > /tmp/logs/pt.log 2>&1; echo "pt rc=$? $((SECONDS-t0)) s"
t0=$SECONDS
for i in 0 1 2 3 4 5; do TORCHCONV_TEST_SHARD=$i/6 OMP_NUM_THREADS=2 timeout 215 python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2 3 4 5; do tail -1 /tmp/logs/t$i.log | grep -oE '[0-9]+ (passed|failed)' | tr '\n' ' '; echo -n '| '; done)"
grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | head -10
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python -m pytest -q -p no:cacheprovider tests/test_precision.py \
  -k "test_tf32_1x1_nchw_source or (test_tf32_grad_weight and not nchw)" > /tmp/logs/mc.log 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|passed|failed" /tmp/logs/mc.log | tail -2
tar czf $OUT/logs.tgz -C /tmp logs
python - <<'PY'
import json, os
out = os.environ["OUT"]
key = lambda r: (r["layer"], r["pass_"], r["precision"], r["layout"])
keep = lambda r: r["algorithm"] == "gemm" and r.get("weights") == "trainable" and r["precision"] == "tf32"
old = {key(r): r for r in json.load(open("benchmarks/results/pass-times-resnet-yolo-h200.json"))["rows"] if keep(r)}
for r in json.load(open(os.path.join(out, "pass-times-resnet-yolo-h200.json")))["rows"]:
    if keep(r) and key(r) in old:
        o = old[key(r)]
        if o["choice"] != r["choice"] or abs(r["us"] / o["us"] - 1) > 0.03:
            print(f"PT {r['layout']} {r['layer']:4} {r['pass_']:11} {o['us']:7.1f} -> {r['us']:7.1f} (cudnn {o['cudnn_us']:6.1f} -> {r['cudnn_us']:6.1f}) {r['choice'].split(':')[1]}")
PY
