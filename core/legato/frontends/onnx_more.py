"""ONNX converters for inference-time no-ops and small normalizations: Dropout and
MeanVarianceNormalization."""
from __future__ import annotations

import numpy as np

from ..ir import Const
from .onnx_convert import converter


@converter("Dropout", const_inputs=(1, 2))
def dropout(node):
    """Inference: the identity, and a mask that keeps every element. Training mode with a
    non-zero ratio draws random numbers, which a compiled graph cannot reproduce."""
    x = node.arg(0)
    if node.input(2) is not None and bool(node.scalar(2)):
        ratio = node.scalar(1, 0.5)
        if ratio != 0:
            node.refuse(f"training_mode is true with ratio {ratio}: training-mode "
                        "dropout samples a random mask, and legato imports "
                        "deterministic inference graphs only")
    if not node.wants(1):
        return x
    mask = node.call("broadcast_to", Const.of(np.array(True)), shape=list(x.shape))
    return x, mask


@converter("MeanVarianceNormalization")
def mean_variance_normalization(node):
    """(x - mean) / sqrt(variance + 1e-9) over `axes`, as the ONNX function body has it."""
    x = node.arg(0)
    axes = [a % x.rank for a in node.attr("axes", [0, 2, 3])]
    node.require(all(-x.rank <= a < x.rank for a in node.attr("axes", [0, 2, 3])) and
                 len(set(axes)) == len(axes),
                 f"attribute 'axes' = {node.attr('axes')} does not fit an input of rank "
                 f"{x.rank}")
    mean = node.call("mean", x, axes=axes, keepdims=True)
    centred = node.call("subtract", x, mean)
    variance = node.call("mean", node.call("multiply", centred, centred), axes=axes,
                         keepdims=True)
    return node.call("divide", centred, node.call("sqrt", node.call("add", variance, 1e-9)))
