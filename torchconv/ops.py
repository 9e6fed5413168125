"""Fake (meta) registrations for the C++ operators, so torch.compile and FakeTensor can trace them.

Each algorithm has a forward operator ``torchconv::conv2d_<algo>`` and a backward operator
``torchconv::conv2d_<algo>_backward`` that returns (grad_input, grad_weight, grad_bias) under an
output mask. Their autograd (gradients of any order on the algorithm's own kernels) is C++, in
csrc/autograd.cpp, so a call pays no Python beyond torchconv.conv2d.
"""
import torch
from torch._prims_common import suggest_memory_format

from . import _C  # noqa: F401  (registers the operators looked up below)

ALGORITHMS = ("direct", "csg", "gemm", "winograd")


def conv2d_output_size(input_size, weight_size, stride, padding, dilation):
    """(Ho, Wo) of PyTorch's conv2d for an (N, C, H, W) input and a (K, C/g, R, S) weight."""
    return tuple(
        (input_size[2 + i] + 2 * padding[i] - dilation[i] * (weight_size[2 + i] - 1) - 1) // stride[i] + 1
        for i in range(2)
    )


def _group_copy_reads_channels_last(t, dim, size):
    """Whether PyTorch's CPU slow backend's channels_last copy of one group of `t` (csrc/precision.cpp)
    reads as channels_last."""
    group = t.narrow(dim, 0, size)
    if group.is_contiguous(memory_format=torch.channels_last):
        return suggest_memory_format(group) == torch.channels_last
    return group.numel() > 0 and group.shape[1] * group.shape[2] * group.shape[3] > 1


def conv2d_memory_format(input, weight):
    """The memory format of a convolution's outputs and gradients (csrc/precision.cpp): channels_last
    when the input or the weight is, as PyTorch's convolution returns -- but float64 on CUDA in NCHW,
    as PyTorch's CUDA convolution returns it, and on a CPU a grouped float64 layer by the layouts of
    one group's copies, as PyTorch's slow backend does."""
    if input.device.type == "cuda" and torch.float64 in (input.dtype, weight.dtype):
        return torch.contiguous_format
    input_counts, weight_counts = (t.dim() == 4 and suggest_memory_format(t) == torch.channels_last
                                   for t in (input, weight))
    per_group = weight.shape[1] if weight.dim() == 4 else 0
    if ((input_counts or weight_counts) and input.device.type != "cuda" and input.dtype == torch.float64
            and input.dim() == 4 and 0 < per_group < input.shape[1] and input.shape[1] % per_group == 0):
        groups = input.shape[1] // per_group
        input_counts = input_counts and _group_copy_reads_channels_last(input, 1, per_group)
        weight_counts = weight_counts and weight.shape[0] % groups == 0 and _group_copy_reads_channels_last(
            weight, 0, weight.shape[0] // groups)
    return torch.channels_last if input_counts or weight_counts else torch.contiguous_format


def _fake_forward(input, weight, bias, stride, padding, dilation, groups):
    ho, wo = conv2d_output_size(input.shape, weight.shape, stride, padding, dilation)
    return input.new_empty((input.shape[0], weight.shape[0], ho, wo)).contiguous(
        memory_format=conv2d_memory_format(input, weight))


def _fake_backward(grad_output, input, weight, stride, padding, dilation, groups, output_mask):
    skipped = lambda: input.new_empty((0,))
    fmt = conv2d_memory_format(input, weight)
    return (
        input.new_empty(input.shape).contiguous(memory_format=fmt) if output_mask[0] else skipped(),
        weight.new_empty(weight.shape).contiguous(memory_format=fmt) if output_mask[1] else skipped(),
        input.new_empty((weight.shape[0],)) if output_mask[2] else skipped(),
    )


def _register():
    for algo in ALGORITHMS:
        name = f"torchconv::conv2d_{algo}"
        torch.library.register_fake(name)(_fake_forward)
        torch.library.register_fake(name + "_backward")(_fake_backward)


_register()

# Whether a torch.func transform is running (one C call, about 40 ns): there "auto" chooses on the
# shape the kernels run (func_transforms.chosen_under_transform), and benchmark mode cannot time a
# transform's wrapped tensors.
functorch_active = torch._C._are_functorch_transforms_active

# The forward operators, by algorithm name (the dispatcher entry points torchconv.conv2d calls), and
# the backward operators (conv2d_auto's backward and func_transforms' batching rules call them).
FORWARD = {algo: getattr(torch.ops.torchconv, f"conv2d_{algo}").default for algo in ALGORITHMS}
BACKWARD = {algo: getattr(torch.ops.torchconv, f"conv2d_{algo}_backward").default for algo in ALGORITHMS}

