"""torchconv quickstart: build a small ResNet-style network, swap its convolutions for torchconv's,
check the outputs against the nn.Conv2d original and show which algorithm ran each layer and how
long it took. Runs on the GPU when there is one (with the algorithms that have CUDA kernels) and on
the CPU otherwise."""
import copy
import time

import torch
import torch.nn as nn

import torchconv


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


def small_resnet(num_classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        BasicBlock(32, 32, 1), BasicBlock(32, 64, 2), BasicBlock(64, 128, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, num_classes),
    )


def time_ms(fn, device, reps=10):
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / reps


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    available = torchconv.available_algorithms(device.type)
    print(f"device: {device}; algorithms with a {device.type} kernel: {', '.join(available) or 'none'}")
    if not available:
        print("this build has no kernels for this device yet; run on the CPU instead")
        device = torch.device("cpu")

    torch.manual_seed(0)
    original = small_resnet().to(device).eval()
    model = torchconv.convert(copy.deepcopy(original))  # algorithm="auto" for every layer
    x = torch.randn(4, 3, 64, 64, device=device)
    with torch.no_grad():
        ref, out = original(x), model(x)
    err = ((out - ref).norm() / ref.norm()).item()
    print(f"logits match nn.Conv2d: ||out - ref|| / ||ref|| = {err:.2e}")
    assert err < 1e-4

    print(f"\n{'layer':<14}{'shape (C->K, RxS, stride)':<28}{'input':<20}{'algorithm':<11}{'ms':>8}")
    acts = {}
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: acts.__setitem__(n, i[0]))
             for n, m in model.named_modules() if isinstance(m, torchconv.Conv2d)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    for name, m in model.named_modules():
        if not isinstance(m, torchconv.Conv2d):
            continue
        inp = acts[name]
        algo = torchconv.select_algorithm(inp, m.weight, m.stride, m.dilation, m.groups)
        with torch.no_grad():
            ms = time_ms(lambda: m(inp), device)
        shape = f"{m.in_channels}->{m.out_channels}, {m.kernel_size[0]}x{m.kernel_size[1]}, s{m.stride[0]}"
        print(f"{name:<14}{shape:<28}{str(tuple(inp.shape)):<20}{algo:<11}{ms:8.3f}")

    # One training step runs on the same kernels (autograd is registered for every operator).
    model.train()
    loss = model(x).logsumexp(1).mean()
    loss.backward()
    print(f"\ntraining step ok: loss {loss.item():.4f}, conv1 grad norm {model[0].weight.grad.norm().item():.4f}")


if __name__ == "__main__":
    main()
