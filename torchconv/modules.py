"""torchconv.Conv2d, a drop-in nn.Conv2d; convert(), which swaps it into an existing model; and
tune(), which measures a model's convolutions in benchmark mode up front."""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import tuning as _tuning
from .auto_op import has_dynamic_size
from .calls import call_forward
from .functional import _raise_not_dense, conv2d
from .ops import ALGORITHMS, functorch_active
from .selection import _any_autocast, _autocast, auto_algorithm

__all__ = ["Conv2d", "convert", "tune"]

# What torch.backends.cudnn.allow_tf32 returns (its getter), without the property lookup.
_cudnn_allow_tf32 = torch._C._get_cudnn_allow_tf32
_MISSING = object()
# An FX trace's stand-in for a tensor: torch.fx.symbolic_trace's input takes the general path, whose
# torchconv.conv2d records itself as one node.
_Proxy = torch.fx.Proxy


def _check_algorithm(algorithm):
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ValueError(f"torchconv: unknown algorithm {algorithm!r}; choose 'auto' or one of {ALGORITHMS}")
    return algorithm


class Conv2d(nn.Conv2d):
    """nn.Conv2d computed by a torchconv algorithm. Same constructor (plus ``algorithm``), same
    parameters and state_dict keys, every padding_mode."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, algorithm="auto"):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self.algorithm = _check_algorithm(algorithm)

    def forward(self, input):
        # The common case -- zero padding given as numbers, a batched input, algorithm "auto" -- goes
        # straight to the operator with the choice remembered per input shape: at batch 1 a model is
        # launch-bound, and this path must cost no more host time than nn.Conv2d's. Everything else
        # takes the general path, and so does an FX trace (its input a Proxy).
        # Inside autocast the choice is made once for the dtypes that run (the tensors cast as
        # torchconv.functional._autocast casts them), and the call hands the operator its uncast
        # tensors: its Autocast kernel casts them as aten::conv2d's does, the weight's cast cached for
        # the autocast region instead of repeated (a kernel launch and an allocation) every call.
        if (self.algorithm != "auto" or self.padding_mode != "zeros" or isinstance(self.padding, str)
                or isinstance(input, _Proxy) or input.dim() != 4):
            return self._conv_forward(input, self.weight, self.bias)
        # Dynamo traces the public spellings (it folds them to constants); eager calls take private
        # getters that skip Python-level lookups: the TF32 switch through its getter (torch.backends.cudnn.
        # allow_tf32 is a module property), autocast's per-device state only inside some autocast
        # region, the parameters from _parameters (nn.Module.__getattr__ is a Python fallback). A
        # parametrized weight is not in _parameters and takes the attribute.
        compiling = torch.compiler.is_compiling()
        params = self._parameters if not compiling else {}
        weight, bias = params.get("weight", _MISSING), params.get("bias", _MISSING)
        if weight is _MISSING or bias is _MISSING:
            weight, bias = self.weight, self.bias
        device = input.device
        autocast_dtype = None
        if compiling or _any_autocast():
            device_type = device.type
            autocast_dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
        tf32 = torch.backends.cudnn.allow_tf32 if compiling else _cudnn_allow_tf32()
        try:
            key = (input.shape, input.dtype, device, input.is_contiguous(),
                   torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad),
                   _tuning._state["benchmark"], torch.are_deterministic_algorithms_enabled(), tf32, autocast_dtype,
                   _tuning._state["winograd_variant"])
        except (RuntimeError, AttributeError):
            _raise_not_dense(input, weight, bias)  # a nested tensor has no shape to key on: say so
            raise
        # A traced call neither reads nor writes the memo: its sizes may be symbolic (torch.export's
        # dynamic dimensions), and comparing them with an eager call's would guard on them.
        memo = self.__dict__.get("_auto_memo") if not compiling else None
        if memo is not None and memo[0] == key:
            algorithm = memo[1]
        elif compiling and torch.compiler.is_dynamo_compiling() and has_dynamic_size(input):
            # torch.compile with a dynamic size: torchconv.conv2d records the operator that chooses when
            # it runs (auto_op); at trace time only, so its argument checks cost nothing at run time.
            return self._conv_forward(input, weight, bias)
        elif input.is_complex():  # three real convolutions (functional._complex_conv2d), each with its own choice
            return self._conv_forward(input, weight, bias)
        else:
            _raise_not_dense(input, weight, bias)  # a jagged nested tensor keys, but no algorithm takes it
            if not compiling and functorch_active():
                # Under a torch.func transform call_forward chooses (calls.py says on what, and why).
                algorithm = "auto"
            else:
                algorithm = auto_algorithm(*_autocast(input, weight, bias), self.stride, self.padding,
                                           self.dilation, self.groups)
                if not compiling:
                    self.__dict__["_auto_memo"] = (key, algorithm)
        return call_forward(algorithm, input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def _conv_forward(self, input, weight, bias):
        if self.padding_mode != "zeros":
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv2d(input, weight, bias, self.stride, 0, self.dilation, self.groups, self.algorithm)
        return conv2d(input, weight, bias, self.stride, self.padding, self.dilation, self.groups, self.algorithm)

    def extra_repr(self):
        return super().extra_repr() + f", algorithm={self.algorithm!r}"

    def __prepare_scriptable__(self):
        # torch.jit.script asks every submodule first: the forward chooses its algorithm in Python
        # (the plan registry, benchmark mode's measurements), which TorchScript cannot compile; say so
        # rather than fail on the first construct it meets.
        raise RuntimeError(
            "torchconv.Conv2d cannot be compiled by torch.jit.script: its forward chooses an algorithm in "
            "Python. Use torch.jit.trace, torch.compile or torch.export (each runs torchconv's operators)")

    @classmethod
    def from_conv(cls, conv, algorithm="auto"):
        """A torchconv.Conv2d that shares `conv`'s parameters, buffers, hooks and training mode."""
        new = cls.__new__(cls)
        # Copy the module's state; the containers are copied so the two modules can diverge later,
        # but the Parameter objects themselves are shared.
        new.__dict__.update({k: (v.copy() if isinstance(v, dict) else v) for k, v in conv.__dict__.items()})
        new.algorithm = _check_algorithm(algorithm)
        return new


