"""A fast subset of the model zoo (benchmarks/models.py --zoo) on the GPU: torchvision models of
different families, converted, in benchmark mode, one FP32 (TF32 off) training step.

- The logits equal the nn.Conv2d model's within 1e-4 of cuDNN FP32's.
- Every convolution's gradients in that step -- the grad_input it passed back, and the weight and bias
  gradients autograd accumulated -- are those of a float64 convolution of the very tensors it saw
  (its input and the grad_output that reached it), within 1e-5 or 2x cuDNN FP32's error on the same
  tensors.

The gradients are checked layer by layer, not as the whole model's against the model in float64:
the step passes through max pools and ReLUs, whose gradients jump where two window entries tie or
an input crosses zero, and any two FP32 computations of a deep network (cuDNN's as much as ours)
decide such a near-tie differently now and then. The gradients upstream of that element then differ
by orders of magnitude more than rounding, so a whole-model bar tests the inputs' near-ties, not the
kernels."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torchconv

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
MODELS = ["resnet18", "mobilenet_v3_small", "shufflenet_v2_x0_5", "squeezenet1_1", "regnet_x_400mf"]


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


def record_conv_tensors(model):
    """Hooks on every torchconv.Conv2d of `model` that keep, per layer, the input it was called with,
    the gradient that reached its output and the gradient it passed back to its input. Returns the
    per-layer records and the hook handles."""
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
            # Registered before any in-place op that follows (an inplace ReLU): the hook receives
            # the gradient of the convolution's own output.
            out.register_hook(lambda g: rec.__setitem__("grad_output", g))

        handles += [conv.register_forward_pre_hook(before), conv.register_forward_hook(after)]
    return records, handles


def layer_gradient_errors(rec):
    """{gradient: (ours, cuDNN FP32)} relative errors against float64 for one recorded layer."""
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


@needs_cuda
@pytest.mark.parametrize("name", MODELS)
def test_zoo_model(name):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    reference = getattr(torchvision.models, name)(weights=None).cuda()
    model = torchconv.convert(copy.deepcopy(reference))
    x = torch.randn(2, 3, 96, 96, device="cuda")
    torchconv.set_benchmark(True)
    try:
        with torch.backends.cudnn.flags(allow_tf32=False):
            reference.eval(), model.eval()
            with torch.no_grad():
                assert rel_err(model(x), reference(x)) < 1e-4
            model.train()
            for m in model.modules():
                if "Dropout" in type(m).__name__ or type(m).__name__ == "StochasticDepth":
                    m.eval()
            records, handles = record_conv_tensors(model)
            try:
                model(x).square().mean().backward()
            finally:
                for h in handles:
                    h.remove()
            choices = {key: entry["algorithm"] for key, entry in torchconv.tuning.cache_entries().items()}
    finally:
        torchconv.set_benchmark(False)
        torchconv.clear_cache()
    assert records and all("grad_output" in rec for rec in records.values())
    failures = []
    for layer, rec in records.items():
        expected = {"grad_weight", "grad_bias"} & {f"grad_{n}" for n, p in rec["conv"].named_parameters()}
        errors = layer_gradient_errors(rec)
        assert expected <= errors.keys(), f"{layer}: no gradient for {expected - errors.keys()}"
        assert ("grad_input" in errors) == rec["input_requires_grad"], f"{layer}: grad_input reached the input or not"
        failures += [f"{layer} {g}: ours {ours:.1e}, cuDNN {cudnn:.1e}" for g, (ours, cudnn) in errors.items()
                     if ours > max(2 * cudnn, 1e-5)]
    assert not failures, f"{failures}; benchmark mode's choices {choices}"
