#!/usr/bin/env bash
# Issue-7 device call: build, the tuning and CSG tests, host overhead, the ResNet-50 end-to-end
# example (writes resnet50-h100.json/.md and the tuning cache) and the profiler example.
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
PYTEST_SEL="${PYTEST_SEL:-tests/test_tuning.py tests/test_csg.py}" OVERHEAD=1 bash benchmarks/gpu_session.sh > "$OUT/console.log" 2>&1
grep -A12 "== tests" "$OUT/session.log" | grep -v "^ptxas" | head -30
grep -E "FAILED|Error" "$OUT/tests.log" | head
cd examples
python resnet50.py --out-dir "$OUT" --tag resnet50-h100 --save-cache "$OUT/resnet50-tuning-cache.json" ${RESNET_ARGS:-} \
  > "$OUT/resnet50.log" 2>&1; echo "resnet50 rc=$?"
grep -v "tuning \[" "$OUT/resnet50.log" | head -20; tail -3 "$OUT/resnet50.log"
python profile_resnet50.py --batch 32 --trace-dir /tmp/traces --benchmark > "$OUT/profile.log" 2>&1; echo "profile rc=$?"
grep -E "===|Self CUDA time total|Chrome" "$OUT/profile.log"
