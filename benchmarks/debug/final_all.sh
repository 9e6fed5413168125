#!/usr/bin/env bash
# One device call at the end of a session: build, the whole test suite, memcheck over the GEMM and
# Winograd CUDA tests, racecheck on representative launches, then the committed GEMM benchmark.
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
MEMCHECK='tests/test_gemm.py tests/test_winograd.py tests/test_parity.py -k "cuda and (gemm or winograd) and not f64 and not float32_error and not N4C64 and not tile_configs"' \
RACECHECK='tests/test_gemm.py tests/test_winograd.py -k "split_reduction or (deterministic and implicit) or (float32_error and auto)"' \
  bash benchmarks/gpu_session.sh \
  "--suite resnet,yolo --algorithms cudnn,gemm,gemm:explicit --batch 32,1 --mode fwd,fwdbwd --stages --tag gemm-h100" \
  2>&1 | grep -v "^ptxas\|^0 bytes" | tail -16
grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
true
