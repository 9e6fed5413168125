"""torchvision's ResNet-50 (weights=None, no downloads) with every nn.Conv2d replaced by
torchconv.Conv2d(algorithm="auto"), against the same model on cuDNN in the same process:

  * inference at each --batch (default 1 and 32), under torch.inference_mode();
  * one training step (forward, cross-entropy, backward, SGD step) at --train-batch (default 32);
  * at each --precision, torchconv and cuDNN at that same setting, timed interleaved
    (torchconv.timing.compare: 5 rounds), cudnn.benchmark on:
      fp32      IEEE FP32 (torch.backends.cudnn.allow_tf32 = False), NCHW;
      tf32      PyTorch's default: float32 with TF32 convolutions allowed, NCHW;
      amp-bf16  torch.autocast("cuda", torch.bfloat16) with the model, input and weights in
      amp-fp16  channels_last (float16 likewise), TF32 allowed;
    --layout nchw or nhwc puts every precision in that memory format instead (autocast without
    channels_last, as many training scripts run it: --precision amp-bf16 --layout nchw);
  * inference also replayed from a CUDA graph (mode "fwd-graph", unless --no-graph): the device's
    time alone, without the host's Python, dispatch and launch path. At batch 32 an eager forward
    can be bound by a slow host (both models alike), which compresses the eager ratio toward 1;
  * the logits compared with the nn.Conv2d original at the same setting (relative error).

torchconv runs in benchmark mode (torchconv.tune: every conv shape timed once per algorithm, the
fastest kept) unless --no-benchmark; the measured choices are saved with --save-cache and a later
run can skip tuning with --load-cache. Rows go to <out-dir>/<tag>.json and .md in the benchmark JSON
shape (suite "resnet50", layer "model", algorithm "auto" / "cudnn" / "cudnn-default", mode "fwd",
"fwd-graph" or "train"), with the per-layer torchconv.explain table at --explain-batch.

  python examples/resnet50.py --out-dir benchmarks/results --tag resnet50-h100
"""
import argparse
import contextlib
import copy
import json
import os

import torch
import torch.nn.functional as F

import torchconv
from torchconv.timing import compare, environment


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", default="1,32", help="inference batch sizes")
    p.add_argument("--precision", default="fp32,tf32,amp-bf16", help="comma list of " + ", ".join(PRECISIONS))
    p.add_argument("--layout", default="default", choices=("default", "nchw", "nhwc"),
                   help="memory format of every precision (default: nchw for fp32 / tf32, nhwc for amp-*)")
    p.add_argument("--train-batch", type=int, default=32, help="training-step batch size (0: skip)")
    p.add_argument("--explain-batch", type=int, default=32, help="batch of the per-layer explain table (0: skip)")
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--no-benchmark", action="store_true", help="use the auto rule instead of measuring")
    p.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph inference rows")
    p.add_argument("--load-cache", default=None)
    p.add_argument("--save-cache", default=None)
    p.add_argument("--out-dir", default=None, help="write <tag>.json / .md here")
    p.add_argument("--tag", default="resnet50")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args(argv)


def resnet50():
    import torchvision

    return torchvision.models.resnet50(weights=None)


PRECISIONS = ("fp32", "tf32", "amp-bf16", "amp-fp16")


MEMORY_FORMATS = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}


def precision_settings(precision, device, layout="default"):
    """Sets PyTorch's switches for `precision` (both models follow them: torchconv reads the cuDNN
    TF32 switch) and returns (autocast context factory, memory format, layout name); `layout`
    "default" is channels_last under autocast, NCHW otherwise."""
    torch.backends.cudnn.allow_tf32 = precision != "fp32"
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False  # the fc layer is the same for every model
    amp = precision.startswith("amp-")
    if layout == "default":
        layout = "nhwc" if amp else "nchw"
    if amp:
        dtype = torch.bfloat16 if precision == "amp-bf16" else torch.float16
        return (lambda: torch.autocast(device.type, dtype=dtype)), MEMORY_FORMATS[layout], layout
    return contextlib.nullcontext, MEMORY_FORMATS[layout], layout


