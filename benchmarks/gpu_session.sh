#!/usr/bin/env bash
# One device-machine session: build (with the ptxas resource report), the test suite, optional
# compute-sanitizer runs, then benchmark commands. Writes to $OUT (default ./gpu_out): session.log
# (the summary), build.log, tests.log, and whatever the benchmark commands write there.
#   bash benchmarks/gpu_session.sh "bench.py --suite resnet,yolo" "models.py --models resnet50"
# PYTEST_SEL="tests -k cuda" narrows the test run (default: all of tests/; "skip" skips it).
# PYTEST_SHARDS=16 runs the whole suite instead in 16 pytest processes at once on the one GPU (each test
# in the shard its id's hash names: TORCHCONV_TEST_SHARD in tests/conftest.py), one a CPU core: the
# build and the whole suite then fit one device call. tests.log holds the shards' logs one after the
# other, each with its slowest tests. PYTEST_SHARD_RANGE=a-b runs only shards a..b of the PYTEST_SHARDS:
# the suite split over two calls (0-7, then 8-15 with BUILD=skip) where one call's time does not hold both.
# MEMCHECK="tests/test_x.py -k cuda" / RACECHECK="..." run compute-sanitizer over those tests (those that
# read kernel names through the profiler skip there, TORCHCONV_UNDER_SANITIZER: the sanitizer holds CUPTI).
# BUILD=skip uses the build already installed (a call that built and ran a first check itself).
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/session.log"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  git log -1 --format='commit %H %s' 2>/dev/null; git status --short | head -20; } 2>&1 | tee "$LOG"
t0=$SECONDS
if [ "${BUILD:-}" != skip ]; then
  MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 TORCHCONV_PTXAS_VERBOSE=1 python -m pip install --no-build-isolation --no-deps -v -e . > "$OUT/build.log" 2>&1 \
    || { tail -50 "$OUT/build.log"; exit 1; }
  echo "== build $((SECONDS - t0)) s; spills: $(grep -cE '[1-9][0-9]* bytes spill' "$OUT/build.log")" | tee -a "$LOG"
fi
if [ -n "${PYTEST_SHARDS:-}" ]; then
  t0=$SECONDS
  pids=()
  # The shards share the CPU cores: each gets its part of them (torch's CPU kernels and the float64
  # references spin when oversubscribed); a stopped session stops its shards too.
  range=${PYTEST_SHARD_RANGE:-0-$((PYTEST_SHARDS - 1))}
  first=${range%-*} last=${range#*-}
  threads=$(( $(nproc) / (last - first + 1) )); [ $threads -lt 1 ] && threads=1
  stopped=
  trap 'kill "${pids[@]}" 2>/dev/null; stopped=1' TERM INT
  for ((i = first; i <= last; i++)); do
    echo "== shard $i/$PYTEST_SHARDS" > "$OUT/tests-$i.log"
    TORCHCONV_TEST_SHARD=$i/$PYTEST_SHARDS OMP_NUM_THREADS=$threads python -m pytest tests -q -rfEs --durations=8 -p no:cacheprovider \
      >> "$OUT/tests-$i.log" 2>&1 &
    pids+=($!)
  done
  for j in "${!pids[@]}"; do wait "${pids[$j]}"; echo "pytest rc=$?" >> "$OUT/tests-$((first + j)).log"; done
  trap - TERM INT
  cat "$OUT"/tests-*.log > "$OUT/tests.log" && rm -f "$OUT"/tests-*.log
  { echo "== tests: shards $first-$last of $PYTEST_SHARDS ($((SECONDS - t0)) s)"
    grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
    grep -E "^(== shard|pytest rc|[0-9]+ (passed|failed))" "$OUT/tests.log"; } | tee -a "$LOG"
  [ -n "$stopped" ] && { echo "== stopped" | tee -a "$LOG"; exit 143; }
elif [ "${PYTEST_SEL:-tests}" != skip ]; then
  t0=$SECONDS
  eval python -m pytest ${PYTEST_SEL:-tests} -q -rfEs -p no:cacheprovider > "$OUT/tests.log" 2>&1; echo "pytest rc=$?" >> "$OUT/tests.log"
  { echo "== tests ($((SECONDS - t0)) s)"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -2 "$OUT/tests.log"; } | tee -a "$LOG"
fi
for tool in memcheck racecheck; do
  sel=$([ $tool = memcheck ] && echo "${MEMCHECK:-}" || echo "${RACECHECK:-}")
  [ -z "$sel" ] && continue
  eval TORCHCONV_UNDER_SANITIZER=1 compute-sanitizer --tool $tool --error-exitcode 9 \
    python -m pytest -q -p no:cacheprovider $sel \
    > "$OUT/sanitizer-$tool.log" 2>&1; rc=$?
  { echo "== compute-sanitizer $tool rc=$rc ($sel)"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/sanitizer-$tool.log" | tail -3; } | tee -a "$LOG"
done
for cmd in "$@"; do
  echo "== $cmd" | tee -a "$LOG"
  t0=$SECONDS
  eval python benchmarks/$cmd --out-dir "$OUT" >> "$OUT/bench.log" 2>&1; echo "rc=$? ($((SECONDS - t0)) s)" | tee -a "$LOG"
done
true
