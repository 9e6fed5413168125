#!/usr/bin/env bash
# The patch split-sums-and-weight-grad-copies (git am docs/wip/split-sums-and-weight-grad-copies.patch on a branch first):
# build + whole suite (3 shards), the per-kernel profile against the baselines below, memcheck. Run from the repository root.
# Baselines (profiler, H200, N=32, trainable), total us (kernel + finish):
#   workspace path (main):  R12 bf16 fwd 42.2 (28.8+8.0), gi 42.5; R12 tf32 nchw fwd 79.1 (41.0+14.7), gi 71.3;
#                           R12 tf32 nhwc fwd 60.8; R10 bf16 fwd 42.4, gi 90.8 (55.5+22.3); R7 bf16 gi 51.2
#   clusters always (commit 1): R12 bf16 fwd 45.8 (kernel 40.4), tf32 nchw fwd 92.6 (70.7), tf32 nhwc 76.5;
#                           R10 bf16 fwd 45.6, gi 63.9 (53.0); R7 bf16 gi 43.7
#   grad_weight (workspace + tc_weight_grad_finish, main): R12 bf16 57.2 (34.4+22.8), R9 34.4 (26.3+8.1),
#                           R6 33.2 (29.1+4.1), Y18 bf16 307.0 (249.0+58.0), R12 tf32 nchw 102.1 (69.8+32.3),
#                           R9 tf32 nchw 66.4 (56.9+9.6), Y18 tf32 nchw 680.7 (618.2+62.4), R10 bf16 57.6 (34.7+22.9)
#                           (R12 tf32 nhwc runs mma.sync: stays on the workspace)
# Last commit: grad_weight by tensor copies (kTma) where channels per group are a multiple of 64: Y18, R12, R10, R9
#   grad_weight kernels (tc_weight_grad_wgmma_kernel<..., true>) should be below the times above (R6: 64 channels too).
# Expect: R12 / R10 forward back on the workspace path (tc_split_finish in the profile), R10 / R7 gi on clusters,
#         grad_weight on clusters wherever splits <= 8 and the waves allow (no tc_weight_grad_finish).
set -uo pipefail
export PYTHONUNBUFFERED=1
START=$SECONDS
PYTEST_SHARDS=3 timeout 330 bash benchmarks/gpu_session.sh > $OUT/gs.log 2>&1; echo "gpu_session rc=$? $((SECONDS-START)) s"
tail -9 $OUT/session.log | cut -c1-200; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -10
timeout 40 python docs/wip/kernel_profile.py > $OUT/ab.log 2>&1; echo "ab rc=$?"
t0=$SECONDS
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python -m pytest -q -p no:cacheprovider tests/test_precision.py -k "(wgmma_config_rule or wgmma_weight_grad_config_rule or tensor_copies) and bf16" > $OUT/mc.log 2>&1; echo "memcheck rc=$? $((SECONDS-t0)) s $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/mc.log | tail -2 | tr '\n' ' ')"
grep AB $OUT/ab.log | grep trainable | grep -E "fwd|gi|gw" | sed 's/void torchconv::cuda:://g' | cut -c1-130
