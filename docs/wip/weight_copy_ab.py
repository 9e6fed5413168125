"""The channels_last -> contiguous weight copy: our kernel (through a direct-convolution call, which
copies a channels_last weight) against ATen's `contiguous()`, each kernel's mean device time a call
over 20 calls (pass_kernels.kernels: torch.profiler). A diagnostic, not a result.
    python docs/wip/weight_copy_ab.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchconv  # noqa: E402
from pass_kernels import kernels  # noqa: E402


def kernel_time(fn, *parts):
    """The per-call device time of the first kernel `fn` launches whose name holds one of `parts`."""
    return next((t for name, _, t in kernels(fn, 20) if any(p in name for p in parts)), float("nan"))


def main():
    torch.backends.cudnn.allow_tf32 = False
    for dtype in (torch.float32, torch.bfloat16):
        for K, C, R in ((512, 512, 3), (256, 256, 3), (128, 128, 3), (64, 64, 3), (64, 3, 7)):
            w = torch.randn(K, C, R, R, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
            x = torch.randn(1, C, 5, 5, device="cuda", dtype=dtype)
            aten = kernel_time(lambda: w.contiguous(), "copy", "elementwise")
            ours = kernel_time(lambda: torchconv.conv2d(x, w, None, padding=R // 2, algorithm="direct"),
                               "weight_to_contiguous")
            print(f"{str(dtype)[6:]:9} {K}x{C}x{R}x{R} {w.numel() * w.element_size() / 1e6:6.2f} MB  "
                  f"aten {aten:6.2f} us  ours {ours:6.2f} us")


if __name__ == "__main__":
    main()
