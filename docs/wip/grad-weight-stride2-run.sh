#!/usr/bin/env bash
# One device call with docs/wip/grad-weight-stride2-window.patch applied to the working tree
# (`git am -3 docs/wip/grad-weight-stride2-window.patch` first): build, the whole suite in 6 shards,
# then each pass of the strided depthwise layers (and stride-1 controls) by device time against cuDNN,
# trainable weights, bfloat16 and float16 channels_last, batch 32. Compare grad_weight with
# benchmarks/results/pass-times-depthwise-h200.json (the per-product loop: mbv2-96@112s2 166 µs,
# mbv3-72@56s2 45; cuDNN 43-59 and 22-24). One archive back ($OUT/all.tgz).
set -uo pipefail
PYTEST_SHARDS=6 OUT="$OUT/suite" timeout 420 bash benchmarks/gpu_session.sh > /dev/null 2>&1
grep -E "== build|== tests|pytest rc|passed|failed|FAILED|ERROR|stopped" "$OUT/suite/session.log" | head -30
grep -hE "^E  |^FAILED" "$OUT"/suite/tests*.log | head -20
mkdir -p "$OUT/pt"
left=$((560 - SECONDS)); t=120; [ $t -gt $left ] && t=$left
[ $t -gt 20 ] && timeout $t python benchmarks/pass_times.py --suite depthwise --precision bf16,fp16 --layout nhwc \
  --algorithms direct --weights trainable --layers mbv2-96@112s2,mbv3-72@56s2,mbv2-144@56,effb0-240@28,rnx-128@56 \
  --out-dir "$OUT/pt" > "$OUT/pt/log" 2>&1; echo "pass_times rc $? $SECONDS s"
grep "nhwc trainable" "$OUT/pt/log"
cd "$OUT" && tar czf all.tgz pt 2>/dev/null; rm -rf pt