def convert(module, algorithm="auto"):
    """Replace every ``nn.Conv2d`` in `module` (at any depth) by a ``torchconv.Conv2d`` sharing its
    parameters; returns the converted module (the same object unless `module` itself is a conv).

    Other subclasses of nn.Conv2d are left alone (their methods may change what the convolution
    computes); an nn.LazyConv2d becomes a torchconv.Conv2d when its first call sizes it, as it would
    have become an nn.Conv2d; existing torchconv.Conv2d modules get `algorithm`. A conv used at
    several places stays one shared module.
    """
    _check_algorithm(algorithm)
    memo = {}

    def swap(m):
        if isinstance(m, Conv2d):
            m.algorithm = algorithm
            return m
        if type(m) is nn.LazyConv2d:
            # LazyModuleMixin turns the module into its cls_to_become once its parameters are sized
            # (the first call); the instance's own attribute takes precedence over nn.Conv2d's.
            m.cls_to_become, m.algorithm = Conv2d, algorithm
            return m
        if type(m) is nn.Conv2d:
            if id(m) not in memo:
                memo[id(m)] = Conv2d.from_conv(m, algorithm)
            return memo[id(m)]
        for name, child in list(m._modules.items()):
            if child is not None:
                new = swap(child)
                if new is not child:
                    m._modules[name] = new
        return m

    return swap(module)


class _Progress:
    """A one-line progress report on stderr while `tune` measures new shapes."""

    def __init__(self, total):
        self.total, self.done, self.t0 = total, 0, time.perf_counter()

    def __call__(self, key):
        self.done += 1
        width = 30
        filled = int(width * min(self.done, self.total) / max(self.total, 1))
        sys.stderr.write(f"\rtorchconv: tuning [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                         f"convolutions, {time.perf_counter() - self.t0:.1f} s")
        sys.stderr.flush()

    def close(self):
        if self.done:
            sys.stderr.write("\n")


def tune(model, example_input, train=False, progress=True):
    """Runs `model(example_input)` once in benchmark mode so every convolution shape it meets is
    measured now (with a progress bar on stderr) instead of on its first real call: for inference,
    or with `train=True` for training (forward + backward timed; the model runs a forward and a
    backward pass, which updates e.g. batch-norm statistics in train mode but no .grad). Returns
    the number of cache entries added. Leaves benchmark mode on."""
    convs = [m for m in model.modules() if isinstance(m, Conv2d)]
    before = len(_tuning.cache_entries())
    _tuning.set_benchmark(True)
    bar = _Progress(len(convs)) if progress else None
    _tuning._state["progress"] = bar
    try:
        if train:
            params = [p for p in model.parameters() if p.requires_grad]
            out = model(example_input)
            outputs = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else [out]
            loss = sum(o.float().sum() for o in outputs if isinstance(o, torch.Tensor))
            torch.autograd.grad(loss, params, allow_unused=True)
        else:
            with torch.no_grad():
                model(example_input)
    finally:
        _tuning._state["progress"] = None
        if bar is not None:
            bar.close()
    return len(_tuning.cache_entries()) - before
