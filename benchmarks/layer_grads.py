"""Each convolution's gradients in one training step, against a float64 convolution of the very
tensors it saw: the input it was called with and the grad_output that reached it.

Why layer by layer: a whole model's FP32 gradients against the model in float64 pass through max
pools and ReLUs, whose gradients jump where two window entries tie or an input crosses zero. Any two
FP32 computations of a deep network (cuDNN's as much as ours) decide such a near-tie differently now
and then, and the gradients upstream of it then differ by orders of magnitude more than rounding: a
whole-model bar measures the inputs' near-ties, not the convolutions. A layer's own gradients on its
own tensors have no such jump."""
import contextlib
import os
import sys

import torch
import torch.nn.functional as F

import torchconv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import rel_err  # noqa: E402,F401 -- the relative error every benchmark reports (test_zoo takes it from here)

# A layer's gradient is over the bar past 1e-5 (IEEE FP32's) and past twice cuDNN FP32's error on the
# same tensors (a reduction long enough, or cancelling enough, to lose more than 1e-5 in FP32).
IEEE_FP32_BAR = 1e-5


def stochastic_layers_off(model):
    """Dropout and stochastic depth of `model` in eval mode, the rest as it is: their masks would differ
    between the runs (and dtypes) whose gradients are compared."""
    for m in model.modules():
        if "Dropout" in type(m).__name__ or type(m).__name__ == "StochasticDepth":
            m.eval()


@contextlib.contextmanager
def record_conv_tensors(model):
    """Within the block, hooks on every torchconv.Conv2d of `model` keep, per layer (by module name),
    the input it was called with, the gradient that reached its output and the gradient it passed back
    to its input; yields those records (filled as the step runs; the hooks go when the block ends)."""
    records, handles = {}, []
    for name, conv in model.named_modules():
        if not isinstance(conv, torchconv.Conv2d):
            continue
        rec = records[name] = {"conv": conv}

        def before(module, args, rec=rec):
            (inp,) = args
            rec["input"], rec["input_requires_grad"] = inp.detach().clone(), inp.requires_grad
            if inp.requires_grad:  # an alias used by this layer alone: its gradient is the layer's grad_input
                inp = inp.view_as(inp)
                inp.register_hook(lambda g: rec.__setitem__("grad_input", g))
            return (inp,)

        def after(module, args, out, rec=rec):
            # Registered before any in-place op that follows (an inplace ReLU): the hook receives the
            # gradient of the convolution's own output.
            out.register_hook(lambda g: rec.__setitem__("grad_output", g))

        handles += [conv.register_forward_pre_hook(before), conv.register_forward_hook(after)]
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def layer_gradient_errors(rec):
    """{"grad_input" / "grad_weight" / "grad_bias": (ours, cuDNN FP32)} relative errors against float64
    for one recorded layer, its weight and bias gradients read from the parameters' .grad (the layer's
    weight used once in the step)."""
    conv = rec["conv"]
    params = [conv.weight] + ([conv.bias] if conv.bias is not None else [])

    def grads(dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in [rec["input"], *params]]
        out = F.conv2d(leaves[0], leaves[1], leaves[2] if conv.bias is not None else None, conv.stride, conv.padding,
                       conv.dilation, conv.groups)
        return torch.autograd.grad(out, leaves, rec["grad_output"].to(dtype))

    with torch.backends.cudnn.flags(allow_tf32=False):
        ref, cudnn = grads(torch.float64), grads(torch.float32)
    names = ["grad_input", "grad_weight", "grad_bias"][:len(ref)]
    ours = [rec.get("grad_input"), *[p.grad for p in params]]
    return {n: (rel_err(o, r), rel_err(c, r)) for n, o, c, r in zip(names, ours, cudnn, ref) if o is not None}


def check_layers(records):
    """Every recorded layer's errors ({layer: layer_gradient_errors}), and the gradients over the bar
    as text."""
    errors = {layer: layer_gradient_errors(rec) for layer, rec in records.items()}
    over = [f"{layer} {grad}: ours {ours:.1e}, cuDNN {cudnn:.1e}" for layer, errs in errors.items()
            for grad, (ours, cudnn) in errs.items() if ours > max(2 * cudnn, IEEE_FP32_BAR)]
    return errors, over
