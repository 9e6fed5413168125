"""Fake (meta) and autograd registrations for the C++ operators.

Each algorithm has a forward operator ``torchconv::conv2d_<algo>`` and a backward operator
``torchconv::conv2d_<algo>_backward`` that returns (grad_input, grad_weight, grad_bias) under an
output mask. The backward of the backward operator is written with the same two operators, so
gradients of any order run on the algorithm's own kernels:

* grad_input  = B_in(grad_out, weight)   is linear in grad_out and weight,
* grad_weight = B_w(input, grad_out)     is linear in input and grad_out,
* grad_bias   = sum(grad_out),

and the adjoint of B_in / B_w with respect to grad_out is the forward convolution.
"""
import torch

ALGORITHMS = ("direct", "csg", "gemm", "winograd")


def conv2d_output_size(input_size, weight_size, stride, padding, dilation):
    """(Ho, Wo) of PyTorch's conv2d for an (N, C, H, W) input and a (K, C/g, R, S) weight."""
    return tuple(
        (input_size[2 + i] + 2 * padding[i] - dilation[i] * (weight_size[2 + i] - 1) - 1) // stride[i] + 1
        for i in range(2)
    )


def _fake_forward(input, weight, bias, stride, padding, dilation, groups):
    ho, wo = conv2d_output_size(input.shape, weight.shape, stride, padding, dilation)
    return input.new_empty((input.shape[0], weight.shape[0], ho, wo))


def _fake_backward(grad_output, input, weight, stride, padding, dilation, groups, output_mask):
    skipped = lambda: input.new_empty((0,))
    return (
        input.new_empty(input.shape) if output_mask[0] else skipped(),
        weight.new_empty(weight.shape) if output_mask[1] else skipped(),
        input.new_empty((weight.shape[0],)) if output_mask[2] else skipped(),
    )


def _setup_forward(ctx, inputs, output):
    input, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(input, weight)
    ctx.conv = (stride, padding, dilation, groups)
    ctx.has_bias = bias is not None


def _setup_backward(ctx, inputs, output):
    grad_output, input, weight, stride, padding, dilation, groups, output_mask = inputs
    ctx.save_for_backward(grad_output, input, weight)
    ctx.conv = (stride, padding, dilation, groups)
    ctx.output_mask = tuple(output_mask)


def _make_autograd(forward_op, backward_op):
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], need[1], ctx.has_bias and need[2]]
        grads = backward_op(grad_output, input, weight, *ctx.conv, mask)
        return tuple(g if m else None for g, m in zip(grads, mask)) + (None,) * 4

    def double_backward(ctx, gg_input, gg_weight, gg_bias):
        grad_output, input, weight = ctx.saved_tensors
        mask = ctx.output_mask
        gg_input = gg_input if mask[0] else None
        gg_weight = gg_weight if mask[1] else None
        gg_bias = gg_bias if mask[2] else None
        need = ctx.needs_input_grad
        d_grad_output = d_input = d_weight = None
        if need[0]:
            terms = []
            if gg_input is not None:
                terms.append(forward_op(gg_input, weight, None, *ctx.conv))
            if gg_weight is not None:
                terms.append(forward_op(input, gg_weight, None, *ctx.conv))
            if gg_bias is not None:
                terms.append(gg_bias.view(1, -1, 1, 1).expand_as(grad_output))
            if terms:
                d_grad_output = terms[0]
                for t in terms[1:]:
                    d_grad_output = d_grad_output + t
        if need[1] and gg_weight is not None:
            d_input = backward_op(grad_output, input, gg_weight, *ctx.conv, [True, False, False])[0]
        if need[2] and gg_input is not None:
            d_weight = backward_op(grad_output, gg_input, weight, *ctx.conv, [False, True, False])[1]
        return (d_grad_output, d_input, d_weight) + (None,) * 5

    return backward, double_backward


def _register():
    for algo in ALGORITHMS:
        name = f"torchconv::conv2d_{algo}"
        forward_op = getattr(torch.ops.torchconv, f"conv2d_{algo}").default
        backward_op = getattr(torch.ops.torchconv, f"conv2d_{algo}_backward").default
        torch.library.register_fake(name)(_fake_forward)
        torch.library.register_fake(name + "_backward")(_fake_backward)
        backward, double_backward = _make_autograd(forward_op, backward_op)
        torch.library.register_autograd(name, backward, setup_context=_setup_forward)
        torch.library.register_autograd(name + "_backward", double_backward, setup_context=_setup_backward)


_register()

# The forward operators, by algorithm name (the dispatcher entry points torchconv.conv2d calls).
FORWARD = {algo: getattr(torch.ops.torchconv, f"conv2d_{algo}").default for algo in ALGORITHMS}
