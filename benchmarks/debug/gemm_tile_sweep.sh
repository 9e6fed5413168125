#!/usr/bin/env bash
# GEMM session on the device: build, the GEMM CUDA tests, memcheck over them, the resnet + yolo
# suites with cuDNN and both variants (auto config rule), then each float forward config forced with
# TORCHCONV_GEMM_TILE (forward, N = 32 and 1), so the config rule can be checked against data.
# The sweep's outputs are tarred into one file (the device returns at most 8 files).
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
PYTEST_SEL='tests/test_gemm.py tests/test_parity.py tests/test_autograd.py -k "gemm and cuda"' \
MEMCHECK='tests/test_gemm.py -k "cuda and f32 and not tile_configs"' \
  bash benchmarks/gpu_session.sh "--suite resnet,yolo --algorithms cudnn,gemm,gemm:explicit --batch 32,1 --mode fwd,fwdbwd --tag ${TAG:-gemm}-auto" \
  2>&1 | grep -v "^ptxas\|^0 bytes" | tail -12
mkdir -p "$OUT/sweep"
for t in ${TILES:-large medium small}; do
  TORCHCONV_GEMM_TILE=$t python benchmarks/bench.py --suite resnet,yolo --algorithms cudnn,gemm --batch 32,1 --mode fwd \
    --out-dir "$OUT/sweep" --tag "${TAG:-gemm}-tile-$t" > /dev/null 2>&1
  echo "tile $t rc=$?"
done
tar -C "$OUT" -czf "$OUT/sweep.tgz" sweep && rm -rf "$OUT/sweep" "$OUT/tests.log"
grep -E "spill" "$OUT/session.log" | grep -v " 0 bytes spill stores" | head
