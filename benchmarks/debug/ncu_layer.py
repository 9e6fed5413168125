"""One layer's forward (and optionally backward) through one algorithm, for Nsight Compute:
    ALGO=csg ncu --clock-control none -k regex:csg_conv --launch-skip 2 --launch-count 1 --section ... \\
        python benchmarks/debug/ncu_layer.py 1 128 128 28 3 [stride] [bwd]
ALGO defaults to gemm.
"""
import os
import sys

import torch

import torchconv

algorithm = os.environ.get("ALGO", "gemm")
n, c, k, hw, r = (int(v) for v in sys.argv[1:6])
stride = int(sys.argv[6]) if len(sys.argv) > 6 else 1
backward = len(sys.argv) > 7
x = torch.randn(n, c, hw, hw, device="cuda", requires_grad=backward)
w = torch.randn(k, c, r, r, device="cuda", requires_grad=backward)
for _ in range(3):
    y = torchconv.conv2d(x, w, None, stride, r // 2, algorithm=algorithm)
    if backward:
        torch.autograd.grad(y, (x, w), torch.ones_like(y))
torch.cuda.synchronize()
