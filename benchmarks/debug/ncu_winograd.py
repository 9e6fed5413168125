"""One layer's Winograd forward and backward, for Nsight Compute:
    ncu --clock-control none -k regex:winograd --launch-skip 4 --launch-count 3 --section ... \\
        python benchmarks/debug/ncu_winograd.py 32 256 512 34
"""
import sys

import torch

import torchconv

n, c, k, hw = (int(v) for v in sys.argv[1:5])
x = torch.randn(n, c, hw, hw, device="cuda", requires_grad=True)
w = torch.randn(k, c, 3, 3, device="cuda", requires_grad=True)
for _ in range(3):
    y = torchconv.conv2d(x, w, None, 1, 1, algorithm="winograd")
    torch.autograd.grad(y, (x, w), torch.ones_like(y))
torch.cuda.synchronize()
