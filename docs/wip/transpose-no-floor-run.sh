#!/usr/bin/env bash
# One device call after `git am docs/wip/transpose-no-floor.patch` on main: build, the whole suite
# (its new relayout case: a 72-channel, 68-filter weight of 12 blocks through the transpose kernel,
# the same bits as the channels_last weight's gathers), compute-sanitizer over the relayout test.
# The patch drops a check that a floor of 1 block never failed, so no rows move.
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 400 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR" "$OUT/suite/session.log"
mkdir -p "$OUT/san"
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool python -m pytest -q -p no:cacheprovider tests/test_precision.py \
    -k relayouts_agree > "$OUT/san/$tool.log" 2>&1
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san/$tool.log" | tail -1)"
done
cd "$OUT" && tar czf all.tgz suite san && rm -rf suite san
