"""Whole torchvision models (random weights, no downloads) with every nn.Conv2d replaced by
torchconv.Conv2d(algorithm="auto") in benchmark mode, against the same model on cuDNN FP32 (TF32 off,
cudnn.benchmark on) in the same process:

  * inference under torch.inference_mode() and one training step (forward, cross-entropy, backward,
    SGD) at --batch, timed interleaved with cuDNN (torchconv.timing.compare);
  * the logits against the nn.Conv2d model's (relative error), and the algorithms benchmark mode
    chose, with any candidate it had to skip;
  * mode per-sample (not by default): every sample's gradient of every parameter by torch.func's
    vmap(grad(loss)), DP-SGD's step, batch norm in eval mode (its running statistics), against the
    same transform over the nn.Conv2d model; the error is the largest over parameters of the
    per-sample gradients' relative error. Under a transform the rule chooses (benchmark mode cannot
    time wrapped tensors), so the row's choice is "rule".

    python benchmarks/models.py --models resnet50,mobilenet_v3_large --batch 32
Rows go to <out-dir>/<tag>.json and .md (suite = the model's name, layer "model", mode fwd / train).
"""
import argparse
import collections
import copy
import os
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchconv  # noqa: E402
from layer_grads import check_layers, record_conv_tensors, stochastic_layers_off  # noqa: E402
from merge_results import auto_choice, merge_rows, write_result  # noqa: E402
from bench import environment, gpu_slug, rel_err  # noqa: E402
from torchconv.timing import compare  # noqa: E402

MODELS = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "resnet18")
# --zoo: one model of each family -- residual, depthwise / inverted residual, grouped, dense,
# inception-style, ConvNeXt, channel shuffle, squeeze-and-excitation, a segmentation network.
ZOO = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "resnext50_32x4d", "densenet121", "googlenet",
       "convnext_tiny", "shufflenet_v2_x1_0", "regnet_y_400mf", "squeezenet1_1", "fcn_resnet50")


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
    p.add_argument("--tag", default=None, help="file name stem (default: models-<gpu>, zoo-<gpu>)")
    p.add_argument("--zoo", action="store_true",
                   help="the model zoo (ZOO): per model one inference and one training step, logits and gradients "
                        "against the nn.Conv2d model, time against cuDNN FP32; rows to zoo-<gpu>.json")
    return p.parse_args(argv)


def build(name):
    import torchvision

    if name == "fcn_resnet50":
        return torchvision.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None, aux_loss=False)
    if name == "googlenet":
        return torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True)
    return getattr(torchvision.models, name)(weights=None)


def logits(out):
    return out["out"] if isinstance(out, dict) else out


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


def per_sample_grads(model):
    """A function of (x, target) returning {parameter name: the per-sample gradients, stacked}."""
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())

    def loss(p, sample, target):
        return F.cross_entropy(logits(functional_call(model, (p, buffers), (sample.unsqueeze(0),))), target.unsqueeze(0))

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    return lambda x, target: per_sample(params, x, target)


def bench_model(name, args, device, log):
    torch.manual_seed(0)
    reference = build(name).to(device)
    ours = torchconv.convert(copy.deepcopy(reference))
    x = torch.randn(args.batch, 3, args.image, args.image, device=device)
    base = dict(suite=name, layer="model", N=args.batch, H=args.image, W=args.image, precision="fp32", layout="nchw",
                dtype="float32", groups=None, dilation=None, rounds=args.rounds, reps=args.reps)
    # Inference runs under torch.inference_mode(), where filter transforms come from the weight cache;
    # a training step re-derives them every call.
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
            elif mode == "per-sample":
                reference.eval(), ours.eval()
                target = torch.randint(0, 1000, (args.batch,), device=device)
                our_grads, ref_grads = per_sample_grads(ours), per_sample_grads(reference)
                got, want = our_grads(x, target), ref_grads(x, target)
                err = max(rel_err(got[k], want[k]) for k in want)
                del got, want
                timed = compare(lambda: our_grads(x, target), lambda: ref_grads(x, target), device,
                                rounds=args.rounds, reps=args.reps)
            else:
                ref_train, our_train = copy.deepcopy(reference).train(), copy.deepcopy(ours).train()
                target = torch.randint(0, 1000, (args.batch,), device=device)
                torchconv.tune(copy.deepcopy(our_train), x, train=True, progress=False)
                with torch.no_grad():  # same weights, train-mode batch norm, same dropout masks
                    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                        torch.manual_seed(1)
                        ours_logits = our_train(x)
                        torch.manual_seed(1)
                        err = rel_err(ours_logits, ref_train(x))
                ref_opt = torch.optim.SGD(ref_train.parameters(), lr=1e-3, momentum=0.9)
                our_opt = torch.optim.SGD(our_train.parameters(), lr=1e-3, momentum=0.9)
                timed = compare(lambda: step(our_train, our_opt, x, target), lambda: step(ref_train, ref_opt, x, target),
                                device, rounds=args.rounds, reps=args.reps)
                ours_for_choices = our_train
        skipped = sorted({str(w.message) for w in caught if "skipped" in str(w.message)})
        # Under a transform the module keeps no memo of its choice: no counts to report.
        choices = None if mode == "per-sample" else chosen(ours if mode == "fwd" else ours_for_choices)
        rows.append(dict(base, mode=mode, algorithm="cudnn", ms=timed["reference_ms"], cudnn_ms=timed["reference_ms"],
                         ratio=1.0, ratio_min=1.0, ratio_max=1.0, spread_flag=False, rel_err=None, weight_cache=False))
        rows.append(dict(base, mode=mode, algorithm="auto", config="rule" if mode == "per-sample" else "benchmark",
                         ms=timed["ms"],
                         cudnn_ms=timed["reference_ms"], ratio=timed["ratio"], ratio_min=timed["ratio_min"],
                         ratio_max=timed["ratio_max"], spread_flag=timed["spread_flag"], rel_err=err,
                         weight_cache=mode == "fwd", algorithms=choices, skipped=skipped))
        log(f"  {name:<20} {mode:<5} N={args.batch:<3} ours {timed['ms']:8.3f} ms  cuDNN {timed['reference_ms']:8.3f} ms "
            f"x{timed['ratio']:.2f} [{timed['ratio_min']:.2f}-{timed['ratio_max']:.2f}]  logits err {err:.1e}  "
            f"{choices}" + (f"  skipped: {len(skipped)}" if skipped else ""))
    return rows


