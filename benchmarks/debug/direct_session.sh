#!/usr/bin/env bash
# Direct-kernel session on the device: build, the direct CUDA tests, the big suite with cuDNN (rule's
# config), then each float tile config forced with TORCHCONV_DIRECT_TILE over the big suite (wide,
# staged) and the resnet + yolo forward at N = 1 and 32 (all three), so the rule can be checked
# against data. The sweep's outputs are tarred into one file (the device returns at most 8 files).
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
PYTEST_SEL="${PYTEST_SEL:-tests -k 'direct and cuda'}" \
  bash benchmarks/gpu_session.sh "--suite big --algorithms cudnn,direct --mode fwd --warmup 2 --reps 20 --tag ${TAG:-direct}-big" \
  2>&1 | grep -v "^ptxas\|^0 bytes" | tail -12
mkdir -p "$OUT/sweep"
for t in ${BIG_TILES:-wide staged}; do
  TORCHCONV_DIRECT_TILE=$t python benchmarks/bench.py --suite big --algorithms direct --mode fwd --warmup 2 --reps 20 \
    --out-dir "$OUT/sweep" --tag "${TAG:-direct}-big-tile-$t" > /dev/null 2>&1
  echo "big tile $t rc=$?"
done
for t in ${TILES:-wide staged small}; do
  TORCHCONV_DIRECT_TILE=$t python benchmarks/bench.py --suite resnet,yolo --algorithms direct --batch 1,32 --mode fwd \
    --out-dir "$OUT/sweep" --tag "${TAG:-direct}-tile-$t" > /dev/null 2>&1
  echo "tile $t rc=$?"
done
python - "$OUT/sweep" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    rows = [r for r in json.load(open(f))["rows"] if r["algorithm"] != "cudnn"]
    print(f.split("/")[-1], " ".join(f"{r['layer']}/N{r['N']}:{r['tflops']:.1f}({r['ratio']:.2f})" for r in rows))
PY
tar -C "$OUT" -czf "$OUT/sweep.tgz" sweep && rm -rf "$OUT/sweep"
grep -E "spill" "$OUT/session.log" | grep -v " 0 bytes spill stores" | head
