"""Where a whole model's time goes, ours against cuDNN: one training step (or one inference) of a
torchvision model converted with torchconv.convert, after tuning in benchmark mode, next to the
nn.Conv2d model on cuDNN FP32 (TF32 off, cudnn.benchmark on), under torch.profiler:

  * per step: kernels launched, device time of all kernels and of torchconv's own, the time of the
    step by events with the host waiting between steps, and the host's enqueue time;
  * the kernels by device time (µs per step, launches per step), ours and cuDNN's side by side;
  * per convolution shape, the algorithm benchmark mode chose and the times it measured.

A diagnostic (the timing protocol's figures are models.py's): it tells whether a step is bound by
the device or by the host, and which kernels make the difference.

    python benchmarks/profile_model.py --model efficientnet_b0 --mode train
    python benchmarks/profile_model.py --model resnet18 --mode per-sample   # vmap(grad(loss)) over the batch
"""
import argparse
import collections
import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchconv  # noqa: E402
from bench import environment, gpu_slug  # noqa: E402
from models import build, per_sample_grads, step, use_fp32_reference  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="efficientnet_b0")
    p.add_argument("--mode", choices=("train", "fwd", "per-sample"), default="train")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--steps", type=int, default=5, help="steps under the profiler (and timed steps x2)")
    p.add_argument("--top", type=int, default=25, help="kernels listed per contender")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out-dir", default=None,
                   help="also keep the report in <out-dir>/profile-models-<gpu>.json and .md (one entry per model, "
                        "mode and batch, replaced in place)")
    return p.parse_args(argv)


def contenders(name, args, device):
    """{"ours": step fn, "cudnn": step fn}: the converted model's and the nn.Conv2d model's."""
    torch.manual_seed(0)
    reference = build(name).to(device)
    ours = torchconv.convert(copy.deepcopy(reference))
    x = torch.randn(args.batch, 3, args.image, args.image, device=device)
    torchconv.clear_cache()
    if args.mode == "train":
        reference.train(), ours.train()
        target = torch.randint(0, 1000, (args.batch,), device=device)
        torchconv.tune(copy.deepcopy(ours), x, train=True, progress=False)
        opts = {m: torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9) for m in (reference, ours)}
        return {"ours": lambda: step(ours, opts[ours], x, target),
                "cudnn": lambda: step(reference, opts[reference], x, target)}
    reference.eval(), ours.eval()
    if args.mode == "per-sample":
        # Under a torch.func transform the rule chooses (benchmark mode cannot time wrapped tensors).
        target = torch.randint(0, 1000, (args.batch,), device=device)
        fns = {who: per_sample_grads(m) for who, m in (("ours", ours), ("cudnn", reference))}
        return {who: (lambda fn=fn: fn(x, target)) for who, fn in fns.items()}
    with torch.inference_mode():
        torchconv.tune(ours, x, progress=False)

    def infer(model):
        with torch.inference_mode():
            model(x)
    return {"ours": lambda: infer(ours), "cudnn": lambda: infer(reference)}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_times(fn, device, steps):
    """Median ms of a step: by events (the host waits for the device before each step) and the
    host's enqueue time alone (perf_counter to the return of the step)."""
    wall, host = [], []
    for _ in range(2 * steps):
        sync(device)
        t0 = time.perf_counter()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
        if device.type == "cuda":
            end.record()
            sync(device)
            wall.append(start.elapsed_time(end))
        else:
            wall.append(host[-1])
    return statistics.median(wall), statistics.median(host)


