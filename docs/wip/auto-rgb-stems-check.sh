#!/usr/bin/env bash
# auto-rgb-stems.patch (on a branch: git am docs/wip/auto-rgb-stems.patch; Python, tests and docs
# only), one device call from the repository root (~6 min): build, the rule's and the models' GPU
# tests first (test_tuning, test_reliability, test_module, the autocast tests), then the whole suite
# (6 shards), then YOLO's stem (Y0) forward + backward, Winograd (what `auto` now takes) and the GEMM
# against cuDNN at TF32 NCHW and bfloat16 / float16 channels_last (bench.py rows under $OUT only:
# session diagnostic; the committed per-algorithm rows are the rule's evidence).
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/logs; S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
rm -f $OUT/build.log $OUT/session.log
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_tuning.py tests/test_reliability.py tests/test_module.py \
  "tests/test_precision.py::test_autocast_model_with_float32_weights" > /tmp/logs/rule.log 2>&1
echo "rule tests rc=$? $(tail -1 /tmp/logs/rule.log)"; grep -E "^(FAILED|ERROR)" /tmp/logs/rule.log | head
t0=$SECONDS
for i in 0 1 2 3 4 5; do TORCHCONV_TEST_SHARD=$i/6 OMP_NUM_THREADS=2 timeout 215 python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2 3 4 5; do tail -1 /tmp/logs/t$i.log | grep -oE '[0-9]+ (passed|failed)' | tr '\n' ' '; echo -n '| '; done)"
grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | head -10
for pl in "tf32 nchw" "bf16 nhwc" "fp16 nhwc"; do set -- $pl
  timeout 60 python benchmarks/bench.py --suite yolo --layers Y0 --algorithms cudnn,winograd,gemm --batch 32 --mode fwdbwd \
    --weights trainable --out-dir $OUT/bench --tag y0-$1-$2 --precision $1 --layout $2 > /tmp/logs/b-$1-$2.log 2>&1
  echo "bench $1 $2 rc=$?"; grep -E "Y0" /tmp/logs/b-$1-$2.log | tail -4
done
tar czf $OUT/logs.tgz -C /tmp logs
