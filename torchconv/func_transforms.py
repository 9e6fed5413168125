"""torch.func transforms (grad, vjp, jvp, jacrev, jacfwd, hessian, vmap and their compositions) over
torchconv's operators.

The operators run under a transform as aten's convolution does, without Python at the autograd
levels: their autograd nodes are hand-written C++ nodes (csrc/autograd.cpp), which torch.func's
grad levels take as they take aten's, and their Autograd kernels carry forward-mode tangents, which
jvp's levels read. What is Python is the vmap level, the batching rules below (functorch's
FuncTorchBatched key), one call of a rule per operator call:
- forward: over the input alone the mapped dimension folds into the batch (one launch, not one a
  slice);
- backward: for a gradient mapped over samples (per-sample gradients, `vmap(grad(loss),
  in_dims=(None, 0))`) grad_input folds into the batch, and grad_weight and grad_bias into the groups
  (slice b's channels and filters are group block b, so one grouped call gives every slice's
  gradient);
- anything else mapped (a weight per slice, an algorithm that cannot take the folded groups) runs the
  operator once a slice.
A rule runs the algorithm of the operator it serves. "auto" is chosen before the call on the shape
the kernels run (`chosen_under_transform`): vmap's mapped sizes folded into the batch, not the one
sample a transform shows the caller.
"""
import torch
from torch._C._functorch import _add_batch_dim, _unwrap_batched, current_level, get_unwrapped, maybe_get_level

from .ops import ALGORITHMS, BACKWARD, FORWARD
from .selection import _AtExampleSizes, _autocast, auto_algorithm, unsupported_reason

__all__ = ["chosen_under_transform"]

# The rules run the operators below the vmap level they serve: with this key excluded the call goes on
# to the next transform's level (functorch's DynamicLayerBack), as aten's C++ batching rules' calls do.
_BELOW_VMAP = torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchBatched)


class _FoldedInput(_AtExampleSizes):
    """A transformed call's input as "auto" sees it: the shape and memory format the kernels run on
    (vmap's mapped sizes folded into the batch, in the layout the fold gives), the input's dtype and
    device."""

    def __init__(self, input, batch):
        # The layout is read off the slice the transform shows by the fold's own rule (_folded): a
        # tensor under vmap alone answers is_contiguous for the contiguous format only. A fold in
        # channels_last that is also contiguous (one channel, or 1x1 planes) reads as contiguous, as a
        # plain tensor does.
        channels_last = not input.is_contiguous() and _strides_like_channels_last(input.shape, input.stride())
        super().__init__(input, torch.Size((batch,) + tuple(input.shape[1:])), channels_last)
        self.is_meta, self.requires_grad = input.is_meta, input.requires_grad


