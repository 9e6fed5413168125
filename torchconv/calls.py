"""How torchconv.conv2d and torchconv.Conv2d reach an algorithm's forward operator."""
import torch

from . import _C
from .func_transforms import chosen_under_transform
from .ops import FORWARD, functorch_active

__all__ = ["call_forward"]


def call_forward(algorithm, input, weight, bias, stride, padding, dilation, groups):
    """The forward operator of `algorithm`: an eager call through torchconv._C's entry (the same
    dispatcher call without torch.ops' boxed argument parsing); a traced call, a tensor subclass or a
    torch function mode through torch.ops, which they must see. Under a torch.func transform the
    front ends pass "auto" on, chosen here on the shape the kernels run (vmap's sizes folded into the
    batch, not the one sample the caller sees), by the rule: benchmark mode's timing cannot run on a
    transform's wrapped tensors (func_transforms.chosen_under_transform)."""
    if not torch.compiler.is_compiling():
        if algorithm == "auto" and functorch_active():
            algorithm = chosen_under_transform(input, weight, bias, stride, padding, dilation, groups)
        out = _C.conv2d(algorithm, input, weight, bias, stride, padding, dilation, groups)
        if out is not NotImplemented:
            return out
    return FORWARD[algorithm](input, weight, bias, stride, padding, dilation, groups)
