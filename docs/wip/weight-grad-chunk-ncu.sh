#!/usr/bin/env bash
# Why a 16-bit grad_weight chunk costs ~1.2-1.35 µs on the wide tile (128 filters x 256 columns x 64
# positions: 4 m64n256k16 wgmma per warpgroup, ~0.58 µs at the tensor cores' peak) while the forward's
# wide chunk of the same multiply-adds costs ~0.75 (docs/precision.md). Y8 bfloat16 channels_last,
# N = 32: its grad_weight one wave of 120 blocks of ~193 chunks (the workspace path: no cluster end in
# the way), its forward the wide tile. One launch of each kernel under ncu (an installed build: run it
# after a build in the same call). Compare between the two: the gmma pipe's active cycles, issue
# stalls (barrier = the per-chunk __syncthreads; long scoreboard = the cp.async waits; wait = the
# wgmma waits), shared-memory bank conflicts of the cp.async stores into the swizzled rows, L2
# throughput and hit rate (the gathered x rows are read 9 times, once a tap), instructions per chunk,
# and the source lines with most stall samples.
set -uo pipefail
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum
for kernel in tc_weight_grad_wgmma tc_conv_wgmma; do
  timeout 150 ncu --clock-control none --kernel-name regex:$kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section SchedulerStats --section SourceCounters --section LaunchStats \
    --metrics $M python benchmarks/profile_layer.py --layer Y8 --precision bf16 --layout nhwc --mode fwdbwd \
    --skip-reference --warmup 2 --reps 1 > $OUT/ncu_Y8_$kernel.txt 2>&1
  echo "ncu Y8 $kernel rc=$?"
  grep -E "Duration|gmma|inst_executed|bank_conflicts|lts__t|dram__bytes|Stall|stall|Issued Warp|Eligible|Est. Speedup" \
    $OUT/ncu_Y8_$kernel.txt | cut -c1-160 | head -30
done
