"""Pads a convolution does itself.

Exporters write `Pad` before `Conv` (TensorFlow-style "same" padding, MobileNet's strided
convolutions): a separate pass over the whole tensor that a convolution would do for free
in its own padding. A constant pad on the spatial dims only, of the value the convolution
pads with (0; the data's zero point for qnn.conv2d), read by nothing but the convolution,
becomes that convolution's padding; a pad of nothing at all is dropped. onnxruntime folds
the same pairs.
"""
from __future__ import annotations

from collections import Counter

from ..ir import Attrs, Call, Const, Function
from .manager import FunctionPass

CONVS = ("nn.conv2d", "qnn.conv2d")


class FoldPadsPass(FunctionPass):
    """Fold pads into the convolutions that read them; drop empty pads."""

    name = "fold-pads"

    def run_function(self, name: str, fn: Function, module) -> tuple[Function, bool]:
        if not any(c.op == "pad" for c in fn.calls):
            return fn, False
        readers = Counter(v for c in fn.calls for v in c.inputs if v is not None)
        readers.update(fn.results)
        pads = {c.output: c for c in fn.calls if c.op == "pad"}
        folded = {id(pads[c.inputs[0]]) for c in fn.calls if c.op in CONVS
                  and c.inputs[0] in pads and readers[c.inputs[0]] == 1
                  and _spatial_pads(pads[c.inputs[0]], c) is not None}
        remap: dict = {}
        calls = []
        for call in fn.calls:
            if id(call) in folded:
                continue
            inputs = tuple(None if v is None else remap.get(v, v) for v in call.inputs)
            if call.op == "pad" and not any(call.attrs["pads"]) and \
                    call.output not in fn.results:
                remap[call.output] = inputs[0]
                continue
            if call.op in CONVS and call.inputs[0] in pads and \
                    id(pads[call.inputs[0]]) in folded:
                pad = pads[call.inputs[0]]
                padding = [a + b for a, b in zip(call.attrs["padding"],
                                                  _spatial_pads(pad, call))]
                inputs = (remap.get(pad.inputs[0], pad.inputs[0]),) + inputs[1:]
                call = Call(call.op, inputs, Attrs({**call.attrs, "padding": padding}),
                            call.outputs, call.origin)
            elif inputs != call.inputs:
                call = Call(call.op, inputs, call.attrs, call.outputs, call.origin)
            calls.append(call)
        if len(calls) == len(fn.calls):
            return fn, False
        return Function(fn.params, tuple(calls), fn.results, fn.kind, fn.attrs), True


def _spatial_pads(pad: Call, conv: Call) -> list[int] | None:
    """[top, left, bottom, right] of `pad` when the convolution can do it: constant mode,
    the convolution's own padding value, nothing on the batch and channel dims."""
    if pad.attrs["mode"] != "constant" or pad.inputs[0].rank != 4:
        return None
    if pad.attrs["value"] != _padding_value(conv):
        return None
    layout = conv.attrs["data_layout"]
    h, w = layout.index("H"), layout.index("W")
    pads = list(pad.attrs["pads"])
    if any(pads[axis] or pads[4 + axis] for axis in range(4) if axis not in (h, w)):
        return None
    return [pads[h], pads[w], pads[4 + h], pads[4 + w]]


def _padding_value(conv: Call) -> float | None:
    """What the convolution pads its data with: 0, or for qnn.conv2d the data's zero point
    (a constant scalar; None when it is not one)."""
    if conv.op == "nn.conv2d":
        return 0.0
    zero = conv.inputs[2]
    if isinstance(zero, Const) and zero.data.size == 1:
        return float(zero.data.reshape(-1)[0])
    return None
