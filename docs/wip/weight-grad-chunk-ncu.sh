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
# and the source lines with most stall samples. A question to settle first: benchmarks/results/
# wgmma-rate-h200.md measured thread-issued shared stores starved beside shared-operand MMAs (1.7 B/clk
# against 72 alone) while bulk copies kept 40 B/clk; the wide tile's MMAs read ~80 B/clk of shared
# memory at peak and its cp.async fill writes 48 KB a chunk, so fill and MMAs may take turns (~1000 +
# ~670 clk a chunk, near the ~2100 measured). Against it: a version copying both tiles by tensor copies
# was slower (docs/precision.md, grad_weight "Tried and not kept").
set -uo pipefail
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__throughput.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed_op_ldgsts.sum,smsp__inst_executed_op_global_ld.sum
for kernel in tc_weight_grad_wgmma tc_conv_wgmma; do
  run="python benchmarks/profile_layer.py --layer Y8 --precision bf16 --layout nhwc --mode fwdbwd --skip-reference --warmup 2 --reps 1"
  timeout 150 ncu --clock-control none --kernel-name regex:$kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section SchedulerStats --section SourceCounters --section LaunchStats \
    $run > $OUT/ncu_Y8_$kernel.txt 2>&1
  echo "ncu Y8 $kernel sections rc=$?"
  # The raw metrics apart: a name this ncu does not know fails its run, not the sections'.
  timeout 120 ncu --clock-control none --kernel-name regex:$kernel --launch-skip 2 --launch-count 1 --metrics $M \
    $run > $OUT/ncu_Y8_${kernel}_metrics.txt 2>&1
  echo "ncu Y8 $kernel metrics rc=$?"
  grep -hE "Duration|gmma|inst_executed|bank_conflicts|lts__t|dram__bytes|l1tex__|Stall|stall|Issued Warp|Eligible|Est. Speedup" \
    $OUT/ncu_Y8_$kernel.txt $OUT/ncu_Y8_${kernel}_metrics.txt | cut -c1-160 | head -40
done
