#!/usr/bin/env bash
# One device call for docs/wip/ws-rule-and-deep.patch, after `git am` of it on a branch: build, the
# warp-specialized tests first (a hang or a failure there stops before the suite), the whole suite in
# 6 shards, then pass_times of the channels_last layers with every ws config, medium and large forced
# beside the rule and cuDNN. Everything under $OUT; the summary printed last (~520 s).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$SECONDS
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 TORCHCONV_PTXAS_VERBOSE=1 python -m pip install --no-build-isolation --no-deps -v -e . \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $((SECONDS - t0)) s"
timeout 180 python -m pytest -q -p no:cacheprovider -rfE tests/test_precision.py tests/test_plans.py \
  -k "warp_specialized or wgmma-ws" > "$OUT/ws.log" 2>&1
rc=$?
echo "ws tests rc=$rc"; tail -20 "$OUT/ws.log" | cut -c1-300
if [ $rc = 0 ]; then
  L16=Y0,Y2,R1,R2,R3,R5,R6,R8,R9,R12,Y4,Y5,Y8,Y9,Y12,Y18; L32=R2,R6,R9,R12,Y2,Y4,Y8,Y12,Y18
  C=gemm:wgmma-ws,gemm:wgmma-ws-deep,gemm:wgmma-ws-large,gemm:wgmma-medium,gemm:wgmma-large
  P="pass_times.py --suite resnet,yolo --algorithms gemm --configs $C --weights trainable --layout nhwc"
  BUILD=skip PYTEST_SHARDS=6 OUT="$OUT/s" timeout 420 bash benchmarks/gpu_session.sh \
    "$P --precision bf16 --layers $L16" "$P --precision tf32 --layers $L32" > "$OUT/s.txt" 2>&1
  cp "$OUT"/s/*.json "$OUT"/ 2>/dev/null
  cat "$OUT/s/session.log"
fi
(cd "$OUT" && tar czf logs.tgz build.log ws.log s 2>/dev/null)
