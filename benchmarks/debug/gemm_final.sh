#!/usr/bin/env bash
# GEMM final call: build, every GEMM test on the GPU, memcheck over them, racecheck on the split
# reduction, then the committed resnet + yolo benchmark (both variants, per-kernel times).
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
PYTEST_SEL='tests/test_gemm.py tests/test_parity.py tests/test_autograd.py tests/test_ops.py -k "gemm"' \
MEMCHECK='tests/test_gemm.py tests/test_parity.py -k "gemm and not f64 and not tile_configs and not cpu"' \
RACECHECK='tests/test_gemm.py -k "split_reduction or deterministic"' \
  bash benchmarks/gpu_session.sh \
  "--suite resnet,yolo --algorithms cudnn,gemm,gemm:explicit --batch 32,1 --mode fwd,fwdbwd --stages --tag gemm-h100" \
  2>&1 | grep -v "^ptxas\|^0 bytes" | tail -16
grep -E "FAILED|Error" "$OUT/tests.log" | head
