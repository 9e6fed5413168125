#!/usr/bin/env bash
# The patches strided-grad-input-phases and cluster-end-quad-stores (on a branch: git am
# docs/wip/strided-grad-input-phases.patch docs/wip/cluster-end-quad-stores.patch), one device call from
# the repository root: build, the tests that name the phases' launch, the per-kernel profile against the
# baselines below, the whole suite (3 shards), memcheck.
# Baselines (profiler, H200, N = 32, trainable weight, main before the patch: a launch and a Wt relayout
# per phase, each phase split as clusters by the per-launch rule), grad_input total us:
#   R10 bf16 nhwc 64.2 (phase launches 53.2, relayouts 11.1); R7 bf16 nhwc 43.9. cuDNN's R10 bf16 nhwc
#   grad_input: 26.4 (pass-times-resnet-yolo-h200, device time). grad_weight through clusters (kernel):
#   R12 bf16 nhwc 46.0 (34.4 for the same kernel writing the workspace), R10 bf16 nhwc 46.3; R12 forward
#   bf16 nhwc 42.4 and R12 TF32 NCHW grad_weight 103.0 (70.4 + finish 32.6) stay on the workspace.
# The targeted tests include main's test_frozen_weight_shared_by_strided_layers_of_other_paddings, written
# without a GPU (the cached filters of a strided grad_input named by their taps).
# Expect: one tc_conv_wgmma_phases_kernel and one tc_weight_relayout_phases_kernel per grad_input of
# R4 / R7 / R10; the rule's splits (last_choice): R4 1, R7 2, R10 2 (bf16 and TF32).
set -uo pipefail
export PYTHONUNBUFFERED=1
START=$SECONDS
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > $OUT/build.log 2>&1; echo "build rc=$? $((SECONDS-START)) s"
t0=$SECONDS
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_precision.py -k "phases_run_as_one_launch or frozen_weight_shared or tensor_copies or wgmma_config_rule or filter_reads_any" > $OUT/targeted.log 2>&1
echo "targeted rc=$? $((SECONDS-t0)) s: $(tail -1 $OUT/targeted.log)"; grep -E "^(FAILED|ERROR)" $OUT/targeted.log | head -10
timeout 60 python docs/wip/kernel_profile.py > $OUT/ab.log 2>&1; echo "ab rc=$?"
t0=$SECONDS
for i in 0 1 2; do TORCHCONV_TEST_SHARD=$i/3 OMP_NUM_THREADS=5 timeout 240 python -m pytest tests -q -rfEs -p no:cacheprovider > $OUT/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2; do tail -1 $OUT/t$i.log; done | tr '\n' ' ')"; grep -hE "^(FAILED|ERROR)" $OUT/t?.log | head -10
t0=$SECONDS
timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 python -m pytest -q -p no:cacheprovider tests/test_precision.py -k "(frozen_weight_shared and (bf16 or tf32)) or (wgmma_config_rule and bf16) or (reduced_precision_forward_and_gradients and gemm and cuda and bf16)" > $OUT/mc.log 2>&1
echo "memcheck rc=$? $((SECONDS-t0)) s $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/mc.log | tail -2 | tr '\n' ' ')"
grep AB $OUT/ab.log | cut -c1-170
