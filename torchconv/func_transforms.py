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
"auto" is chosen where a kernel runs (`_Call.chosen`), on the tensors it runs on: a transform shows the
caller one sample (a batch of 1 under per-sample gradients), while the kernels run the folded batch
and groups, whose best algorithm may differ (the rule's split-reduction CSG for a batch of 1).
"""
import inspect

import torch
from torch._prims_common import suggest_memory_format

from .ops import BACKWARD, FORWARD, _fake_forward, functorch_active
from .selection import _autocast, auto_algorithm, unsupported_reason

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


class _Call:
    """A call's arguments other than tensors, as one object. functorch flattens an autograd.Function's
    arguments (torch.utils._pytree) at every level of every call, and there a list is a node with a
    leaf an element; an object of an unregistered class is one leaf."""

    __slots__ = ("algorithm", "stride", "padding", "dilation", "groups", "mask")
    # stride, padding and dilation are tuples: the "auto" memo (selection.auto_algorithm) keys on them,
    # and a list does not hash.

    def __init__(self, algorithm, stride, padding, dilation, groups, mask=None):
        self.algorithm, self.stride, self.padding, self.dilation = algorithm, stride, padding, dilation
        self.groups, self.mask = groups, mask

    def asking(self, mask, groups=None):
        """The backward operator's call for the gradients `mask` asks for (over `groups`)."""
        return _Call(self.algorithm, self.stride, self.padding, self.dilation,
                     self.groups if groups is None else groups, mask)

    def chosen(self, input, weight, bias=None):
        """The algorithm the kernel call runs: "auto" by the rule (benchmark mode's timing is no part
        of a transformed call), for the dtypes autocast runs."""
        if self.algorithm != "auto":
            return self.algorithm
        return auto_algorithm(*_autocast(input, weight, bias), self.stride, self.padding, self.dilation,
                              self.groups, measure=False)


class _Conv2d(torch.autograd.Function):
    """The forward operator of `call.algorithm`; its backward is _Conv2dBackward."""

    @staticmethod
    def forward(call, input, weight, bias):
        return FORWARD[call.chosen(input, weight, bias)](input, weight, bias, call.stride, call.padding,
                                                          call.dilation, call.groups)

    @staticmethod
    def setup_context(ctx, inputs, output):
        call, input, weight, bias = inputs
        ctx.save_for_backward(input, weight)
        ctx.save_for_forward(input, weight)
        ctx.call, ctx.has_bias = call, bias is not None

    @staticmethod
    def jvp(ctx, _, input_tangent, weight_tangent, bias_tangent):
        input, weight = ctx.saved_tensors
        call = ctx.call
        terms = []
        if input_tangent is not None:
            terms.append(_conv(call, input_tangent, weight, None))
        if weight_tangent is not None:
            terms.append(_conv(call, input, weight_tangent, None))
        out = _sum(terms, lambda: _fake_forward(input, weight, None, call.stride, call.padding, call.dilation,
                                                call.groups).zero_())
        return out if bias_tangent is None else out + bias_tangent.view(1, -1, 1, 1)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        mask = (ctx.needs_input_grad[1], ctx.needs_input_grad[2], ctx.has_bias and ctx.needs_input_grad[3])
        grads = _conv_backward(ctx.call.asking(mask), grad_output, input, weight)
        return (None,) + tuple(g if m else None for g, m in zip(grads, mask))

    @staticmethod
    def vmap(info, in_dims, call, input, weight, bias):
        _, input_dim, weight_dim, bias_dim = in_dims
        size = info.batch_size
        if weight_dim is None and bias_dim is None:
            x = _mapped(input, input_dim, size)
            out = _conv(call, _folded(x.flatten(0, 1), x), weight, bias)
            return out.unflatten(0, (size, x.shape[1])), 0
        outs = [_conv(call, _slice(input, input_dim, i), _slice(weight, weight_dim, i),
                      None if bias is None else _slice(bias, bias_dim, i))
                for i in range(size)]
        return torch.stack(outs), 0


# A backward operator's call for one gradient.
_GRAD_INPUT, _GRAD_WEIGHT, _GRAD_BIAS = (True, False, False), (False, True, False), (False, False, True)


class _Conv2dBackward(torch.autograd.Function):
    """The backward operator of `call.algorithm`: (grad_input, grad_weight, grad_bias) under
    `call.mask`, an empty tensor for each one not asked for."""

    @staticmethod
    def forward(call, grad_output, input, weight):
        return BACKWARD[call.chosen(input, weight)](grad_output, input, weight, call.stride, call.padding,
                                                    call.dilation, call.groups, list(call.mask))

    @staticmethod
    def setup_context(ctx, inputs, output):
        call, grad_output, input, weight = inputs
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(grad_output, input, weight)
        ctx.save_for_forward(grad_output, input, weight)
        ctx.call = call

    @staticmethod
    def backward(ctx, grad_input_grad, grad_weight_grad, grad_bias_grad):
        # grad_input is bilinear in (grad_output, weight), grad_weight in (grad_output, input), grad_bias
        # linear in grad_output: each term is one operator call (csrc/autograd.cpp's double backward).
        grad_output, input, weight = ctx.saved_tensors
        call = ctx.call
        gg_input, gg_weight, gg_bias = (g if m else None for g, m in zip((grad_input_grad, grad_weight_grad,
                                                                           grad_bias_grad), call.mask))
        d_grad_output = d_input = d_weight = None
        if ctx.needs_input_grad[1]:
            terms = [_conv(call, gg_input, weight, None) if gg_input is not None else None,
                     _conv(call, input, gg_weight, None) if gg_weight is not None else None,
                     gg_bias.view(1, -1, 1, 1).expand_as(grad_output) if gg_bias is not None else None]
            d_grad_output = _sum(terms)
        if ctx.needs_input_grad[2] and gg_weight is not None:
            d_input = _conv_backward(call.asking(_GRAD_INPUT), grad_output, input, gg_weight)[0]
        if ctx.needs_input_grad[3] and gg_input is not None:
            d_weight = _conv_backward(call.asking(_GRAD_WEIGHT), grad_output, gg_input, weight)[1]
        return None, d_grad_output, d_input, d_weight

    @staticmethod
    def jvp(ctx, _, grad_output_tangent, input_tangent, weight_tangent):
        grad_output, input, weight = ctx.saved_tensors
        call = ctx.call
        grads = lambda mask, gy, x, w: _conv_backward(call.asking(mask), gy, x, w)  # noqa: E731
        empty = input.new_empty((0,))
        out = [empty, empty, empty]
        if call.mask[0]:
            out[0] = _sum([grads(_GRAD_INPUT, grad_output_tangent, input, weight)[0]
                           if grad_output_tangent is not None else None,
                           grads(_GRAD_INPUT, grad_output, input, weight_tangent)[0]
                           if weight_tangent is not None else None], lambda: torch.zeros_like(input))
        if call.mask[1]:
            out[1] = _sum([grads(_GRAD_WEIGHT, grad_output_tangent, input, weight)[1]
                           if grad_output_tangent is not None else None,
                           grads(_GRAD_WEIGHT, grad_output, input_tangent, weight)[1]
                           if input_tangent is not None else None], lambda: torch.zeros_like(weight))
        if call.mask[2]:
            out[2] = (grads(_GRAD_BIAS, grad_output_tangent, input, weight)[2]
                      if grad_output_tangent is not None else weight.new_zeros((weight.shape[0],)))
        return tuple(out)

    @staticmethod
    def vmap(info, in_dims, call, grad_output, input, weight):
        _, grad_output_dim, input_dim, weight_dim = in_dims
        size, mask = info.batch_size, call.mask
        if weight_dim is not None:
            return _backward_by_slices(info, in_dims, call, grad_output, input, weight)
        gy, x = _mapped(grad_output, grad_output_dim, size), _mapped(input, input_dim, size)
        n, k = x.shape[1], weight.shape[0]
        out, dims = [input.new_empty((0,))] * 3, [None] * 3  # what the operator returns for a gradient not asked for
        if mask[1] or mask[2]:
            # Slice b's channels and filters as group block b of one grouped convolution over the batch
            # (the repeated weight is as large as the slices' grad_weight the call returns).
            xg, gyg = _folded(x.transpose(0, 1).flatten(1, 2), x), _folded(gy.transpose(0, 1).flatten(1, 2), gy)
            wg = weight.repeat(size, 1, 1, 1)
            if call.algorithm != "auto" and unsupported_reason(call.algorithm, xg, wg, call.stride, call.dilation,
                                                               call.padding, call.groups * size) is not None:
                return _backward_by_slices(info, in_dims, call, grad_output, input, weight)
            _, gw, gb = _conv_backward(call.asking((False, mask[1], mask[2]), call.groups * size), gyg, xg, wg)
            for i, g in ((1, gw), (2, gb)):
                if mask[i]:
                    out[i], dims[i] = g.unflatten(0, (size, k)), 0
        if mask[0]:
            # grad_input: the slices' images are images of one batch.
            gi = _conv_backward(call.asking(_GRAD_INPUT), _folded(gy.flatten(0, 1), gy),
                                _folded(x.flatten(0, 1), x), weight)[0]
            out[0], dims[0] = gi.unflatten(0, (size, n)), 0
        return tuple(out), tuple(dims)


def _conv(call, input, weight, bias):
    """The forward operator of `call`, differentiable wherever it runs: through _Conv2d under a transform, and
    below the last one (where the vmap rules' folded calls run) as the operator itself, whose autograd is
    C++ (csrc/autograd.cpp): the same gradients without an autograd.Function's Python."""
    if functorch_active():
        return _Conv2d.apply(call, input, weight, bias)
    return _Conv2d.forward(call, input, weight, bias)


def _conv_backward(call, grad_output, input, weight):
    """The backward operator of `call`, differentiable wherever it runs (as _conv)."""
    if functorch_active():
        return _Conv2dBackward.apply(call, grad_output, input, weight)
    return _Conv2dBackward.forward(call, grad_output, input, weight)


# autograd.Function.apply binds every call's arguments to forward's signature under a transform
# (inspect.signature); a function's __signature__ is returned as it is instead of being rebuilt a call.
for _function in (_Conv2d, _Conv2dBackward):
    _function.forward.__signature__ = inspect.signature(_function.forward)
del _function


def _backward_by_slices(info, in_dims, call, grad_output, input, weight):
    _, grad_output_dim, input_dim, weight_dim = in_dims
    slices = [_conv_backward(call, _slice(grad_output, grad_output_dim, i), _slice(input, input_dim, i),
                             _slice(weight, weight_dim, i))
              for i in range(info.batch_size)]
    out = tuple(torch.stack(parts) if m else parts[0] for parts, m in zip(zip(*slices), call.mask))
    return out, tuple(0 if m else None for m in call.mask)


def conv2d(algorithm, input, weight, bias, stride, padding, dilation, groups):
    """The forward operator of `algorithm` under a torch.func transform (ops.functorch_active)."""
    return _Conv2d.apply(_Call(algorithm, tuple(stride), tuple(padding), tuple(dilation), groups), input, weight, bias)
