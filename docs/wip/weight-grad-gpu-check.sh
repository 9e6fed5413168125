#!/usr/bin/env bash
# review-mends.patch (3 commits) and weight-grad-fast-divisors.patch (on a branch: git am docs/wip/review-mends.patch
# docs/wip/weight-grad-fast-divisors.patch), one device call from the repository root: build, per-pass
# rows bf16 / fp16 channels_last merged by row into a copy of the committed file (copy the json and md
# back after checking), the whole suite (6 shards), memcheck of the grad_weight rule tests, logs in
# logs.tgz, the passes that moved more than 3% against the committed rows, then the grad_weight ncu
# run (weight-grad-chunk-ncu.sh) in the time left. Expect the same split choices everywhere (the first
# patch changes no suite layer's pick); the divisors' gain is the question.
set -uo pipefail
export PYTHONUNBUFFERED=1
S=$SECONDS
mkdir -p /tmp/logs
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
cp benchmarks/results/pass-times-resnet-yolo-h200.json $OUT/
t0=$SECONDS
timeout 90 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --out-dir $OUT \
  --precision bf16,fp16 --layout nhwc > /tmp/logs/pt.log 2>&1; echo "pt rc=$? $((SECONDS-t0)) s"
t0=$SECONDS
left=$((450 - (SECONDS - S))); [ $left -gt 200 ] && left=200
for i in 0 1 2 3 4 5; do TORCHCONV_TEST_SHARD=$i/6 OMP_NUM_THREADS=2 timeout $left python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s (limit $left): $(for i in 0 1 2 3 4 5; do tail -1 /tmp/logs/t$i.log | grep -oE '[0-9]+ (passed|failed)' | tr '\n' ' '; echo -n '| '; done)"
grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | head -10
t0=$SECONDS
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 python -m pytest -q -p no:cacheprovider tests/test_precision.py \
  -k "weight_grad_config_rule and bf16 and nhwc and (N32C512K1024 or N8C64)" > /tmp/logs/mc.log 2>&1
echo "memcheck rc=$? $((SECONDS-t0)) s $(grep -E 'ERROR SUMMARY|passed|failed' /tmp/logs/mc.log | tail -2 | tr '\n' ' ')"
tar czf $OUT/logs.tgz -C /tmp logs
python - <<'P'
import json, os
out = os.environ["OUT"]
old = {(r["layer"], r["precision"], r["layout"], r["pass_"], r["algorithm"]): r
       for r in json.load(open("benchmarks/results/pass-times-resnet-yolo-h200.json"))["rows"] if r.get("weights") == "trainable"}
for r in json.load(open(os.path.join(out, "pass-times-resnet-yolo-h200.json")))["rows"]:
    k = (r["layer"], r["precision"], r["layout"], r["pass_"], r["algorithm"])
    if r["algorithm"] == "gemm" and r.get("weights") == "trainable" and k in old and k[2] == "nhwc" and k[1] in ("bf16", "fp16"):
        o = old[k]
        if o["choice"] != r["choice"] or abs(r["us"] / o["us"] - 1) > 0.03:
            print(f"PT {k[0]:4} {k[1]} {k[3]:11} {o['us']:7.1f} -> {r['us']:7.1f} us (cudnn {r['cudnn_us']:6.1f}) {o['choice']} -> {r['choice']}")
P
# Last: the diagnostic, in what time the call has left (its reports are written to $OUT as it goes).
bash docs/wip/weight-grad-chunk-ncu.sh 2>&1 | cut -c1-150 | head -60
