#!/usr/bin/env bash
# Where a gathered wgmma conv pass's time goes: one launch under ncu with the warp-state (stall)
# metrics and the SASS source page, for each NAME:LAYER:PRECISION:MODE:SKIP given (MODE fwd or fwdbwd
# of benchmarks/profile_layer.py; SKIP = tc_conv_wgmma launches skipped: in fwdbwd they alternate
# forward, grad_input; an optional sixth field, CONFIG, forces that gemm tile config). An installed
# build: run after a build in the same call, ~1 min a pass. PROFILE_ARGS are added to profile_layer.py's
# arguments (--tf32-source-reads rounded_copies: a TF32 pass on the descriptor loop instead of the register
# tiles; as_they_are: the register tiles where the rule copies).
#   bash docs/wip/pass-ncu.sh y2fwd:Y2:bf16:fwd:2 y0gi:Y0:bf16:fwdbwd:3 y8ws:Y8:bf16:fwd:2:wgmma-ws
# Prints per pass the duration, issue use and the stall reasons per issued instruction (largest
# first), then the SASS lines with the most stall samples; returns one archive ($OUT/ncu.tgz).
set -uo pipefail
for spec in "$@"; do
  IFS=: read -r name layer precision mode skip config <<< "$spec"
  timeout 240 ncu --clock-control none --kernel-name regex:tc_conv_wgmma --launch-skip "$skip" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    --section SourceCounters --section MemoryWorkloadAnalysis --import-source yes \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio -o "$OUT/$name" -f \
    python benchmarks/profile_layer.py --layer "$layer" --precision "$precision" --layout nhwc --mode "$mode" --config "${config:-}" \
    --skip-reference --warmup 2 --reps 1 ${PROFILE_ARGS:-} > "$OUT/ncu_${name}_run.txt" 2>&1
  echo "== $name ($layer $precision $mode) ncu rc=$?"
  ncu -i "$OUT/$name.ncu-rep" --print-details all > "$OUT/ncu_$name.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page raw --csv > "$OUT/raw_$name.csv" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/sass_$name.csv" 2>&1
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|DRAM Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" \
    "$OUT/ncu_$name.txt" | cut -c1-110 | sort -u
  python - "$OUT/raw_$name.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if any("issue_stalled" in c for c in r))
names, vals = rows[head], rows[-1]
stalls = []
for n, v in zip(names, vals):
    if n.startswith("smsp__average_warps_issue_stalled_") and n.endswith("_per_issue_active.ratio"):
        try: stalls.append((float(v.replace(",", "")), n[len("smsp__average_warps_issue_stalled_"):-len("_per_issue_active.ratio")]))
        except ValueError: pass
for v, n in sorted(stalls, reverse=True)[:10]: print(f"  stall {n:28s} {v:6.2f} cycles/issue")
PY
  python docs/wip/ncu_source_top.py "$OUT/sass_$name.csv" 2>&1 | sed -n '/Warp Stall/,/Instructions Executed/p' | head -18
done
(cd "$OUT" && tar czf ncu.tgz ncu_* raw_* sass_* && rm -f ncu_* raw_* sass_* ./*.ncu-rep)
