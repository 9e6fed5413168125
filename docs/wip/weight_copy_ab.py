"""The channels_last -> contiguous weight copy: our kernel (through a direct-convolution call, which
copies a channels_last weight) against ATen's `contiguous()`, each kernel's median device time over
20 calls (torch.profiler). A diagnostic, not a result.
    python docs/wip/weight_copy_ab.py
"""
import collections

import torch
from torch.profiler import ProfilerActivity, profile

import torchconv


def kernel_times(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    times = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name[:70]].append(e.device_time)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def main():
    torch.backends.cudnn.allow_tf32 = False
    for dtype in (torch.float32, torch.bfloat16):
        for K, C, R in ((512, 512, 3), (256, 256, 3), (128, 128, 3), (64, 64, 3), (64, 3, 7)):
            w = torch.randn(K, C, R, R, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
            aten = [v for k, v in kernel_times(lambda: w.contiguous()).items() if "copy" in k or "elementwise" in k]
            x = torch.randn(1, C, 5, 5, device="cuda", dtype=dtype)
            calls = kernel_times(lambda: torchconv.conv2d(x, w, None, padding=R // 2, algorithm="direct"))
            ours = [v for k, v in calls.items() if "weight_to_contiguous" in k]
            print(f"{str(dtype)[6:]:9} {K}x{C}x{R}x{R} {w.numel() * w.element_size() / 1e6:6.2f} MB  "
                  f"aten {aten[0] if aten else float('nan'):6.2f} us  ours {ours[0] if ours else float('nan'):6.2f} us")


if __name__ == "__main__":
    main()
