#!/usr/bin/env bash
# Session-final benchmark call: build, then the committed result runs (each writes JSON + Markdown
# to $OUT) and the host-overhead table.
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
OVERHEAD=1 PYTEST_SEL='tests/test_gemm.py -k "variant_api"' bash benchmarks/gpu_session.sh \
  "--suite resnet,yolo --algorithms cudnn,gemm,gemm:explicit --batch 32,1 --mode fwd,fwdbwd --stages --tag gemm-h100" \
  "--suite winograd --algorithms cudnn,winograd,winograd:fused,winograd:staged --batch 32,1 --mode fwd,fwdbwd --stages --tag winograd-h100" \
  2>&1 | grep -v "^ptxas\|^0 bytes" | tail -30
rm -f "$OUT/tests.log"
