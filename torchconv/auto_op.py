"""``torchconv::conv2d_auto``: algorithm "auto" as an operator that chooses when it runs.

`auto`'s choice depends on the sizes. torch.compile traces a model with fixed sizes first; at a
second batch size it traces again with the batch symbolic, and a choice made while tracing would
specialize it again (a recompile for every new batch size, as far as dynamo's recompile limit). A
trace whose input has a dynamic size records this operator instead: at run time it asks `auto` (the
rule, benchmark mode, the memo) with the real tensors and runs the chosen algorithm's operator; its
backward runs that algorithm's backward operator. Eager calls and traces of fixed sizes choose while
tracing, as before.
"""
from typing import List, Optional

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .calls import call_forward
from .ops import BACKWARD, _fake_forward
from .selection import auto_algorithm

__all__ = ["conv2d_auto", "has_dynamic_size"]


def has_dynamic_size(tensor):
    """Whether any of `tensor`'s sizes is dynamic in the trace under way. Dynamo shows a symbolic size
    as an int, and reading its value would specialize it; whether a bound on it is statically known
    asks neither: true for a fixed size, not for a dynamic one whose range is open above (what
    torch.compile's dynamic sizes and a default torch.export.Dim have). A dynamic size bounded above
    reads as fixed: the choice is made while tracing, which guards on it."""
    return not all(statically_known_true(size < 2**62) for size in tensor.shape)


def _choice(input, weight, bias, stride, padding, dilation, groups):
    return auto_algorithm(input, weight, bias, tuple(stride), tuple(padding), tuple(dilation), groups)


@torch.library.custom_op("torchconv::conv2d_auto", mutates_args=())
def conv2d_auto(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: List[int],
                padding: List[int], dilation: List[int], groups: int) -> torch.Tensor:
    algorithm = _choice(input, weight, bias, stride, padding, dilation, groups)
    return call_forward(algorithm, input, weight, bias, stride, padding, dilation, groups)


conv2d_auto.register_fake(_fake_forward)


def _setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(input, weight, bias)
    ctx.arguments = (stride, padding, dilation, groups)


def _backward(ctx, grad_output):
    input, weight, bias = ctx.saved_tensors
    stride, padding, dilation, groups = ctx.arguments
    # The forward's choice again: forward and backward both run with grad mode off on the same tensors,
    # so the key is the same and the memo answers; the gradients come from the algorithm that ran.
    algorithm = _choice(input, weight, bias, stride, padding, dilation, groups)
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2]]
    grad_input, grad_weight, grad_bias = BACKWARD[algorithm](grad_output, input, weight, stride, padding, dilation,
                                                             groups, mask)
    return (grad_input if mask[0] else None, grad_weight if mask[1] else None, grad_bias if mask[2] else None,
            None, None, None, None)


conv2d_auto.register_autograd(_backward, setup_context=_setup_context)
