#!/usr/bin/env bash
# One device-machine session: build (with the ptxas resource report), the full test suite,
# compute-sanitizer over selected CUDA tests, then benchmark runs. Writes at most 8 files to $OUT
# (default ./gpu_out): session.log, build.log, tests.log, bench.log and the results JSON/Markdown.
#   bash benchmarks/gpu_session.sh "--suite resnet,yolo --tag rn" "--suite big --mode fwd --tag big"
# MEMCHECK="tests/test_x.py -k cuda" / RACECHECK="..." run compute-sanitizer over those tests (unset: skipped).
# PYTEST_SEL="tests -k cuda" narrows the test run (default: all of tests/).
# OVERHEAD=1 measures host overhead per call against F.conv2d.
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/session.log"
{ which python python3; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'; } 2>&1 | tee "$LOG"
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 TORCHCONV_PTXAS_VERBOSE=1 python -m pip install --no-build-isolation --no-deps -v -e . > "$OUT/build.log" 2>&1 \
  || { tail -50 "$OUT/build.log"; exit 1; }
echo "== ptxas" >> "$LOG"
grep -E "Compiling entry|Used [0-9]+ registers|spill" "$OUT/build.log" | sed 's/^ *//' >> "$LOG" || true
eval python -m pytest ${PYTEST_SEL:-tests} -q -rs -p no:cacheprovider > "$OUT/tests.log" 2>&1; echo "pytest rc=$?" >> "$OUT/tests.log"
{ echo "== tests"; tail -3 "$OUT/tests.log"; } | tee -a "$LOG"
for tool in memcheck racecheck; do
  sel=$([ $tool = memcheck ] && echo "${MEMCHECK:-}" || echo "${RACECHECK:-}")
  [ -z "$sel" ] && continue
  eval compute-sanitizer --tool $tool --error-exitcode 9 python -m pytest -q -p no:cacheprovider $sel \
    > "$OUT/sanitizer.tmp" 2>&1; rc=$?
  { echo "== compute-sanitizer $tool rc=$rc ($sel)"; grep -E "ERROR SUMMARY|passed|failed|Error" "$OUT/sanitizer.tmp" | tail -5; } | tee -a "$LOG"
done
rm -f "$OUT/sanitizer.tmp"
[ -n "${OVERHEAD:-}" ] && python benchmarks/overhead.py 2>&1 | tee -a "$LOG"
for args in "$@"; do
  echo "== bench $args" | tee -a "$OUT/bench.log"
  python benchmarks/bench.py --out-dir "$OUT" $args >> "$OUT/bench.log" 2>&1; echo "bench rc=$?" | tee -a "$OUT/bench.log"
done
[ "$#" -gt 0 ] && grep -vE "^  " "$OUT/bench.log" | tail -20
true
