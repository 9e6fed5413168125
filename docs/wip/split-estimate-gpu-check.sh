#!/usr/bin/env bash
# The patches split-estimate-tf32, clusters-by-size and review-mends (on a branch: git am
# docs/wip/split-estimate-tf32.patch docs/wip/clusters-by-size.patch docs/wip/review-mends.patch), one
# device call from the repository
# root: build, the config rule's tests, per-pass rows (TF32 NCHW, bf16 / fp16 channels_last) and
# forward+backward rows (TF32 NCHW, bf16 channels_last) merged by row into copies of the committed files
# (copy the json and md back after checking), the whole suite (3 shards), memcheck; logs in logs.tgz.
# Expect (the sweep, H200, N = 32, CUDA events; docs/precision.md): TF32 NCHW R12 forward / grad_input
# 66 -> ~48 µs (wide/splits=4), R9 63-65 -> ~49 (wide/splits=2), Y18 grad_input 510 -> ~356
# (wide/splits=4), Y18 forward 352 -> ~344 (wide/splits=2); bf16 R7 forward back to wgmma-small/splits=1
# (21.3 -> ~17.5 µs). Unswept: TF32 R7 (36 chunks) takes wide/splits=2 by the estimate; check its row.
set -uo pipefail
export PYTHONUNBUFFERED=1
S=$SECONDS
mkdir -p /tmp/logs
PYTEST_SEL=skip bash benchmarks/gpu_session.sh > /tmp/logs/build.log 2>&1; echo "build rc=$? $((SECONDS-S)) s"
cp benchmarks/results/resnet-yolo-h200.json benchmarks/results/pass-times-resnet-yolo-h200.json $OUT/
t0=$SECONDS
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_precision.py -k "wgmma_config_rule or phases_run_as_one_launch" > /tmp/logs/targeted.log 2>&1
echo "targeted rc=$? $((SECONDS-t0)) s: $(tail -1 /tmp/logs/targeted.log)"; grep -E "^(FAILED|ERROR)" /tmp/logs/targeted.log | head -8
P="benchmarks/pass_times.py --suite resnet,yolo --algorithms gemm --weights trainable --out-dir $OUT"
t0=$SECONDS
timeout 90 python $P --precision tf32 --layout nchw > /tmp/logs/pt.log 2>&1; echo "pt tf32 rc=$?"
timeout 60 python $P --precision bf16 --layout nhwc >> /tmp/logs/pt.log 2>&1; echo "pt bf16 rc=$?"
timeout 60 python $P --precision fp16 --layout nhwc >> /tmp/logs/pt.log 2>&1; echo "pt fp16 rc=$? $((SECONDS-t0)) s"
B="benchmarks/bench.py --suite resnet,yolo --algorithms cudnn,gemm --batch 32 --mode fwdbwd --weights trainable --out-dir $OUT"
t0=$SECONDS
timeout 60 python $B --precision tf32 --layout nchw > /tmp/logs/bench.log 2>&1; echo "bench tf32 rc=$?"
timeout 50 python $B --precision bf16 --layout nhwc >> /tmp/logs/bench.log 2>&1; echo "bench bf16 rc=$? $((SECONDS-t0)) s"
t0=$SECONDS
left=$((560 - (SECONDS - S))); [ $left -gt 250 ] && left=250
for i in 0 1 2; do TORCHCONV_TEST_SHARD=$i/3 OMP_NUM_THREADS=5 timeout $left python -m pytest tests -q -rfEs -p no:cacheprovider > /tmp/logs/t$i.log 2>&1 & done; wait
echo "suite $((SECONDS-t0)) s: $(for i in 0 1 2; do tail -1 /tmp/logs/t$i.log; done | tr '\n' ' ')"; grep -hE "^(FAILED|ERROR)" /tmp/logs/t?.log | head -10
t0=$SECONDS
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python -m pytest -q -p no:cacheprovider tests/test_precision.py -k "wgmma_config_rule and tf32 and N32C512 and nchw" > /tmp/logs/mc.log 2>&1
echo "memcheck rc=$? $((SECONDS-t0)) s $(grep -E 'ERROR SUMMARY|passed|failed' /tmp/logs/mc.log | tail -2 | tr '\n' ' ')"
tar czf $OUT/logs.tgz -C /tmp logs
python - <<'P'
import json, os
out = os.environ["OUT"]
old = {(r["layer"], r["precision"], r["layout"], r["pass_"], r["algorithm"]): r
       for r in json.load(open("benchmarks/results/pass-times-resnet-yolo-h200.json"))["rows"] if r.get("weights") == "trainable"}
for r in json.load(open(os.path.join(out, "pass-times-resnet-yolo-h200.json")))["rows"]:
    k = (r["layer"], r["precision"], r["layout"], r["pass_"], r["algorithm"])
    if r["algorithm"] == "gemm" and r.get("weights") == "trainable" and k in old:
        o = old[k]
        if o["choice"] != r["choice"] or abs(r["us"] / o["us"] - 1) > 0.1:
            print(f"PT {k[0]:4} {k[1]} {k[2]} {k[3]:11} {o['us']:7.1f} -> {r['us']:7.1f} us (cudnn {r['cudnn_us']:6.1f}) {o['choice']} -> {r['choice']}")
P
