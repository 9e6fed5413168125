#!/usr/bin/env bash
# CSG device call: build, every CSG test on the GPU (and the parity grid / autograd / ops for csg),
# memcheck over the CSG tests, then the batch-1 forward benchmark with tuning (the issue's bar).
#   BENCH="..." overrides the bench arguments; RACE=1 adds racecheck.
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
PYTEST_SEL="${PYTEST_SEL:-tests/test_csg.py tests/test_parity.py tests/test_autograd.py tests/test_ops.py tests/test_module.py -k csg}" \
MEMCHECK="${MEMCHECK:-tests/test_csg.py -k \"cuda and f32\"}" \
RACECHECK="$([ -n "${RACE:-}" ] && echo 'tests/test_csg.py -k "cuda and f32 and (N1C2048 or N2C37 or N1C24)"')" \
  bash benchmarks/gpu_session.sh "${BENCH:---suite resnet,yolo --algorithms cudnn,csg --batch 1 --mode fwd --tune --tag csg-probe}" \
  2>&1 | grep -v "^ptxas\|^0 bytes" | tail -40
grep -E "FAILED|Error|error" "$OUT/tests.log" | head -20
grep -B2 -A3 "csg" "$OUT/build.log" | grep -E "spill|registers" | sort | uniq -c | head
