"""Per-sample gradients with torch.func over a converted model, the step DP-SGD clips and averages:
`vmap(grad(loss))` over the batch gives each sample's gradient of every parameter. torchconv's
convolutions take every sample's grad_weight from one grouped call (torchconv/func_transforms.py's
batching rules).
Checks the result against a loop of single-sample backward passes and prints both times.

    python examples/per_sample_grads.py [--batch 32] [--device cuda]
"""
import argparse
import time

import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap

import torchconv


def small_cnn(num_classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=4), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def per_sample_grads(model, x, y):
    """{name: gradient of each sample's loss, shape (batch, *parameter.shape)}."""
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, sample, target):
        logits = functional_call(model, p, (sample.unsqueeze(0),))
        return nn.functional.cross_entropy(logits, target.unsqueeze(0))

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)


def looped_grads(model, x, y):
    grads = {k: [] for k, _ in model.named_parameters()}
    for i in range(x.shape[0]):
        model.zero_grad()
        nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for k, p in model.named_parameters():
            grads[k].append(p.grad.clone())
    return {k: torch.stack(v) for k, v in grads.items()}


def timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = torchconv.convert(small_cnn()).to(device)
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    per_sample_grads(model, x, y)  # warm-up: each shape's algorithm choice
    looped_grads(model, x[:2], y[:2])
    fast, fast_ms = timed(lambda: per_sample_grads(model, x, y), device)
    slow, slow_ms = timed(lambda: looped_grads(model, x, y), device)
    worst = max(((fast[k] - slow[k]).norm() / slow[k].norm()).item() for k in slow)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in fast.values()]).norm(dim=0)
    print(f"{args.batch} samples on {device}: vmap(grad) {fast_ms:.1f} ms, a backward a sample {slow_ms:.1f} ms; "
          f"largest relative difference {worst:.1e}")
    print(f"per-sample gradient norms: min {norms.min():.3f}, median {norms.median():.3f}, max {norms.max():.3f}")
    assert worst < 1e-4, worst


if __name__ == "__main__":
    main()
