#!/usr/bin/env bash
# The check of wgmma-1x1-rule.patch in one device call (~8 min): on a branch, `git am
# docs/wip/wgmma-1x1-rule.patch`, then run this from the repository root. One build; the config-rule
# tests; per-pass rows of the GEMM on the 1x1 layers at bfloat16, float16 and TF32, NCHW and channels_last,
# merged by row into a copy of the committed file (copy json and md back after checking); the whole
# suite (6 shards); the passes that moved more than 3%.
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/logs; S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
rm -f $OUT/build.log $OUT/session.log
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_precision.py -k "config_rule" > /tmp/logs/rule.log 2>&1
echo "rule tests rc=$? $(tail -1 /tmp/logs/rule.log)"
cp benchmarks/results/pass-times-resnet-yolo-h200.json $OUT/
t0=$SECONDS
timeout 200 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --out-dir $OUT \
  --precision bf16,fp16,tf32 --layout nchw,nhwc --layers R3,R5,R8,R11,Y5,Y9,Y13,Y19 > /tmp/logs/pt.log 2>&1
echo "pt rc=$? $((SECONDS-t0)) s"
t0=$SECONDS
for i in 0 1 2 3 4 5; do TORCHCONV_TEST_SHARD=$i/6 OMP_NUM_THREADS=2 timeout 215 python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2 3 4 5; do tail -1 /tmp/logs/t$i.log | grep -oE '[0-9]+ (passed|failed)' | tr '\n' ' '; echo -n '| '; done)"
grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | head -10
tar czf $OUT/logs.tgz -C /tmp logs
python - <<'PY'
import json, os
out = os.environ["OUT"]
key = lambda r: (r["layer"], r["pass_"], r["precision"], r["layout"])
keep = lambda r: r["algorithm"] == "gemm" and r.get("weights") == "trainable" and r["precision"] in ("bf16", "fp16", "tf32")
old = {key(r): r for r in json.load(open("benchmarks/results/pass-times-resnet-yolo-h200.json"))["rows"] if keep(r)}
for r in json.load(open(os.path.join(out, "pass-times-resnet-yolo-h200.json")))["rows"]:
    if keep(r) and key(r) in old:
        o = old[key(r)]
        if o["choice"] != r["choice"] or abs(r["us"] / o["us"] - 1) > 0.03:
            print(f"PT {r['precision']} {r['layout']} {r['layer']:4} {r['pass_']:11} {o['us']:7.1f} -> {r['us']:7.1f} "
                  f"(cudnn {o['cudnn_us']:6.1f} -> {r['cudnn_us']:6.1f}) {r['choice'].split(':')[1]}")
PY
