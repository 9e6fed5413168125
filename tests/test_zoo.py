"""A fast subset of the model zoo (benchmarks/models.py --zoo) on the GPU: torchvision models of
different families, converted, in benchmark mode: logits and one step's gradients equal the
nn.Conv2d model's: the logits within 1e-4 of cuDNN FP32's, the gradients (against the model in
float64) within 2x of cuDNN FP32's own error (deep random networks in training mode amplify
rounding, so a fixed bar on the gradients would test conditioning, not the kernels)."""
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
            for m in [*model.modules(), *reference.modules()]:  # same masks in float32 and float64
                if "Dropout" in type(m).__name__ or type(m).__name__ == "StochasticDepth":
                    m.eval()
            reference64 = copy.deepcopy(reference).double()
            grads = []
            for m, inp in ((model, x), (reference, x), (reference64, x.double())):
                with torch.random.fork_rng(devices=["cuda"]):
                    torch.manual_seed(1)
                    m(inp).square().mean().backward()
                grads.append({name: p.grad for name, p in m.named_parameters()})
            choices = {key: entry["algorithm"] for key, entry in torchconv.tuning.cache_entries().items()}
    finally:
        torchconv.set_benchmark(False)
        torchconv.clear_cache()
    flat = [torch.cat([g.flatten() for g in gs.values()]) for gs in grads]
    ours, cudnn = rel_err(flat[0], flat[2]), rel_err(flat[1], flat[2])
    if ours > max(2 * cudnn, 1e-5):  # the parameters furthest off and benchmark mode's choices, to say where
        worst = sorted(grads[0], key=lambda n: -rel_err(grads[0][n], grads[2][n]) / max(rel_err(grads[1][n], grads[2][n]), 1e-12))
        detail = [f"{n}: ours {rel_err(grads[0][n], grads[2][n]):.1e}, cuDNN {rel_err(grads[1][n], grads[2][n]):.1e}"
                  for n in worst[:3]]
        pytest.fail(f"gradients: ours {ours:.2e}, cuDNN {cudnn:.2e}; {detail}; choices {choices}")
