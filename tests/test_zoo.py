"""A fast subset of the model zoo (benchmarks/models.py --zoo) on the GPU: torchvision models of
different families, converted, in benchmark mode, one FP32 (TF32 off) training step.

- The logits equal the nn.Conv2d model's within 1e-4 of cuDNN FP32's.
- Every convolution's gradients in that step -- the grad_input it passed back, and the weight and bias
  gradients autograd accumulated -- are those of a float64 convolution of the very tensors it saw
  (its input and the grad_output that reached it), within 1e-5 or 2x cuDNN FP32's error on the same
  tensors. Layer by layer, not the whole model's against the model in float64: max pools and ReLUs
  make a whole model's gradients jump at near-ties (benchmarks/layer_grads.py says why)."""
import copy
import os
import sys

import pytest
import torch

import torchconv

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from layer_grads import check_layers, record_conv_tensors, rel_err, stochastic_layers_off  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
MODELS = ["resnet18", "mobilenet_v3_small", "shufflenet_v2_x0_5", "squeezenet1_1", "regnet_x_400mf"]


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
            stochastic_layers_off(model)
            with record_conv_tensors(model) as records:
                model(x).square().mean().backward()
            choices = {key: entry["algorithm"] for key, entry in torchconv.tuning.cache_entries().items()}
    finally:
        torchconv.set_benchmark(False)
        torchconv.clear_cache()
    assert records and all("grad_output" in rec for rec in records.values())
    errors, over = check_layers(records)
    for layer, rec in records.items():
        expected = {f"grad_{n}" for n, _ in rec["conv"].named_parameters()}
        assert expected <= errors[layer].keys(), f"{layer}: no gradient for {expected - errors[layer].keys()}"
        assert ("grad_input" in errors[layer]) == rec["input_requires_grad"], f"{layer}: grad_input reached its input"
    assert not over, f"{over}; benchmark mode's choices {choices}"
