"""A fast subset of the model zoo (benchmarks/models.py --zoo) on the GPU: torchvision models of
different families, converted, in benchmark mode: logits and one step's gradients equal the
nn.Conv2d model's (cuDNN FP32) within 1e-4."""
import copy

import pytest
import torch

import torchconv

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
MODELS = ["resnet18", "mobilenet_v3_small", "shufflenet_v2_x0_5", "squeezenet1_1", "regnet_x_400mf"]


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


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
            reference.train(), model.train()
            grads = []
            for m in (model, reference):
                with torch.random.fork_rng(devices=["cuda"]):
                    torch.manual_seed(1)
                    m(x).square().mean().backward()
                grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    finally:
        torchconv.set_benchmark(False)
        torchconv.clear_cache()
    assert rel_err(grads[0], grads[1]) < 1e-4
