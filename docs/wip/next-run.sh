#!/usr/bin/env bash
# One device call after `git am docs/wip/stem-gather-occupancy.patch` on main: build, the whole suite
# (6 shards), the kernels of the RGB stem's grad_input by columns, and the R1 / Y0 NCHW rows to overlay
# on benchmarks/results/pass-times-resnet-yolo-h200.json. One archive back ($OUT/all.tgz).
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 440 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log"
mkdir -p "$OUT/rows"
rows() {  # name, timeout, pass_times arguments
  local name=$1 t=$2; shift 2
  local left=$((585 - SECONDS)); [ $left -lt 25 ] && { echo "skip $name"; return; }
  [ $t -gt $left ] && t=$left
  timeout $t python benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable \
    --layout nchw --out-dir "$OUT/rows/$name" "$@" > "$OUT/rows/$name.log" 2>&1; echo "$name rc $?"
}
timeout 40 python docs/wip/pass_kernels.py --layers R1,Y0 --batch 32 --precision fp32 \
  --layouts nchw --passes grad_input 2>&1 | grep -v -i warn > "$OUT/stem_kernels.txt"
cut -c1-160 "$OUT/stem_kernels.txt" | tail -12
rows t32 60 --layers R1,Y0 --batch 32 --precision tf32
rows f32 60 --layers R1,Y0 --batch 32 --precision fp32
rows t8 40 --layers R1,Y0 --batch 8 --precision tf32
rows b1 40 --layers R1 --batch 1 --precision tf32,fp32
grep -h "grad_input" "$OUT"/rows/*.log | cut -c1-200
cd "$OUT" && tar czf all.tgz suite rows stem_kernels.txt 2>/dev/null; rm -rf suite rows