def zoo_model(name, args, device, log):
    """One inference and one training step of `name`, converted, against the nn.Conv2d model."""
    row = dict(model=name, batch=args.batch, ok=False, precision="fp32", layout="nchw")
    try:
        torch.manual_seed(0)
        reference = build(name).to(device)
        ours = torchconv.convert(copy.deepcopy(reference))
        x = torch.randn(args.batch, 3, args.image, args.image, device=device)
        torchconv.clear_cache()
        reference.eval(), ours.eval()
        with torch.inference_mode():
            torchconv.tune(ours, x, progress=False)
            row["logit_err"] = rel_err(logits(ours(x)), logits(reference(x)))
            timed = compare(lambda: ours(x), lambda: reference(x), device, rounds=args.rounds, reps=args.reps)
        row.update(ms=timed["ms"], cudnn_ms=timed["reference_ms"], ratio=timed["ratio"], ratio_min=timed["ratio_min"],
                   ratio_max=timed["ratio_max"])
        reference.train(), ours.train()
        torchconv.tune(copy.deepcopy(ours), x, train=True, progress=False)
        # One step's gradients, with dropout and stochastic depth off (their masks would differ between
        # dtypes): each convolution's against a float64 convolution of the tensors it saw (the bar,
        # benchmarks/layer_grads.py), and the whole model's against the nn.Conv2d model in float64,
        # ours and cuDNN FP32's (which jump at near-ties of max pools and ReLUs, for either).
        for model in (ours, reference):
            stochastic_layers_off(model)
        reference64 = copy.deepcopy(reference).double()
        grads = []
        for model, inp in ((ours, x), (reference, x), (reference64, x.double())):
            model.zero_grad(set_to_none=True)
            with record_conv_tensors(model) as records, \
                    torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(1)
                logits(model(inp)).square().mean().backward()
            if model is ours:
                errors, row["layer_grad_over"] = check_layers(records)
                row["layer_grad_err"] = max(e[0] for errs in errors.values() for e in errs.values())
                del records
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        del reference64
        row["grad_err"] = rel_err(grads[0], grads[2])
        row["cudnn_grad_err"] = rel_err(grads[1], grads[2])
        row["grad_err_vs_cudnn"] = rel_err(grads[0], grads[1])
        opt_ours = torch.optim.SGD(ours.parameters(), lr=1e-4)
        opt_ref = torch.optim.SGD(reference.parameters(), lr=1e-4)

        def train_step(model, opt):
            opt.zero_grad(set_to_none=True)
            logits(model(x)).float().square().mean().backward()
            opt.step()

        timed = compare(lambda: train_step(ours, opt_ours), lambda: train_step(reference, opt_ref), device,
                        rounds=args.rounds, reps=max(1, args.reps // 2))
        row.update(train_ms=timed["ms"], cudnn_train_ms=timed["reference_ms"], train_ratio=timed["ratio"],
                   train_ratio_min=timed["ratio_min"], train_ratio_max=timed["ratio_max"], algorithms=chosen(ours),
                   ok=True)
    except Exception as err:  # noqa: BLE001 -- a model that fails is a row that says so
        row["error"] = f"{type(err).__name__}: {err}"
    log(f"  {name:<20} ok={row['ok']} " + (f"logits {row['logit_err']:.1e} layer grads {row['layer_grad_err']:.1e} "
        f"{row['layer_grad_over'] or ''} model grads {row['grad_err']:.1e} (cuDNN FP32's {row['cudnn_grad_err']:.1e}) "
        f"inference x{row['ratio']:.2f} train x{row['train_ratio']:.2f} {row['algorithms']}" if row["ok"]
        else row.get("error", "")))
    return row


def write_zoo_markdown(path, meta, rows):
    lines = [f"# Model zoo — {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, {meta['date']}. torchvision models, random weights, FP32, "
             "every nn.Conv2d converted, benchmark mode on; the nn.Conv2d model on cuDNN FP32 (TF32 off) is the "
             "reference for the logits and the times (interleaved rounds). One training step's gradients: each "
             "convolution's against a float64 convolution of the tensors it saw (worst over layers and gradients; "
             "the bar 1e-5 or 2x cuDNN FP32's on the same tensors), and the whole model's against the nn.Conv2d "
             "model in float64, ours and cuDNN FP32's alike (these jump at max-pool and ReLU near-ties).", "",
             "| model | batch | ok | logits rel err | layer grads rel err (worst) | model grads rel err (ours / cuDNN "
             "FP32, vs float64) | inference ms | cuDNN ms | ratio | train step ms | cuDNN ms | ratio | algorithms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["ok"]:
            lines.append(f"| {r['model']} | {r['batch']} | no: {r.get('error', '')[:80]} |" + " - |" * 10)
            continue
        algos = ", ".join(f"{k} {v}" for k, v in sorted(r["algorithms"].items()))
        layer = f"{r['layer_grad_err']:.1e}" + (f" (over: {'; '.join(r['layer_grad_over'])})" if r["layer_grad_over"]
                                                else "")
        lines.append(f"| {r['model']} | {r['batch']} | yes | {r['logit_err']:.1e} | {layer} | {r['grad_err']:.1e} / "
                     f"{r['cudnn_grad_err']:.1e} | "
                     f"{r['ms']:.2f} | {r['cudnn_ms']:.2f} | {r['ratio']:.2f} | {r['train_ms']:.2f} | "
                     f"{r['cudnn_train_ms']:.2f} | {r['train_ratio']:.2f} | {algos} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_markdown(path, meta, rows):
    lines = [f"# Models end to end — {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, CUDA {meta['cuda']}, {meta['date']}. torchvision models "
             "with random weights; cudnn = cuDNN at the row's precision (cudnn.benchmark on; fp32 = TF32 off, tf32 = "
             "TF32 allowed, amp-* = torch.autocast, in the row's layout); auto = every conv a torchconv.Conv2d, its "
             "algorithm chosen in benchmark mode (timed) or by the rule (examples/resnet50.py --no-benchmark). ratio = "
             "cuDNN ms / ms, median over interleaved rounds [min-max].",
             "", "| model | precision | layout | mode | N | choice | torchconv ms | cuDNN ms | ratio [min-max] | "
             "logits rel err | algorithms |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["algorithm"] != "auto":
            continue
        algos = ", ".join(f"{k} {v}" for k, v in sorted((r.get("algorithms") or {}).items())) or "-"
        spread = (f" [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]{'!' if r.get('spread_flag') else ''}"
                  if "ratio_min" in r else "")
        err = f"{r['rel_err']:.1e}" if r.get("rel_err") is not None else "-"
        lines.append(f"| {r['suite']} | {r.get('precision', 'fp32')} | {r.get('layout', 'nchw')} | {r['mode']} | {r['N']} | "
                     f"{auto_choice(r)} | {r['ms']:.3f} | {r['cudnn_ms']:.3f} | {r['ratio']:.2f}{spread} | {err} | {algos} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def use_fp32_reference(device):
    """The FP32 rows' setting: IEEE FP32 on both sides (TF32 off, which our operators follow too)
    and cuDNN's own benchmark mode on."""
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    use_fp32_reference(device)
    meta = environment(device)
    print(f"# {meta['gpu']} | torch {meta['torch']} | cuDNN {meta['cudnn']}", flush=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    os.makedirs(args.out_dir, exist_ok=True)
    extra = {"argv": sys.argv[1:] if argv is None else list(argv)}
    if args.zoo:
        # The zoo file is rewritten whole, after each model: a run stopped part-way keeps what it measured,
        # and "models" says what the run was to measure (the README names the models it did not reach).
        stem, rows = os.path.join(args.out_dir, args.tag or f"zoo-{gpu_slug(meta)}"), []
        for name in ZOO:
            rows.append(zoo_model(name, args, device, log))
            write_result(stem + ".json", {"meta": meta, **extra, "models": list(ZOO), "rows": rows},
                         write_zoo_markdown)
    else:  # rewritten in place: rows of other models, precisions or batches stay (merge_results.py)
        stem, rows = os.path.join(args.out_dir, args.tag or f"models-{gpu_slug(meta)}"), []
        for name in args.models.split(","):
            rows += bench_model(name, args, device, log)
        merge_rows(stem + ".json", meta, rows, write_markdown, extra)
    torchconv.set_benchmark(False)
    print(f"wrote {stem}.json/.md ({len(rows)} rows)")
    return rows

if __name__ == "__main__":
    main()
