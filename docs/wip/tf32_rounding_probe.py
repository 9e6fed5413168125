"""Does cuDNN round float32 operands to TF32 (to nearest) or let the tensor cores truncate them? Its
TF32 convolution's error against float64 beside two emulations on the same inputs: operands rounded
to nearest TF32 (what our kernels feed their MMAs: rounded copies, or rounding in shared memory) and
operands truncated to TF32 (what an MMA does with float32 bits as they are), each multiplied exactly
and summed in float64. On the CPU the truncated operands' error is about 2.6x the rounded ones'
(2.9e-4 against 7.7e-4 for N(0, 1) inputs, 1x1 and 3x3, 64-512 channels), so where cuDNN's error
sits between them says whether our TF32 passes could feed float32 as it is and stay within the
2x-of-cuDNN bar (no rounding copy, tensor copies and the warp-specialized tile for TF32 sources).
No build needed. A diagnostic, not a result.
    python docs/wip/tf32_rounding_probe.py
"""
import torch
import torch.nn.functional as F


def tf32_nearest(t):
    """float32 -> the nearest TF32 value (ties to even), as float64."""
    i = t.float().contiguous().view(torch.int32).long() & 0xFFFFFFFF
    i = (i + 0xFFF + ((i >> 13) & 1)) & ~0x1FFF
    i = torch.where(i >= 2**31, i - 2**32, i).int()
    return i.view(torch.float32).double()


def tf32_truncated(t):
    """float32 -> its TF32 bits with the low 13 mantissa bits dropped, as float64."""
    return (t.float().contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32).double()


def rel_err(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def main():
    torch.manual_seed(0)
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    print("layer                     cudnn_tf32  nearest   truncated  cudnn/nearest  cudnn-vs-truncated")
    for n, c, k, hw, r, relu in [(8, 64, 64, 56, 1, False), (8, 256, 128, 28, 1, True), (8, 64, 64, 56, 3, False),
                                 (8, 256, 256, 14, 3, True), (8, 512, 512, 7, 3, False)]:
        x = torch.randn(n, c, hw, hw, device="cuda")
        x = x.abs() if relu else x
        w = torch.randn(k, c, r, r, device="cuda") / (c * r * r) ** 0.5
        for fmt in (torch.contiguous_format, torch.channels_last):
            xf, wf = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
            ref = F.conv2d(x.double(), w.double(), padding=r // 2)
            ours = F.conv2d(xf, wf, padding=r // 2)
            nearest = F.conv2d(tf32_nearest(x), tf32_nearest(w), padding=r // 2)
            truncated = F.conv2d(tf32_truncated(x), tf32_truncated(w), padding=r // 2)
            e, en, et = rel_err(ours, ref), rel_err(nearest, ref), rel_err(truncated, ref)
            layout = "nhwc" if fmt == torch.channels_last else "nchw"
            print(f"C{c} K{k} {r}x{r} {hw}^2 {'relu' if relu else 'randn'} {layout}  {e:9.2e}  {en:8.2e}  {et:9.2e}  "
                  f"{e / en:12.2f}  {rel_err(ours, truncated):12.2e}")


if __name__ == "__main__":
    main()
