"""torch.func transforms (grad, vjp, jvp, jacrev, jacfwd, hessian, vmap and their compositions) over
torchconv's operators.

The operators' autograd is C++ (csrc/autograd.cpp): no Python on an eager call, and it carries
forward-mode tangents (torch.autograd.forward_ad's dual tensors), but functorch refuses C++ autograd
functions. Under a transform a convolution runs the same forward and backward operators through two
autograd.Functions instead, with what functorch asks of them:
- backward: the forward's is the backward operator; the backward operator's (second order) is made of
  the forward and backward operators, as csrc/autograd.cpp's double backward is, so gradients of any
  order run on the algorithm's own kernels;
- jvp (forward mode): the forward is bilinear in (input, weight), the backward operator in
  (grad_output, input) and (grad_output, weight): each tangent is a sum of forward or backward
  operator calls;
- vmap: over the input alone the mapped dimension folds into the batch (one launch, not one a slice);
  for a gradient mapped over samples (per-sample gradients, `vmap(grad(loss), in_dims=(None, 0))`)
  grad_input folds into the batch, and grad_weight and grad_bias into the groups (slice b's channels
  and filters are group block b, so one grouped call gives every slice's gradient); anything else
  mapped (a weight per slice, an algorithm that cannot take the folded groups) runs the operator once
  a slice.
"""
import torch
from torch._prims_common import suggest_memory_format

from .ops import BACKWARD, FORWARD, _fake_forward
from .selection import unsupported_reason

__all__ = ["conv2d"]


def _sum(terms, zero=None):
    """The sum of the terms that are not None; zero() (or None) if all are."""
    total = None
    for t in terms:
        if t is not None:
            total = t if total is None else total + t
    return zero() if total is None and zero is not None else total


def _slice(t, dim, i):
    return t if dim is None else t.select(dim, i)


def _mapped(t, dim, size):
    """`t` with its mapped dimension first, expanded to `size` slices where it has none."""
    return t.movedim(dim, 0) if dim is not None else t.expand(size, *t.shape)


def _folded(t, slices):
    """`t`, a folding of `slices`' dimensions into 4, in the memory format of one slice (a channels_last
    slice stays channels_last where folding copies)."""
    return t.contiguous(memory_format=suggest_memory_format(slices[0]))


class _Conv2d(torch.autograd.Function):
    """The forward operator of `algorithm`; its backward is _Conv2dBackward."""

    @staticmethod
    def forward(algorithm, input, weight, bias, stride, padding, dilation, groups):
        return FORWARD[algorithm](input, weight, bias, stride, padding, dilation, groups)

    @staticmethod
    def setup_context(ctx, inputs, output):
        algorithm, input, weight, bias, stride, padding, dilation, groups = inputs
        ctx.save_for_backward(input, weight)
        ctx.save_for_forward(input, weight)
        ctx.arguments = (algorithm, stride, padding, dilation, groups, bias is not None)

    @staticmethod
    def jvp(ctx, _, input_tangent, weight_tangent, bias_tangent, *unused):
        input, weight = ctx.saved_tensors
        algorithm, stride, padding, dilation, groups, _ = ctx.arguments
        conv = lambda x, w: _Conv2d.apply(algorithm, x, w, None, stride, padding, dilation, groups)
        terms = []
        if input_tangent is not None:
            terms.append(conv(input_tangent, weight))
        if weight_tangent is not None:
            terms.append(conv(input, weight_tangent))
        out = _sum(terms, lambda: _fake_forward(input, weight, None, stride, padding, dilation, groups).zero_())
        return out if bias_tangent is None else out + bias_tangent.view(1, -1, 1, 1)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        algorithm, stride, padding, dilation, groups, has_bias = ctx.arguments
        mask = [ctx.needs_input_grad[1], ctx.needs_input_grad[2], has_bias and ctx.needs_input_grad[3]]
        grads = _Conv2dBackward.apply(algorithm, grad_output, input, weight, stride, padding, dilation, groups, mask)
        return (None,) + tuple(g if m else None for g, m in zip(grads, mask)) + (None,) * 4

    @staticmethod
    def vmap(info, in_dims, algorithm, input, weight, bias, stride, padding, dilation, groups):
        _, input_dim, weight_dim, bias_dim = in_dims[:4]
        size = info.batch_size
        if weight_dim is None and bias_dim is None:
            x = _mapped(input, input_dim, size)
            out = _Conv2d.apply(algorithm, _folded(x.flatten(0, 1), x), weight, bias, stride, padding, dilation, groups)
            return out.unflatten(0, (size, x.shape[1])), 0
        outs = [_Conv2d.apply(algorithm, _slice(input, input_dim, i), _slice(weight, weight_dim, i),
                              None if bias is None else _slice(bias, bias_dim, i), stride, padding, dilation, groups)
                for i in range(size)]
        return torch.stack(outs), 0


