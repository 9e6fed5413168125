"""Session diagnostic (needs docs/wip/split-sweep.patch applied and built): each pass's time (CUDA
events, 20 calls x 5 rounds, median) of the GEMM's forward / grad_input under every forced wgmma config
at 1-6 splits (--configs, --splits; as the launch decides, through the workspace, as clusters) and grad_weight at 1-256
position splits (clusters and the workspace up to 16), against the rule; device times (the stream
held while the host queues); N = 32 (--batch), a trainable weight. Prints each pass's rule time and best
four, and writes every measurement to $OUT/sweep-<precision>-<layout>-n<batch>.json (after each pass).

    python docs/wip/split_sweep.py --layers Y18,Y12,R12,R9,R7 --precision tf32 --layout nchw
    python docs/wip/split_sweep.py --batch 8 --passes fwd,gi --configs wgmma-large,wgmma-wide --splits 1,2,4,8 --layers R12
    python docs/wip/split_sweep.py --batch 1 --passes fwd,gi --configs wgmma-large --splits 1,2,3,4,5,6,8 --plain --layers R9
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
import torchconv  # noqa: E402
from suites import RESNET, YOLO  # noqa: E402
from torchconv.timing import hold_stream  # noqa: E402

LAYERS = {layer.name: layer for layer in RESNET + YOLO}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
KNOBS = ("SPLITS", "NOCLUSTER", "CLUSTER", "GW_SPLITS")
ops = torch.ops.torchconv


def timeit(fn, reps=20, rounds=5):
    """The device's time of one call (the stream held while the host queues the calls, as
    torchconv.timing's device_time): a small layer's host path outlasts its kernels."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        hold_stream(2 * reps * host_s)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps * 1000)
    return statistics.median(times), host_s * 1e6


def set_knobs(**knobs):
    for k in KNOBS:
        os.environ.pop("TORCHCONV_EXP_" + k, None)
    for k, v in knobs.items():
        os.environ["TORCHCONV_EXP_" + k] = str(v)


def candidates(pass_, cap, configs, splits, plain=False):
    out = [("rule", {}, "")]
    if pass_ == "gw":
        for s in (1, 2, 3, 4, 5, 6, 8, 10, 12, 16):
            out += [(f"s{s}", dict(GW_SPLITS=s), ""), (f"s{s}/ws", dict(GW_SPLITS=s, NOCLUSTER=1), ""),
                    (f"s{s}/cl", dict(GW_SPLITS=s, CLUSTER=1), "")]
        # beyond the clusters' sizes: through the workspace only, up to the positions' 8 chunks a split
        out += [(f"s{s}", dict(GW_SPLITS=s), "") for s in (24, 32, 48, 64, 96, 128, 192, 256) if s <= cap]
        return out
    for config in configs:
        for s in splits:
            out.append((f"{config}/s{s}", dict(SPLITS=s), config))
            if s > 1 and not plain:
                out += [(f"{config}/s{s}/ws", dict(SPLITS=s, NOCLUSTER=1), config),
                        (f"{config}/s{s}/cl", dict(SPLITS=s, CLUSTER=1), config)]
    return out + [(c + "/s1", {}, c) for c in ("wgmma-ws", "wgmma-wide192") if c in configs]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", required=True)
    p.add_argument("--precision", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--layout", default="nhwc", choices=["nchw", "nhwc"])
    p.add_argument("--passes", default="fwd,gi,gw")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--configs", default="wgmma-large,wgmma-wide,wgmma-small,wgmma-medium,wgmma-tall,wgmma-tiny",
                   help="the forward / grad_input configs to split")
    p.add_argument("--splits", default="1,2,3,4,6", help="the forward / grad_input split counts")
    p.add_argument("--plain", action="store_true", help="only as the launch decides (not also forced "
                   "through the workspace and as clusters)")
    args = p.parse_args()
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    fmt = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    dtype = DTYPES[args.precision]
    results = []
    out = os.path.join(os.environ.get("OUT", "."), f"sweep-{args.precision}-{args.layout}-n{args.batch}.json")
    for name in args.layers.split(","):
        layer = LAYERS[name]
        x = torch.randn(args.batch, layer.C, layer.HW, layer.HW, device="cuda").to(dtype).contiguous(memory_format=fmt)
        w = torch.randn(layer.K, layer.C, layer.R, layer.R, device="cuda") / (layer.C * layer.R * layer.R) ** .5
        w = w.to(dtype).contiguous(memory_format=fmt)
        gy = torch.randn(args.batch, layer.K, layer.out_hw(), layer.out_w(), device="cuda").to(dtype).contiguous(memory_format=fmt)
        conv = ([layer.stride] * 2, list(layer.pads), [1, 1], 1)
        calls = {"fwd": lambda: ops.conv2d_gemm(x, w, None, *conv),
                 "gi": lambda: ops.conv2d_gemm_backward(gy, x, w, *conv, [True, False, False])[0],
                 "gw": lambda: ops.conv2d_gemm_backward(gy, x, w, *conv, [False, True, False])[1]}
        for pass_ in args.passes.split(","):
            ref = calls[pass_]().float()
            cap = args.batch * layer.out_hw() * layer.out_w() // (8 * 64)
            for label, knobs, config in candidates(pass_, cap, args.configs.split(","), [int(v) for v in args.splits.split(",")],
                                                  args.plain):
                set_knobs(**knobs)
                torchconv.set_config("gemm", config)
                try:
                    err = ((calls[pass_]().float() - ref).norm() / ref.norm()).item()
                    (us, host_us), choice = timeit(calls[pass_]), torchconv.last_choice()
                    choice += f" ws={torchconv.last_workspace_bytes()}"
                except Exception as e:  # a config that cannot run this layer
                    us, host_us, err, choice = float("nan"), float("nan"), float("nan"), str(e)[:80]
                results.append(dict(layer=name, pass_=pass_, label=label, us=us, host_us=host_us, err=err, choice=choice))
            set_knobs()
            torchconv.set_config("gemm", "")
            rows = [r for r in results if r["layer"] == name and r["pass_"] == pass_]
            best = sorted((r for r in rows if r["us"] == r["us"] and r["err"] < 1e-2), key=lambda r: r["us"])[:4]
            print(f"n{args.batch} {name:4} {pass_:3} host {rows[0]['host_us']:5.1f} rule {rows[0]['us']:7.1f} [{rows[0]['choice'][-40:]}] best: "
                  + " | ".join(f"{r['label']} {r['us']:.1f}" for r in best), flush=True)
            with open(out, "w") as f:  # after every pass, so that a call stopped at its limit keeps what it measured
                json.dump(results, f, indent=0)


if __name__ == "__main__":
    main()
