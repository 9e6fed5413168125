"""Whole torchvision models (random weights, no downloads) with every nn.Conv2d replaced by
torchconv.Conv2d(algorithm="auto") in benchmark mode, against the same model on cuDNN FP32 (TF32 off,
cudnn.benchmark on) in the same process:

  * inference under torch.inference_mode() and one training step (forward, cross-entropy, backward,
    SGD) at --batch, timed interleaved with cuDNN (torchconv.timing.compare);
  * the logits against the nn.Conv2d model's (relative error), and the algorithms benchmark mode
    chose, with any candidate it had to skip.

    python benchmarks/models.py --models resnet50,mobilenet_v3_large --batch 32
Rows go to <out-dir>/<tag>.json and .md (suite = the model's name, layer "model", mode fwd / train).
"""
import argparse
import collections
import copy
import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchconv  # noqa: E402
from bench import environment, gpu_slug  # noqa: E402
from torchconv.timing import compare  # noqa: E402

MODELS = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "resnet18")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--modes", default="fwd,train")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    p.add_argument("--tag", default=None, help="file name stem (default: models-<gpu>)")
    return p.parse_args(argv)


def build(name):
    import torchvision

    return getattr(torchvision.models, name)(weights=None)


def rel_err(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def chosen(model):
    """How many convolutions run each algorithm (the memo each torchconv.Conv2d keeps)."""
    counts = collections.Counter()
    for m in model.modules():
        if isinstance(m, torchconv.Conv2d):
            memo = m.__dict__.get("_auto_memo")
            counts[memo[1] if memo else "not run"] += 1
    return dict(counts)


def step(model, optimizer, x, target):
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), target).backward()
    optimizer.step()


def bench_model(name, args, device, log):
    torch.manual_seed(0)
    reference = build(name).to(device)
    ours = torchconv.convert(copy.deepcopy(reference))
    x = torch.randn(args.batch, 3, args.image, args.image, device=device)
    base = dict(suite=name, layer="model", N=args.batch, H=args.image, W=args.image, precision="fp32", layout="nchw",
                dtype="float32", groups=None, dilation=None, rounds=args.rounds, reps=args.reps)
    rows = []
    for mode in args.modes.split(","):
        torchconv.clear_cache()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if mode == "fwd":
                reference.eval(), ours.eval()
                with torch.inference_mode():
                    torchconv.tune(ours, x, progress=False)
                    err = rel_err(ours(x), reference(x))
                    timed = compare(lambda: ours(x), lambda: reference(x), device, rounds=args.rounds, reps=args.reps)
            else:
                ref_train, our_train = copy.deepcopy(reference).train(), copy.deepcopy(ours).train()
                target = torch.randint(0, 1000, (args.batch,), device=device)
                torchconv.tune(copy.deepcopy(our_train), x, train=True, progress=False)
                with torch.no_grad():  # same weights, train-mode batch norm: the logits must agree
                    err = rel_err(our_train(x), ref_train(x))
                ref_opt = torch.optim.SGD(ref_train.parameters(), lr=1e-3, momentum=0.9)
                our_opt = torch.optim.SGD(our_train.parameters(), lr=1e-3, momentum=0.9)
                timed = compare(lambda: step(our_train, our_opt, x, target), lambda: step(ref_train, ref_opt, x, target),
                                device, rounds=args.rounds, reps=args.reps)
                ours_for_choices = our_train
        skipped = sorted({str(w.message) for w in caught if "skipped" in str(w.message)})
        choices = chosen(ours if mode == "fwd" else ours_for_choices)
        rows.append(dict(base, mode=mode, algorithm="cudnn", ms=timed["reference_ms"], cudnn_ms=timed["reference_ms"],
                         ratio=1.0, ratio_min=1.0, ratio_max=1.0, spread_flag=False, rel_err=None))
        rows.append(dict(base, mode=mode, algorithm="auto", config="benchmark", ms=timed["ms"],
                         cudnn_ms=timed["reference_ms"], ratio=timed["ratio"], ratio_min=timed["ratio_min"],
                         ratio_max=timed["ratio_max"], spread_flag=timed["spread_flag"], rel_err=err,
                         algorithms=choices, skipped=skipped))
        log(f"  {name:<20} {mode:<5} N={args.batch:<3} ours {timed['ms']:8.3f} ms  cuDNN {timed['reference_ms']:8.3f} ms "
            f"x{timed['ratio']:.2f} [{timed['ratio_min']:.2f}-{timed['ratio_max']:.2f}]  logits err {err:.1e}  "
            f"{choices}" + (f"  skipped: {len(skipped)}" if skipped else ""))
    return rows


def write_markdown(path, meta, rows):
    lines = [f"# Models end to end — {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, CUDA {meta['cuda']}, {meta['date']}. torchvision models "
             "with random weights, FP32; cudnn = cuDNN FP32 (TF32 off, cudnn.benchmark on); auto = every conv a "
             "torchconv.Conv2d in benchmark mode. ratio = cuDNN ms / ms, median over interleaved rounds [min-max].",
             "", "| model | mode | N | torchconv ms | cuDNN ms | ratio [min-max] | logits rel err | algorithms |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["algorithm"] != "auto":
            continue
        algos = ", ".join(f"{k} {v}" for k, v in sorted(r["algorithms"].items()))
        lines.append(f"| {r['suite']} | {r['mode']} | {r['N']} | {r['ms']:.3f} | {r['cudnn_ms']:.3f} | "
                     f"{r['ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]{'!' if r['spread_flag'] else ''} | "
                     f"{r['rel_err']:.1e} | {algos} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    meta = environment(device)
    print(f"# {meta['gpu']} | torch {meta['torch']} | cuDNN {meta['cudnn']}", flush=True)
    rows = []
    for name in args.models.split(","):
        rows += bench_model(name, args, device, lambda s: print(s, flush=True))
    torchconv.set_benchmark(False)
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, args.tag or f"models-{gpu_slug(meta)}")
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "argv": sys.argv[1:] if argv is None else list(argv), "rows": rows}, f, indent=1)
    write_markdown(stem + ".md", meta, rows)
    print(f"wrote {stem}.json/.md ({len(rows)} rows)")
    return rows


if __name__ == "__main__":
    main()