class _Conv2dBackward(torch.autograd.Function):
    """The backward operator of `algorithm`: (grad_input, grad_weight, grad_bias) under `mask`, an
    empty tensor for each one not asked for."""

    @staticmethod
    def forward(algorithm, grad_output, input, weight, stride, padding, dilation, groups, mask):
        return BACKWARD[algorithm](grad_output, input, weight, stride, padding, dilation, groups, mask)

    @staticmethod
    def setup_context(ctx, inputs, output):
        algorithm, grad_output, input, weight, stride, padding, dilation, groups, mask = inputs
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(grad_output, input, weight)
        ctx.save_for_forward(grad_output, input, weight)
        ctx.arguments = (algorithm, stride, padding, dilation, groups, mask)

    @staticmethod
    def backward(ctx, grad_input_grad, grad_weight_grad, grad_bias_grad):
        # grad_input is bilinear in (grad_output, weight), grad_weight in (grad_output, input), grad_bias
        # linear in grad_output: each term is one operator call (csrc/autograd.cpp's double backward).
        grad_output, input, weight = ctx.saved_tensors
        algorithm, stride, padding, dilation, groups, mask = ctx.arguments
        gg_input, gg_weight, gg_bias = (g if m else None for g, m in zip((grad_input_grad, grad_weight_grad,
                                                                           grad_bias_grad), mask))
        conv = lambda x, w: _Conv2d.apply(algorithm, x, w, None, stride, padding, dilation, groups)
        grads = lambda gy, x, w, m: _Conv2dBackward.apply(algorithm, gy, x, w, stride, padding, dilation, groups, m)
        d_grad_output = d_input = d_weight = None
        if ctx.needs_input_grad[1]:
            terms = [conv(gg_input, weight) if gg_input is not None else None,
                     conv(input, gg_weight) if gg_weight is not None else None,
                     gg_bias.view(1, -1, 1, 1).expand_as(grad_output) if gg_bias is not None else None]
            d_grad_output = _sum(terms)
        if ctx.needs_input_grad[2] and gg_weight is not None:
            d_input = grads(grad_output, input, gg_weight, [True, False, False])[0]
        if ctx.needs_input_grad[3] and gg_input is not None:
            d_weight = grads(grad_output, gg_input, weight, [False, True, False])[1]
        return None, d_grad_output, d_input, d_weight, None, None, None, None, None

    @staticmethod
    def jvp(ctx, _, grad_output_tangent, input_tangent, weight_tangent, *unused):
        grad_output, input, weight = ctx.saved_tensors
        algorithm, stride, padding, dilation, groups, mask = ctx.arguments
        grads = lambda gy, x, w, m: _Conv2dBackward.apply(algorithm, gy, x, w, stride, padding, dilation, groups, m)
        empty = input.new_empty((0,))
        out = [empty, empty, empty]
        if mask[0]:
            out[0] = _sum([grads(grad_output_tangent, input, weight, [True, False, False])[0]
                           if grad_output_tangent is not None else None,
                           grads(grad_output, input, weight_tangent, [True, False, False])[0]
                           if weight_tangent is not None else None], lambda: torch.zeros_like(input))
        if mask[1]:
            out[1] = _sum([grads(grad_output_tangent, input, weight, [False, True, False])[1]
                           if grad_output_tangent is not None else None,
                           grads(grad_output, input_tangent, weight, [False, True, False])[1]
                           if input_tangent is not None else None], lambda: torch.zeros_like(weight))
        if mask[2]:
            out[2] = (grads(grad_output_tangent, input, weight, [False, False, True])[2]
                      if grad_output_tangent is not None else weight.new_zeros((weight.shape[0],)))
        return tuple(out)

    @staticmethod
    def vmap(info, in_dims, algorithm, grad_output, input, weight, stride, padding, dilation, groups, mask):
        _, grad_output_dim, input_dim, weight_dim = in_dims[:4]
        size = info.batch_size
        if weight_dim is not None:
            return _backward_by_slices(info, in_dims, algorithm, grad_output, input, weight, stride, padding, dilation,
                                       groups, mask)
        gy, x = _mapped(grad_output, grad_output_dim, size), _mapped(input, input_dim, size)
        n, k = x.shape[1], weight.shape[0]
        out, dims = [input.new_empty((0,))] * 3, [None] * 3  # what the operator returns for a gradient not asked for
        if mask[1] or mask[2]:
            # Slice b's channels and filters as group block b of one grouped convolution over the batch
            # (the repeated weight is as large as the slices' grad_weight the call returns).
            xg, gyg = _folded(x.transpose(0, 1).flatten(1, 2), x), _folded(gy.transpose(0, 1).flatten(1, 2), gy)
            wg = weight.repeat(size, 1, 1, 1)
            if unsupported_reason(algorithm, xg, wg, stride, dilation, padding, groups * size) is not None:
                return _backward_by_slices(info, in_dims, algorithm, grad_output, input, weight, stride, padding,
                                           dilation, groups, mask)
            _, gw, gb = _Conv2dBackward.apply(algorithm, gyg, xg, wg, stride, padding, dilation, groups * size,
                                              [False, mask[1], mask[2]])
            for i, g in ((1, gw), (2, gb)):
                if mask[i]:
                    out[i], dims[i] = g.unflatten(0, (size, k)), 0
        if mask[0]:
            # grad_input: the slices' images are images of one batch.
            gi = _Conv2dBackward.apply(algorithm, _folded(gy.flatten(0, 1), gy), _folded(x.flatten(0, 1), x), weight,
                                       stride, padding, dilation, groups, [True, False, False])[0]
            out[0], dims[0] = gi.unflatten(0, (size, n)), 0
        return tuple(out), tuple(dims)


def _backward_by_slices(info, in_dims, algorithm, grad_output, input, weight, stride, padding, dilation, groups, mask):
    _, grad_output_dim, input_dim, weight_dim = in_dims[:4]
    slices = [_Conv2dBackward.apply(algorithm, _slice(grad_output, grad_output_dim, i), _slice(input, input_dim, i),
                                    _slice(weight, weight_dim, i), stride, padding, dilation, groups, mask)
              for i in range(info.batch_size)]
    out = tuple(torch.stack(parts) if m else parts[0] for parts, m in zip(zip(*slices), mask))
    return out, tuple(0 if m else None for m in mask)


def conv2d(algorithm, input, weight, bias, stride, padding, dilation, groups):
    """The forward operator of `algorithm` under a torch.func transform (ops.functorch_active)."""
    return _Conv2d.apply(algorithm, input, weight, bias, list(stride), list(padding), list(dilation), groups)