def kernel_profile(fn, device, steps):
    """{kernel name: [µs per step, launches per step]} under torch.profiler (operators on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()
        sync(device)
    kernels = collections.defaultdict(lambda: [0.0, 0.0])
    for ev in prof.events():
        if on_gpu and ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        k = kernels[ev.name]
        k[0] += (ev.device_time_total if on_gpu else ev.self_cpu_time_total) / steps
        k[1] += 1 / steps
    return dict(kernels)


def write_results(stem, report, top=12):
    """Keeps `report` in stem.json (replacing an entry of the same model, mode and batch) and
    renders stem.md: per entry the step summary and the kernels with the most device time."""
    key = lambda r: (r["model"], r["mode"], r["batch"])  # noqa: E731
    entries = []
    if os.path.exists(stem + ".json"):
        with open(stem + ".json") as f:
            entries = [r for r in json.load(f)["profiles"] if key(r) != key(report)]
    entries.append(report)
    with open(stem + ".json", "w") as f:
        json.dump({"profiles": entries}, f, indent=1)
    lines = ["# Where a model's step goes (benchmarks/profile_model.py)", "",
             "Ours (every nn.Conv2d a torchconv.Conv2d, benchmark mode) against the nn.Conv2d model on cuDNN FP32 "
             "(TF32 off, cudnn.benchmark on) in the same process. step ms: by events, the host waiting for the device "
             "before each step; host ms: the host's enqueue time; device ms: all kernels under torch.profiler "
             "(on a CPU: the operators' CPU time); torchconv ms: torchconv's own kernels. A diagnostic: the "
             "timing protocol's ratios are models.py's."]
    for r in entries:
        m = r.get("meta", {})
        lines += ["", f"## {r['model']} {r['mode']} N={r['batch']} — {m.get('gpu', '?')}, torch {m.get('torch', '?')}, "
                  f"cuDNN {m.get('cudnn', '?')}, {m.get('date', '?')}", "",
                  "| | step ms | host ms | device ms | torchconv ms | launches |", "|---|---|---|---|---|---|"]
        for who, c in r["contenders"].items():
            lines.append(f"| {who} | {c['step_ms']:.2f} | {c['host_ms']:.2f} | {c['device_ms']:.2f} | "
                         f"{c['torchconv_device_ms']:.2f} | {c['launches']:.0f} |")
        for who, c in r["contenders"].items():
            lines += ["", f"{who}: kernels by device time (µs per step, launches per step)", "",
                      "| µs | launches | kernel |", "|---|---|---|"]
            lines += [f"| {us:.1f} | {n:.1f} | `{name[:100]}` |" for name, us, n in c["kernels"][:top]]
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    use_fp32_reference(device)
    fns = contenders(args.model, args, device)
    for fn in fns.values():  # warm-up (cuDNN's own benchmark, allocator)
        for _ in range(3):
            fn()
    sync(device)
    # Timers first: a profiler session leaves host-side costs behind for the rest of the process.
    timed = {who: step_times(fn, device, args.steps) for who, fn in fns.items()}
    report = {"model": args.model, "mode": args.mode, "batch": args.batch, "contenders": {}}
    for who, fn in fns.items():
        kernels = kernel_profile(fn, device, args.steps)
        report["contenders"][who] = {
            "step_ms": timed[who][0], "host_ms": timed[who][1],
            "device_ms": sum(v[0] for v in kernels.values()) / 1e3,
            "torchconv_device_ms": sum(v[0] for k, v in kernels.items() if "torchconv" in k) / 1e3,
            "launches": sum(v[1] for v in kernels.values()),
            "kernels": sorted(([k, round(v[0], 1), round(v[1], 1)] for k, v in kernels.items()), key=lambda r: -r[1]),
        }
    report["choices"] = [
        {"input": list(k[1]), "weight": list(k[2]), "stride": list(k[3]), "groups": k[6], "train": k[9],
         "algorithm": v["algorithm"], "ms": v["ms"]}
        for k, v in torchconv.tuning.cache_entries().items()]
    torchconv.set_benchmark(False)
    if args.out_dir:
        meta = environment(device)
        report["meta"] = meta
        os.makedirs(args.out_dir, exist_ok=True)
        write_results(os.path.join(args.out_dir, f"profile-models-{gpu_slug(meta)}"), report)
    unit = "µs of device time" if device.type == "cuda" else "µs of CPU time"
    for who, c in report["contenders"].items():
        print(f"--- {who}: top kernels ({unit} per step, launches per step)")
        for name, us, n in c["kernels"][:args.top]:
            print(f"{us:9.1f} {n:6.1f}  {name[:110]}")
    print("--- choices (benchmark mode, time per call as measured)")
    for ch in report["choices"]:
        times = " ".join(f"{a}={ms * 1e3:.0f}us" for a, ms in sorted(ch["ms"].items()))
        print(f"{str(tuple(ch['input'])):<22} {str(tuple(ch['weight'])):<20} s{ch['stride']} g{ch['groups']:<5} "
              f"{'train' if ch['train'] else 'fwd  '} {ch['algorithm']:<9} {times}")
    print(f"--- {args.model} {args.mode} N={args.batch}")
    busy, count = ("device ms", "launches") if device.type == "cuda" else ("op cpu ms", "ops")
    print(f"{'':8} {'step ms':>8} {'host ms':>8} {busy:>10} {'torchconv ms':>13} {count:>9}")
    for who, c in report["contenders"].items():
        print(f"{who:8} {c['step_ms']:8.2f} {c['host_ms']:8.2f} {c['device_ms']:10.2f} {c['torchconv_device_ms']:13.2f} "
              f"{c['launches']:9.0f}")
    return report


if __name__ == "__main__":
    main()
