"""ONNX export: torch.onnx.export (its default, dynamo-based exporter) meets torchconv's operators in
the exported program and needs each one's ONNX form. Every operator computes a standard
convolution, so each becomes one ONNX Conv node; the ONNX runtime then runs its own kernels."""
import torch

from . import auto_op  # noqa: F401  (registers torchconv::conv2d_auto)
from .ops import FORWARD

__all__ = ["onnx_translation_table"]


def _conv(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    from onnxscript import opset18 as op

    # ONNX pads list each spatial axis's start, then each one's end.
    attributes = dict(strides=list(stride), pads=[padding[0], padding[1], padding[0], padding[1]],
                      dilations=list(dilation), group=groups)
    if bias is None:
        return op.Conv(input, weight, **attributes)
    return op.Conv(input, weight, bias, **attributes)


def onnx_translation_table():
    """The `custom_translation_table` that lets torch.onnx.export export models with torchconv
    convolutions: each algorithm's forward operator (and `conv2d_auto`, which a dynamo trace of a
    dynamic size records) as one ONNX Conv (opset 18)::

        torch.onnx.export(model, (x,), custom_translation_table=torchconv.onnx_translation_table())

    Needs onnxscript (which torch.onnx's exporter needs too)."""
    import onnxscript  # noqa: F401  (a clear ImportError here, not inside the exporter)

    return {operator: _conv for operator in (*FORWARD.values(), torch.ops.torchconv.conv2d_auto.default)}
