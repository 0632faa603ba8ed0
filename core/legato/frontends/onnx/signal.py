"""ONNX converters for Fourier transforms: DFT and STFT onto signal.dft, whose layout of
complex values, a trailing (real, imag) axis, is ONNX's own."""
from __future__ import annotations

import numpy as np

from ...ir import Const
from .convert import converter


@converter("DFT", const_inputs=(1, 2))
def dft(node):
    """DFT-17 takes the axis as an attribute (default 1), DFT-20 as input 2 (default -2);
    `dft_length` is input 1 in both."""
    length = node.scalar(1)
    axis = node.attr("axis", 1) if node.opset < 20 else node.scalar(2, -2)
    node.require(isinstance(axis, int) and (length is None or isinstance(length, int)),
                 f"axis {axis!r} and dft_length {length!r} must be integers")
    return node.call("signal.dft", node.arg(0), axis=axis, inverse=node.flag("inverse", 0),
                     onesided=node.flag("onesided", 0), length=length)


@converter("STFT", const_inputs=(1, 3))
def stft(node):
    """Frames gathered by constant indices, windowed, then a DFT of each frame."""
    signal = node.arg(0)
    node.require(signal.rank == 3 and signal.shape[-1] in (1, 2),
                 f"signal {signal.type} must be (batch, length, 1 or 2)")
    step, window = node.scalar(1), node.input(2)
    size = signal.shape[1]
    length = node.scalar(3, size if window is None else window.shape[0])
    node.require(isinstance(step, int) and isinstance(length, int) and step >= 1 and
                 1 <= length <= size, f"frame_step {step!r} and frame_length {length!r} do "
                                      f"not fit a signal of {size} samples")
    node.require(window is None or window.shape == (length,),
                 f"window {None if window is None else window.type} must hold {length} values")
    onesided = node.flag("onesided", 1)
    node.require(not (onesided and signal.shape[-1] == 2), "onesided needs a real signal")
    frames = (size - length) // step + 1
    node.budget(frames * length, "the STFT frame indices")
    index = Const.of(np.arange(frames).reshape(-1, 1) * step + np.arange(length))
    framed = node.call("take", signal, index, axis=1)        # (batch, frames, length, parts)
    if window is not None:
        framed = node.call("multiply", framed, node.call("expand_dims", window, axes=[1]))
    return node.call("signal.dft", framed, axis=2, onesided=onesided)