def chosen_under_transform(input, weight, bias, stride, padding, dilation, groups):
    """The algorithm "auto" runs for a call under a torch.func transform: the rule (benchmark mode's
    timing cannot run on a transform's wrapped tensors), for the dtypes autocast runs, on the input's
    batch times the sizes vmap maps it over (the tensor under the transforms' wrappers holds them)."""
    inner = input
    while maybe_get_level(inner) != -1:
        inner = get_unwrapped(inner)
    per_call = input.numel()
    batch = input.shape[0] * (inner.numel() // per_call) if per_call else input.shape[0]
    input, weight, bias = _autocast(input, weight, bias)
    return auto_algorithm(_FoldedInput(input, batch), weight, bias, tuple(stride), tuple(padding), tuple(dilation),
                          groups, measure=False)


def _unwrap(t, level):
    return (None, None) if t is None else _unwrap_batched(t, level)


def _slice(t, dim, i):
    return t if dim is None else t.select(dim, i)


def _mapped(t, dim, size):
    """`t` with its mapped dimension first, expanded to `size` slices where it has none."""
    return t.movedim(dim, 0) if dim is not None else t.expand(size, *t.shape)


def _strides_like_channels_last(sizes, strides):
    """What `Tensor.suggest_memory_format()` says of a 4-dimensional tensor of these sizes and strides
    (c10's is_channels_last_strides_2d), on plain ints: the slice a fold reads has no tensor of its
    own, and torch._prims_common's version, written for symbolic sizes, cost more than the fold's
    view or copy at per-sample gradients' sizes."""
    if strides[1] == 0:
        return False
    least = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < least or (d == 0 and least == strides[1]):
            return False
        least = strides[d] * sizes[d]
    return True


def _folded(t, dim, slices):
    """`t`, five dimensions, with `dim` and `dim + 1` folded into one, in the memory format of one of
    `slices` (a channels_last slice stays channels_last), by a view or one copy. A channels_last fold
    that cannot be a view puts the dimensions in the format's memory order first, so that it copies
    once, straight into it (flatten would copy to NCHW, then contiguous again); every other fold is
    flatten's (each op is a dispatch through the transforms' layers: the host time of per-sample
    gradients counts them)."""
    slice_like_channels_last = _strides_like_channels_last(slices.shape[1:], slices.stride()[1:])
    fmt = torch.channels_last if slice_like_channels_last else torch.contiguous_format
    if fmt != torch.channels_last or t.stride(dim) == t.stride(dim + 1) * t.shape[dim + 1]:
        return t.flatten(dim, dim + 1).contiguous(memory_format=fmt)
    order = (0, 2, 3, 1)
    unfolded_order = [d5 for d4 in order for d5 in ((d4, d4 + 1) if d4 == dim else (d4 + (d4 > dim),))]
    at = order.index(dim)
    return t.permute(unfolded_order).contiguous().flatten(at, at + 1).permute(0, 3, 1, 2)


def _forward_rule(algorithm):
    def rule(input, weight, bias, stride, padding, dilation, groups):
        level = current_level()
        (x, x_dim), (w, w_dim), (b, b_dim) = _unwrap(input, level), _unwrap(weight, level), _unwrap(bias, level)
        forward = FORWARD[algorithm]
        with torch._C._ExcludeDispatchKeyGuard(_BELOW_VMAP):
            if x_dim is None and w_dim is None and b_dim is None:
                return forward(input, weight, bias, stride, padding, dilation, groups)
            if w_dim is None and b_dim is None:
                x = x.movedim(x_dim, 0)
                out = forward(_folded(x, 0, x), w, b, stride, padding, dilation, groups)
                out = out.unflatten(0, x.shape[:2])
            else:
                size = next(t.shape[d] for t, d in ((x, x_dim), (w, w_dim), (b, b_dim)) if d is not None)
                out = torch.stack([forward(_slice(x, x_dim, i), _slice(w, w_dim, i), _slice(b, b_dim, i), stride,
                                           padding, dilation, groups) for i in range(size)])
        return _add_batch_dim(out, 0, level)
    return rule


def _backward_rule(algorithm):
    def rule(grad_output, input, weight, stride, padding, dilation, groups, output_mask):
        level = current_level()
        (gy, gy_dim), (x, x_dim), (w, w_dim) = (_unwrap(grad_output, level), _unwrap(input, level),
                                                _unwrap(weight, level))
        backward = BACKWARD[algorithm]
        with torch._C._ExcludeDispatchKeyGuard(_BELOW_VMAP):
            if gy_dim is None and x_dim is None and w_dim is None:
                return backward(grad_output, input, weight, stride, padding, dilation, groups, output_mask)
            size = next(t.shape[d] for t, d in ((gy, gy_dim), (x, x_dim), (w, w_dim)) if d is not None)
            out = _backward_folded(backward, algorithm, size, gy, gy_dim, x, x_dim, w, stride, padding, dilation,
                                   groups, output_mask) if w_dim is None else None
            if out is None:
                parts = [backward(_slice(gy, gy_dim, i), _slice(x, x_dim, i), _slice(w, w_dim, i), stride, padding,
                                  dilation, groups, output_mask) for i in range(size)]
                out = [torch.stack(p) if m else p[0] for p, m in zip(zip(*parts), output_mask)]
        return tuple(_add_batch_dim(g, 0, level) if m else g for g, m in zip(out, output_mask))
    return rule


def _backward_folded(backward, algorithm, size, gy, gy_dim, x, x_dim, weight, stride, padding, dilation, groups,
                     mask):
    """The slices' gradients for one weight in two calls (None where the algorithm cannot take the
    grouped call): grad_weight and grad_bias over the slices as groups, grad_input over the slices'
    images as one batch. A gradient not asked for is the operator's empty tensor."""
    gy, x = _mapped(gy, gy_dim, size), _mapped(x, x_dim, size)
    n, k = x.shape[1], weight.shape[0]
    out = [x.new_empty((0,))] * 3
    if mask[1] or mask[2]:
        # Slice b's channels and filters as group block b of one grouped convolution over the batch.
        # Its weight gives the call its shape only: grad_weight and grad_bias read no weight value, so
        # the slices' weight is not copied size times. The algorithm is asked on the folded input (its
        # memory format is the fold's) before grad_output is folded, so a refusal costs one fold.
        xg = _folded(x.transpose(0, 1), 1, x)
        wg = weight.new_empty((size * k,) + tuple(weight.shape[1:]))
        if unsupported_reason(algorithm, xg, wg, stride, dilation, padding, groups * size) is not None:
            return None
        gyg = _folded(gy.transpose(0, 1), 1, gy)
        _, gw, gb = backward(gyg, xg, wg, stride, padding, dilation, groups * size, [False, mask[1], mask[2]])
        for i, g in ((1, gw), (2, gb)):
            if mask[i]:
                out[i] = g.unflatten(0, (size, k))
    if mask[0]:
        # grad_input: the slices' images are images of one batch.
        gi = backward(_folded(gy, 0, gy), _folded(x, 0, x), weight, stride, padding, dilation,
                      groups, [True, False, False])[0]
        out[0] = gi.unflatten(0, (size, n))
    return out


def _register():
    library = torch.library.Library("torchconv", "IMPL")
    for algorithm in ALGORITHMS:
        library.impl(f"conv2d_{algorithm}", _forward_rule(algorithm), "FuncTorchBatched")
        library.impl(f"conv2d_{algorithm}_backward", _backward_rule(algorithm), "FuncTorchBatched")
    return library


_library = _register()  # kept: a Library's registrations end with the object
