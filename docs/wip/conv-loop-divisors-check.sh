#!/usr/bin/env bash
# conv-loop-divisors.patch (on a branch: git am docs/wip/conv-loop-divisors.patch), one device call
# from the repository root: build, per-pass rows of the GEMM at PRECISIONS (default bf16,tf32) in
# channels_last merged by row into a copy of the committed file (copy the json and md back after
# checking), the whole suite (6 shards), the passes that moved more than 3%. Expect forward and
# grad_input to move (the im2col issuer's divisions, the gather's rows, the epilogues' positions),
# grad_weight not; ~8 min.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/logs; S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
cp $OUT/build.log /tmp/logs/pip.log; rm -f $OUT/build.log $OUT/session.log
cp benchmarks/results/pass-times-resnet-yolo-h200.json $OUT/
P=${PRECISIONS:-bf16,tf32}
t0=$SECONDS
timeout 150 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --out-dir $OUT \
  --precision $P --layout nhwc > /tmp/logs/pt.log 2>&1; echo "pt rc=$? $((SECONDS-t0)) s"
t0=$SECONDS
for i in 0 1 2 3 4 5; do TORCHCONV_TEST_SHARD=$i/6 OMP_NUM_THREADS=2 timeout 215 python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2 3 4 5; do tail -1 /tmp/logs/t$i.log | grep -oE '[0-9]+ (passed|failed)' | tr '\n' ' '; echo -n '| '; done)"
grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | head -10
tar czf $OUT/logs.tgz -C /tmp logs
python - "$P" <<'PY'
import json, os, sys
out, precisions = os.environ["OUT"], sys.argv[1].split(",")
key = lambda r: (r["layer"], r["pass_"], r["precision"])
keep = lambda r: r["algorithm"] == "gemm" and r.get("weights") == "trainable" and r["layout"] == "nhwc" and r["precision"] in precisions
old = {key(r): r for r in json.load(open("benchmarks/results/pass-times-resnet-yolo-h200.json"))["rows"] if keep(r)}
for r in json.load(open(os.path.join(out, "pass-times-resnet-yolo-h200.json")))["rows"]:
    if keep(r) and key(r) in old:
        o = old[key(r)]
        if o["choice"] != r["choice"] or abs(r["us"] / o["us"] - 1) > 0.03:
            print(f"PT {r['precision']} {r['layer']:4} {r['pass_']:11} {o['us']:7.1f} -> {r['us']:7.1f} (cudnn {o['cudnn_us']:6.1f} -> {r['cudnn_us']:6.1f}) {r['choice'].split(':')[1]}")
PY
