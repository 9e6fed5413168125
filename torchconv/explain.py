"""torchconv.explain: what `auto` picked for each convolution of a model, how fast it ran and, given a
reference convolution (cuDNN's, from the benchmarks or the caller), how that compares on the same layer.
The library itself never runs a convolution it did not write, so the reference comes from outside."""
import sys

import torch

from . import _C
from . import tuning as _tuning
from .functional import _string_padding
from .modules import Conv2d
from .selection import _pair, auto_algorithm
from .timing import compare, time_ms

__all__ = ["explain"]


def _normalized(module, x):
    """(input, stride, padding, dilation) as torchconv.conv2d normalizes them for `module`."""
    stride = _pair(module.stride, "stride")
    dilation = _pair(module.dilation, "dilation")
    if isinstance(module.padding, str):
        x, padding = _string_padding(x, module.weight, module.padding, stride, dilation)
    else:
        padding = _pair(module.padding, "padding")
    return x, stride, padding, dilation


_STDOUT = object()


def explain(model, example_input, reference=None, reference_name="reference", reps=20, file=_STDOUT):
    """Runs `model(example_input)` once (no grad) to find every torchconv.Conv2d and the input it
    sees, then times each layer alone (inference mode) on a random input of that shape, interleaved
    with the reference when one is given (torchconv.timing): the
    algorithm torchconv ran (what `auto` chose, with its config or variant), its median time and
    TFLOP/s (2*N*K*C/g*R*S*Ho*Wo; 8x for a complex layer). With `reference(module, input)` -- e.g. cuDNN through
    nn.Conv2d's own forward, as benchmarks/ and examples/resnet50.py pass it -- also that
    convolution's time on the same layer and the ratio (the median over rounds of reference ms /
    ours, with ratio_min and ratio_max across the rounds). Prints one row per
    layer to `file` (default: sys.stdout; None: nothing) and returns the rows as dicts."""
    if file is _STDOUT:
        file = sys.stdout
    seen = []

    def hook(module, args, output):
        if not any(entry[1] is module for entry in seen):
            seen.append((names[module], module, tuple(args[0].shape), args[0].dtype, _tuning.memory_format(args[0])))

    names = {m: n for n, m in model.named_modules()}
    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, Conv2d)]
    try:
        with torch.no_grad():
            model(example_input)
    finally:
        for h in handles:
            h.remove()

    rows = []
    # Inference mode, as a deployed model runs: frozen-weight filter transforms are cached.
    with torch.inference_mode():
        for name, module, shape, dtype, layout in seen:
            w, b = module.weight, module.bias
            x = torch.randn(shape, dtype=dtype, device=w.device)
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            xs, stride, padding, dilation = _normalized(module, x)
            if module.algorithm == "auto":
                # A complex layer runs three real convolutions of its parts' dtype (functional._complex_conv2d).
                parts = (t.real if t is not None and t.is_complex() else t for t in (xs, w, b))
                algorithm = auto_algorithm(*parts, stride, padding, dilation, module.groups)
            else:
                algorithm = module.algorithm
            out = module(x)
            config = (_C.last_choice() or "default") if x.is_cuda else "default"
            if reference is not None:
                timed = compare(lambda: module(x), lambda: reference(module, x), x.device, rounds=5,
                                reps=max(1, reps // 5))
                ours, ref_ms = timed["ms"], timed["reference_ms"]
                spread = {k: timed[k] for k in ("ratio", "ratio_min", "ratio_max", "rounds")}
            else:
                ours, ref_ms = time_ms(lambda: module(x), x.device, reps), None
                spread = dict(ratio=None, ratio_min=None, ratio_max=None, rounds=None)
            # A complex multiply-add is four real ones (the TFLOP/s of a complex layer count those).
            flops = (8.0 if out.is_complex() else 2.0) * out.numel() * (w.shape[1] * w.shape[2] * w.shape[3])
            rows.append(dict(layer=name, N=shape[0], C=shape[1], H=shape[2], W=shape[3], K=w.shape[0],
                             R=w.shape[2], S=w.shape[3], stride=stride, padding=padding, dilation=dilation,
                             groups=module.groups, precision=_tuning.precision(x), layout=_tuning.memory_format(x),
                             algorithm=algorithm, config=config, ms=ours,
                             tflops=flops / (ours * 1e-3) / 1e12, reference_ms=ref_ms,
                             **spread))
    if file is not None:
        with_ref = reference is not None
        ref = reference_name
        print(f"{'layer':<28} {'N':>3} {'C':>5} {'HxW':>9} {'K':>5} {'RxS':>5} {'s':>3} {'algorithm':<9} "
              f"{'config':<34} {'ms':>8} {'TFLOP/s':>8}" + (f" {ref + ' ms':>9} {'x ' + ref:>8}" if with_ref else ""),
              file=file)
        for r in rows:
            print(f"{r['layer'][:28]:<28} {r['N']:>3} {r['C']:>5} {str(r['H']) + 'x' + str(r['W']):>9} {r['K']:>5} "
                  f"{str(r['R']) + 'x' + str(r['S']):>5} {r['stride'][0]:>3} {r['algorithm']:<9} {r['config'][:34]:<34} "
                  f"{r['ms']:8.4f} {r['tflops']:8.2f}"
                  + (f" {r['reference_ms']:9.4f} {r['ratio']:8.2f}" if with_ref else ""), file=file)
        if rows:
            total = sum(r["ms"] for r in rows)
            line = f"{len(rows)} convolutions: {total:.3f} ms in torchconv"
            if with_ref:
                total_ref = sum(r["reference_ms"] for r in rows)
                line += f", {total_ref:.3f} ms in {ref} (x{total_ref / total:.2f})"
            print(line, file=file)
    return rows
