#!/usr/bin/env bash
# One device call for docs/wip/direct-weight.patch (and wt-tile-cols.patch with it: `git am -3` both
# on a branch of main): build; a smoke forward against float64 (stops the call if it fails); the whole
# suite in 6 shards (it holds the direct-weight tests); compute-sanitizer memcheck over two direct
# cases; the rule's rows with trainable and frozen weights (bfloat16 channels_last) of the layers whose
# relayout the patch removes, for benchmarks/results/pass-times-resnet-yolo-h200 (overlay by row).
set -uo pipefail
mkdir -p "$OUT/s" "$OUT/suite"
t0=$SECONDS
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 python -m pip install --no-build-isolation --no-deps -e . > "$OUT/s/build.log" 2>&1 \
  || { tail -30 "$OUT/s/build.log"; exit 1; }
echo "build $((SECONDS - t0)) s"
timeout 60 python - <<'PY' || { echo "smoke failed or hung"; exit 2; }
import torch, torchconv, torch.nn.functional as F
fmt = torch.channels_last
for dt in (torch.bfloat16, torch.float16):
    for n, c, k, h, g in ((2, 256, 264, 20, 1), (8, 128, 80, 17, 2), (4, 64, 64, 9, 1)):
        x = torch.randn(n, c, h, h, device="cuda", dtype=dt).to(memory_format=fmt)
        w = (torch.randn(k, c // g, 3, 3, device="cuda", dtype=dt) / (9 * c / g) ** 0.5).to(memory_format=fmt)
        torchconv.clear_weight_cache()
        y = torchconv.conv2d(x, w, None, padding=1, groups=g, algorithm="gemm"); torch.cuda.synchronize()
        r = F.conv2d(x.double(), w.double(), None, padding=1, groups=g)
        print("smoke", dt, n, c, k, h, g, torchconv.last_choice(), "cache", torchconv.weight_cache_size(),
              float((y.double() - r).norm() / r.norm()))
PY
PYTEST_SHARDS=6 BUILD=skip OUT="$OUT/suite" timeout 330 bash benchmarks/gpu_session.sh
echo "suite rc=$? at $SECONDS s"
P="pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable,frozen --layout nhwc --precision bf16"
P="$P --layers R6,R9,R12,Y8,Y12,Y18"
PYTEST_SEL=skip MEMCHECK="tests/test_precision.py -k 'reads_a_16_bit_weight_as_it_is and N2C128'" \
  BUILD=skip OUT="$OUT/s" timeout $((590 - SECONDS)) bash benchmarks/gpu_session.sh "$P"
echo "session rc=$? at $SECONDS s"
(cd "$OUT" && tar czf logs.tgz s/*.log suite/*.log 2>/dev/null; rm -f s/build.log s/bench.log s/sanitizer-*.log suite/tests.log)
