"""Host overhead per call: torchconv.Conv2d vs nn.Conv2d on a tiny layer, where launch cost dominates.

Times many back-to-back calls with one synchronize at the end: the result is µs per call of host
work (Python, dispatch, autograd, allocation, launch) when the GPU keeps up. Forward under no_grad
(inference), then forward + backward (training).
"""
import time

import torch
import torch.nn as nn

import torchconv


def per_call_us(fn, calls=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    device = "cuda"
    torch.backends.cudnn.benchmark = True
    x = torch.randn(1, 8, 8, 8, device=device)
    ref = nn.Conv2d(8, 8, 3, padding=1).to(device)
    rows = []
    with torch.no_grad():
        rows.append(("nn.Conv2d (cuDNN)", per_call_us(lambda: ref(x))))
        rows.append(("F.conv2d (cuDNN)", per_call_us(lambda: torch.nn.functional.conv2d(x, ref.weight, ref.bias, 1, 1))))
        for algo in torchconv.available_algorithms("cuda"):
            m = torchconv.Conv2d(8, 8, 3, padding=1, algorithm=algo).to(device)
            rows.append((f"torchconv.Conv2d ({algo})", per_call_us(lambda: m(x))))
            op = getattr(torch.ops.torchconv, f"conv2d_{algo}").default
            rows.append((f"torch.ops.torchconv.conv2d_{algo}", per_call_us(
                lambda: op(x, m.weight, m.bias, [1, 1], [1, 1], [1, 1], 1))))
    # Inference mode (frozen-weight transforms cached) and algorithm="auto" through the module's
    # fast path: what a converted model pays per convolution at batch 1.
    auto = torchconv.Conv2d(8, 8, 3, padding=1).to(device)
    with torch.inference_mode():
        rows.append(("nn.Conv2d (cuDNN), inference_mode", per_call_us(lambda: ref(x))))
        rows.append((f"torchconv.Conv2d (auto: {torchconv.select_algorithm(x, auto.weight, (1, 1), (1, 1), 1)}), "
                     "inference_mode", per_call_us(lambda: auto(x))))
    print("host overhead, µs per forward call (1x8x8x8, 3x3, no grad):")
    for name, us in rows:
        print(f"  {name:<40} {us:7.1f}")

    # Training: forward + backward through autograd (grad_input, grad_weight, grad_bias).
    xg = x.clone().requires_grad_()
    rows = []
    y = ref(xg)
    gy = torch.ones_like(y)
    rows.append(("nn.Conv2d (cuDNN)", per_call_us(
        lambda: torch.autograd.grad(ref(xg), (xg, ref.weight, ref.bias), gy), calls=1000)))
    for algo in torchconv.available_algorithms("cuda"):
        m = torchconv.Conv2d(8, 8, 3, padding=1, algorithm=algo).to(device)
        rows.append((f"torchconv.Conv2d ({algo})", per_call_us(
            lambda: torch.autograd.grad(m(xg), (xg, m.weight, m.bias), gy), calls=1000)))
    print("host overhead, µs per forward + backward (1x8x8x8, 3x3, grads of input, weight, bias):")
    for name, us in rows:
        print(f"  {name:<40} {us:7.1f}")


if __name__ == "__main__":
    main()
