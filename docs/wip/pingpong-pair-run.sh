#!/usr/bin/env bash
# One device call for docs/wip/pingpong.patch + pingpong-pair.patch (`git am` both on a branch of
# main): build; a smoke forward of the pair against float64 (stops the call if it fails or hangs);
# the ping-pong and pair tests; compute-sanitizer memcheck and racecheck over two pair cases; the
# pair's and ping-pong's forced rows beside the rule's (bfloat16 channels_last, the long 3x3 layers
# and R9), for benchmarks/results/pass-times-resnet-yolo-h200 (overlay the forced rows). ~330 s.
set -uo pipefail
mkdir -p "$OUT/s"
t0=$SECONDS
MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 python -m pip install --no-build-isolation --no-deps -e . > "$OUT/s/build.log" 2>&1 \
  || { tail -30 "$OUT/s/build.log"; exit 1; }
echo "build $((SECONDS - t0)) s"
timeout 60 python - <<'PY' || { echo "smoke failed or hung"; exit 2; }
import torch, torchconv, torch.nn.functional as F
torchconv.set_config("gemm", "wgmma-pingpong-pair")
for n, c, k, h in ((2, 256, 256, 20), (8, 128, 256, 68)):
    x = torch.randn(n, c, h, h, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = (torch.randn(k, c, 3, 3, device="cuda", dtype=torch.bfloat16) / (9 * c) ** 0.5).to(memory_format=torch.channels_last)
    y = torchconv.conv2d(x, w, None, padding=1, algorithm="gemm"); torch.cuda.synchronize()
    r = F.conv2d(x.double(), w.double(), None, padding=1)
    print("smoke", n, c, k, h, torchconv.last_choice(), float((y.double() - r).norm() / r.norm()))
PY
P="pass_times.py --suite resnet,yolo --algorithms gemm --configs gemm:wgmma-pingpong-pair,gemm:wgmma-pingpong"
P="$P --weights trainable --layout nhwc --precision bf16 --layers Y8,Y12,Y18,R9"
PYTEST_SEL="tests/test_precision.py tests/test_plans.py -k pingpong" \
  MEMCHECK="tests/test_precision.py -k 'pingpong_pair and (N2C256 or N1C256)'" \
  RACECHECK="tests/test_precision.py -k 'pingpong_pair and N2C256'" \
  BUILD=skip OUT="$OUT/s" timeout 300 bash benchmarks/gpu_session.sh "$P"
echo "session rc=$? at $SECONDS s"
(cd "$OUT/s" && tar czf ../logs.tgz ./*.log 2>/dev/null; rm -f build.log tests.log bench.log sanitizer-*.log)
