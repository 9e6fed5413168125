#!/usr/bin/env bash
# The check of nchw-1x1-tail.patch in one device call (~6 min): on a branch, `git am
# docs/wip/nchw-1x1-tail.patch`, copy this to run.sh and run it from the repository root. One build;
# the config-rule and last-wave-split tests; per-pass rows of the GEMM on Y19 at bfloat16 and float16,
# NCHW and channels_last (written to $OUT/pass-times-yolo-h200.json: merge its rows into the
# committed resnet-yolo file by key); the whole suite (6 shards).
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/logs; S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
rm -f $OUT/build.log $OUT/session.log
timeout 100 python -m pytest -q -p no:cacheprovider tests/test_precision.py -k "tail_splits or config_rule" -rfE > /tmp/logs/rule.log 2>&1
echo "rule tests rc=$? $(tail -1 /tmp/logs/rule.log)"; grep -E "^(FAILED|ERROR)" /tmp/logs/rule.log | cut -c1-250 | head -8
timeout 60 python benchmarks/pass_times.py --suite yolo --algorithms gemm --weights trainable --out-dir $OUT \
  --precision bf16,fp16 --layout nchw,nhwc --layers Y19 > /tmp/logs/pt.log 2>&1; echo "pt rc=$?"
t0=$SECONDS
for i in 0 1 2 3 4 5; do TORCHCONV_TEST_SHARD=$i/6 OMP_NUM_THREADS=2 timeout 200 python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2 3 4 5; do tail -1 /tmp/logs/t$i.log | grep -oE '[0-9]+ (passed|failed)' | tr '\n' ' '; echo -n '| '; done)"
grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | cut -c1-250 | head -10
tar czf $OUT/logs.tgz -C /tmp logs
python - <<'PY'
import json, os
for r in json.load(open(os.path.join(os.environ["OUT"], "pass-times-yolo-h200.json")))["rows"]:
    if r["algorithm"] == "gemm":
        print(r["precision"], r["layout"], r["pass_"], round(r["us"], 1), round(r["cudnn_us"], 1), r["choice"])
PY
