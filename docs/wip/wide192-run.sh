#!/usr/bin/env bash
# One device call that lands docs/wip/wide192.patch, after `git am` of it on main: build, the whole
# suite in 6 shards, then the rule's rows beside wide and wide192 forced on the layers whose launches
# the rule moves (Y8's and Y12's forward; Y18 as a check that its tail splits stay), both 16-bit
# precisions, for benchmarks/results/pass-times-resnet-yolo-h200 (overlaid by row key). (~450 s)
set -uo pipefail
P="pass_times.py --suite resnet,yolo --algorithms gemm --configs gemm:wgmma-wide,gemm:wgmma-wide192"
P="$P --weights trainable --layout nhwc --precision bf16,fp16 --layers Y8,Y12,Y18"
PYTEST_SHARDS=6 OUT="$OUT/s" timeout 585 bash benchmarks/gpu_session.sh "$P"
echo "session rc=$? at $SECONDS s"
(cd "$OUT/s" && tar czf ../logs.tgz build.log tests.log session.log bench.log && rm -f build.log tests.log bench.log)
