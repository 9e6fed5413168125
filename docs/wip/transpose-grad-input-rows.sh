#!/usr/bin/env bash
# One device call after `git am docs/wip/transpose-grad-input.patch` on main: build, the whole suite,
# compute-sanitizer over the relayout test, the TF32 NCHW trainable rows of the grad_inputs it takes
# (R12: 256 blocks, Y18: 512; R10's stride-2 phases stay on the gathers) at batches 1, 8 and 32 beside
# R9 and Y12 (under the 256-block floor: unchanged, a control), and ncu of Y18's relayouts. What it
# should show, counted: Y18's grad_input gathers take 20.9 µs (ncu) where the forward's transpose of
# the same weight takes 10.7-11.6; a grad_input's slab is the same rows (filters) and columns
# (channels x taps), so about 11 µs, its trainable batch-1 grad_input 53.3 -> ~43 µs. R12's (9.4 MB)
# about half that. The grad_input rows decide; the forward rows must not move.
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 400 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR" "$OUT/suite/session.log"
mkdir -p "$OUT/rows"
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool python -m pytest -q -p no:cacheprovider tests/test_precision.py \
    -k relayouts_agree > "$OUT/rows/$tool.log" 2>&1
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/rows/$tool.log" | tail -1)"
done
for n in 1 8 32; do
  timeout 60 python benchmarks/pass_times.py --suite resnet,yolo --batch $n --precision tf32 --layout nchw \
    --algorithms gemm --weights trainable --layers R9,R12,Y12,Y18 --out-dir "$OUT/rows/n$n" > "$OUT/rows/log$n.txt" 2>&1
  echo "rows n$n rc $?"
done
OUT="$OUT/rows" bash docs/wip/relayout-ncu.sh 2>&1 | grep -E "rc|transpose|relayout_kernel|Duration" | head -20
cd "$OUT" && tar czf all.tgz suite rows && rm -rf suite rows
