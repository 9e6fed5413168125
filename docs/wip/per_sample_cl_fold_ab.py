"""Per-sample gradients of channels_last models: the fold as on main (unsqueezed channels_last samples
copied to NCHW) against per-sample-channels-last-fold.patch (a channels_last view), interleaved in one
process by swapping the layout rule the fold reads (which is what the patch changes). CPU by default;
`--cuda` runs the same on the GPU. Prints the median time a step and whether the gradients agree."""
import sys
import time

import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap

import torchconv
from torchconv import func_transforms as ft

device = "cuda" if "--cuda" in sys.argv else "cpu"
main_rule = ft._strides_like_channels_last


def patch_rule(sizes, strides):
    if sizes[0] == 1:
        strides = (max(st * n for st, n in zip(strides, sizes)),) + tuple(strides[1:])
    return main_rule(sizes, strides)


def timed(f):
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = f()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


for name, c, hw, n, layers in (("8ch 6x6", 8, 6, 4, 20), ("32ch 16x16", 32, 16, 8, 6), ("64ch 28x28", 64, 28, 8, 3)):
    convs = nn.Sequential(*[nn.Conv2d(c, c, 3, padding=1) for _ in range(layers)])
    m = torchconv.convert(convs).to(device, memory_format=torch.channels_last)
    x = torch.randn(n, c, hw, hw, device=device).contiguous(memory_format=torch.channels_last)
    p = {k: v.detach() for k, v in m.named_parameters()}
    loss = lambda p, xi: functional_call(m, p, (xi.unsqueeze(0),)).square().sum()  # noqa: E731
    step = vmap(grad(loss), in_dims=(None, 0))
    res, outs = {"main": [], "patch": []}, {}
    for r in range(12):
        for k, rule in (("main", main_rule), ("patch", patch_rule)):
            ft._strides_like_channels_last = rule
            torchconv.clear_cache()   # "auto" chooses again for the layout this rule gives
            outs[k], ms = timed(lambda: step(p, x))
            res[k].append(ms)
    ft._strides_like_channels_last = main_rule
    same = all(torch.allclose(outs["main"][k], outs["patch"][k], rtol=1e-4, atol=1e-5) for k in outs["main"])
    med = {k: sorted(v[2:])[len(v[2:]) // 2] for k, v in res.items()}
    print(f"{name}: main {med['main']:.2f} ms, patch {med['patch']:.2f} ms, "
          f"patch/main {med['patch'] / med['main']:.3f}, same gradients {same}")
