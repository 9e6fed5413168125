#!/usr/bin/env bash
# The check of gw-cluster-target.patch and nchw-half-words.patch, stacked in that order, in one device
# call (~9 min): on a branch, `git am docs/wip/gw-cluster-target.patch docs/wip/nchw-half-words.patch`,
# copy this to run.sh and run it from the repository root. One build; the grad_weight, NCHW-planes,
# reduced-precision and config-rule tests, stopping at a failure (a failing test's name says which
# patch); per-pass rows of every ResNet/YOLO layer from NCHW at bfloat16 and TF32, and float16 of the
# 1x1 layers R3, R8, Y5, Y9, Y13 (merge them into the committed file by key); the whole suite. Land
# each patch with the suite passing and no NCHW row slower by more than 3% than the committed (the
# first: the grad_weight rows; the second: Y13's rows gain, the whole-word layers' rows hold).
set -uo pipefail
export PYTHONUNBUFFERED=1
mkdir -p /tmp/logs; S=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
rm -f $OUT/build.log $OUT/session.log
timeout 240 python -m pytest -q -p no:cacheprovider tests/test_precision.py -rfE -x \
  -k "weight_grad or grad_weight or reduced_precision or planes or config_rule" > /tmp/logs/focus.log 2>&1
rc=$?; echo "tests rc=$rc $(tail -1 /tmp/logs/focus.log) $((SECONDS-S)) s"; grep -E "^(FAILED|ERROR)" /tmp/logs/focus.log | cut -c1-250 | head -8
[ $rc -ne 0 ] && { tar czf $OUT/logs.tgz -C /tmp logs; exit 1; }
cp benchmarks/results/pass-times-resnet-yolo-h200.json $OUT/
timeout 170 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --out-dir $OUT \
  --precision bf16,tf32 --layout nchw > /tmp/logs/pt.log 2>&1; echo "pt rc=$? $((SECONDS-S)) s"
timeout 60 python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --out-dir $OUT \
  --precision fp16 --layout nchw --layers R3,R8,Y5,Y9,Y13 > /tmp/logs/pt16.log 2>&1; echo "pt fp16 rc=$? $((SECONDS-S)) s"
t0=$SECONDS
for i in 0 1 2 3 4 5; do TORCHCONV_TEST_SHARD=$i/6 OMP_NUM_THREADS=2 timeout 220 python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2 3 4 5; do tail -1 /tmp/logs/t$i.log | grep -oE '[0-9]+ (passed|failed)' | tr '\n' ' '; echo -n '| '; done)"
grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | cut -c1-250 | head -10
tar czf $OUT/logs.tgz -C /tmp logs