def graph_replay(model, x, autocast):
    """model(x) captured in a CUDA graph (after warm-up calls on a side stream, as torch.cuda.graph
    asks); returns the graph's replay, which launches the captured kernels without the host path."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.inference_mode(), autocast():
        for _ in range(2):
            model(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), autocast(), torch.cuda.graph(graph):
        model(x)
    return graph.replay


def cudnn_conv(module, x):
    """The comparison for torchconv.explain: the layer through nn.Conv2d's own forward (cuDNN)."""
    return torch.nn.Conv2d._conv_forward(module, x, module.weight, module.bias)


def rel_err(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    base = resnet50().to(device).eval()
    if args.load_cache:
        print("loaded %d cached choices (%d ignored)" % torchconv.load_cache(args.load_cache))
    rows = []

    def row(precision, layout, batch, mode, algorithm, ms, ref_ms, err=None, timed=None):
        spread = {k: timed[k] for k in ("ratio_min", "ratio_max", "spread_flag")} if timed and algorithm == "auto" else {}
        r = dict(**spread, suite="resnet50", layer="model", N=batch, C=3, K=1000, H=args.image, W=args.image, R=None, S=None,
                 stride=None, padding=None, groups=None, dilation=None, algorithm=algorithm,
                 config="benchmark" if algorithm == "auto" and not args.no_benchmark else "default", mode=mode,
                 precision=precision, layout=layout, dtype="float32", ms=ms, tflops=None, cudnn_ms=ref_ms,
                 ratio=ref_ms / ms, rel_err=err, workspace_bytes=None, stages_us=None)
        rows.append(r)
        print(f"  {precision:<8} {layout} {mode:<9} N={batch:<3} {algorithm:<6} {ms:8.3f} ms   x{r['ratio']:.2f} vs "
              f"cuDNN {precision}" + (f"   logits rel err {err:.1e}" if err is not None else ""), flush=True)

    for precision in args.precision.split(","):
        if precision not in PRECISIONS:
            raise SystemExit(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
        autocast, fmt, layout = precision_settings(precision, device, args.layout)
        reference = copy.deepcopy(base).to(memory_format=fmt)
        ours = torchconv.convert(copy.deepcopy(base)).to(memory_format=fmt).eval()
        with torch.no_grad():
            fp64_ref = copy.deepcopy(base).double()
        for batch in [int(b) for b in args.batch.split(",") if b]:
            x = torch.randn(batch, 3, args.image, args.image, device=device).contiguous(memory_format=fmt)
            with torch.inference_mode(), autocast():
                ref_out = reference(x)
                if not args.no_benchmark:
                    torchconv.tune(ours, x)
                out = ours(x)
                timed = compare(lambda: ours(x), lambda: reference(x), device, rounds=5,
                                reps=max(1, args.reps // 5), warmup=args.warmup)
            with torch.inference_mode():
                exact = fp64_ref(x.double())
            err, ref_err = rel_err(out, exact), rel_err(ref_out, exact)
            print(f"  {precision} N={batch}: logits rel err vs float64 model: ours {err:.1e}, cuDNN {ref_err:.1e}")
            row(precision, layout, batch, "fwd", "cudnn", timed["reference_ms"], timed["reference_ms"], ref_err)
            row(precision, layout, batch, "fwd", "auto", timed["ms"], timed["reference_ms"], err, timed)
            if device.type == "cuda" and not args.no_graph:
                timed = compare(graph_replay(ours, x, autocast), graph_replay(reference, x, autocast), device, rounds=5,
                                reps=max(1, args.reps // 5), warmup=args.warmup)
                row(precision, layout, batch, "fwd-graph", "cudnn", timed["reference_ms"], timed["reference_ms"])
                row(precision, layout, batch, "fwd-graph", "auto", timed["ms"], timed["reference_ms"], None, timed)

        if args.train_batch:
            batch = args.train_batch
            x = torch.randn(batch, 3, args.image, args.image, device=device).contiguous(memory_format=fmt)
            target = torch.randint(0, 1000, (batch,), device=device)
            ref_train = copy.deepcopy(reference).train()
            our_train = torchconv.convert(copy.deepcopy(reference)).to(memory_format=fmt).train()
            if not args.no_benchmark:
                with autocast():  # a copy: tuning runs batch norm in train mode
                    torchconv.tune(copy.deepcopy(our_train), x, train=True)
            with torch.no_grad(), autocast():  # the first step from identical weights: the logits must agree
                err = rel_err(our_train(x), ref_train(x))
            ref_opt = torch.optim.SGD(ref_train.parameters(), lr=0.01, momentum=0.9)
            our_opt = torch.optim.SGD(our_train.parameters(), lr=0.01, momentum=0.9)

            def step(model, opt):
                opt.zero_grad(set_to_none=True)
                with autocast():
                    loss = F.cross_entropy(model(x), target)
                loss.backward()
                opt.step()

            timed = compare(lambda: step(our_train, our_opt), lambda: step(ref_train, ref_opt), device, rounds=5,
                            reps=max(1, args.reps // 5), warmup=args.warmup)
            row(precision, layout, batch, "train", "cudnn", timed["reference_ms"], timed["reference_ms"])
            row(precision, layout, batch, "train", "auto", timed["ms"], timed["reference_ms"], err, timed)

    explained = []
    if args.explain_batch:
        precision_settings("fp32", device)
        ours = torchconv.convert(copy.deepcopy(base)).eval()
        x = torch.randn(args.explain_batch, 3, args.image, args.image, device=device)
        print(f"\nper-layer choices at batch {args.explain_batch}, fp32 (torchconv.explain):")
        explained = torchconv.explain(ours, x, reference=cudnn_conv, reference_name="cuDNN")
    if args.save_cache:
        print(f"saved {torchconv.save_cache(args.save_cache)} cached choices to {args.save_cache}")
    if args.out_dir:
        write_results(args, environment(device), rows, explained)


def write_results(args, meta, rows, explained):
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, args.tag)
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows, "explain": explained}, f, indent=1)
    lines = [f"# ResNet-50 end to end — {meta['gpu']}", "",
             f"torch {meta['torch']}, cuDNN {meta['cudnn']}, CUDA {meta['cuda']}, {meta['date']}. torchvision "
             "resnet50(weights=None). Each precision compares torchconv with cuDNN at the same setting "
             "(cudnn.benchmark on): fp32 = TF32 off; tf32 = PyTorch's default (TF32 convolutions); amp-bf16 / "
             "amp-fp16 = torch.autocast, with the model and input in the row's layout. auto = every conv a "
             f"torchconv.Conv2d ({'measured choice' if not args.no_benchmark else 'rule'}). ratio = cuDNN ms / "
             "ms at the same precision. Inference logits error: against the float64 model; training: against "
             "cuDNN's logits at the same precision.", "",
             "| precision | layout | mode | N | algorithm | ms | ratio | logits rel err |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['rel_err']:.1e}" if r["rel_err"] is not None else "-"
        lines.append(f"| {r.get('precision', 'fp32')} | {r.get('layout', 'nchw')} | {r['mode']} | {r['N']} | "
                     f"{r['algorithm']} | {r['ms']:.3f} | {r['ratio']:.2f} | {err} |")
    if explained:
        lines += ["", f"## Per-layer choices at batch {args.explain_batch} (torchconv.explain, inference)", "",
                  "| layer | C | HxW | K | RxS | stride | algorithm | config | ms | TFLOP/s | cuDNN ms | x cuDNN |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in explained:
            lines.append(f"| {r['layer']} | {r['C']} | {r['H']}x{r['W']} | {r['K']} | {r['R']}x{r['S']} | "
                         f"{r['stride'][0]} | {r['algorithm']} | {r['config']} | {r['ms']:.4f} | {r['tflops']:.2f} | "
                         f"{r['reference_ms']:.4f} | {r['ratio']:.2f} |")
        total, ref = sum(r["ms"] for r in explained), sum(r["reference_ms"] for r in explained)
        lines.append(f"\n{len(explained)} convolutions: {total:.3f} ms torchconv, {ref:.3f} ms cuDNN (x{ref / total:.2f}).")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {stem}.json/.md")


if __name__ == "__main__":
    main()
