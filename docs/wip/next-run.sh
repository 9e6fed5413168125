#!/usr/bin/env bash
# One device call after `git am docs/wip/recent-clusters.patch` on main: build, the whole suite (6
# shards), host time per call (benchmarks/overhead.py; compare with its last committed result), and the
# kernels of the RGB stem's grad_input by columns (the GEMM against the gather: which to fuse first).
# One archive back ($OUT/all.tgz).
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 470 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
left=$((560 - SECONDS))
[ $left -gt 40 ] && timeout 40 python docs/wip/pass_kernels.py --layers R1,Y0 --batch 32 --precision fp32 \
  --layouts nchw --passes grad_input 2>&1 | grep -v -i warn | tee "$OUT/stem_kernels.txt" | cut -c1-150
left=$((575 - SECONDS))
[ $left -gt 30 ] && timeout $((left < 60 ? left : 60)) python benchmarks/overhead.py 2>&1 | tail -n 12 | tee "$OUT/overhead.txt"
cd "$OUT" && tar czf all.tgz suite stem_kernels.txt overhead.txt 2>/dev/null; rm -rf suite
