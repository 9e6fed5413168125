#!/usr/bin/env bash
# One device call for docs/wip/ws3.patch, after `git am` of it on a branch: build, the ws3 tests
# first (a hang or a failure there stops before the suite), the whole suite in 6 shards, then
# pass_times of the bfloat16 channels_last layers whose A comes by tensor copies with ws3, ws and
# medium forced beside the rule and cuDNN. Everything under $OUT; the summary printed last (~480 s).
set -uo pipefail
export PYTHONUNBUFFERED=1
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 TORCHCONV_PTXAS_VERBOSE=1 python -m pip install --no-build-isolation --no-deps -v -e . \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $SECONDS s"
timeout 150 python -m pytest -q -p no:cacheprovider -rfE tests/test_precision.py tests/test_plans.py \
  -k "three_blocks or wgmma-ws3" > "$OUT/ws3.log" 2>&1
rc=$?
echo "ws3 tests rc=$rc at $SECONDS s"; tail -8 "$OUT/ws3.log" | cut -c1-300
if [ $rc = 0 ]; then
  L=R2,R6,R9,R12,Y4,Y8,Y12,Y18,R3,R8,Y5,Y9,Y13
  P="pass_times.py --suite resnet,yolo --algorithms gemm --configs gemm:wgmma-ws3,gemm:wgmma-ws,gemm:wgmma-medium --weights trainable --layout nhwc --precision bf16 --layers $L"
  BUILD=skip PYTEST_SHARDS=6 OUT="$OUT/s" timeout $((570 - SECONDS)) bash benchmarks/gpu_session.sh "$P" > "$OUT/s.txt" 2>&1
  cat "$OUT/s/session.log"; grep -E "^bf16" "$OUT/s/bench.log" | cut -c1-400
fi
(cd "$OUT" && tar czf logs.tgz build.log ws3.log s 2>/dev/null)
