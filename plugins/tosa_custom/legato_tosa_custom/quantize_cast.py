"""qnn.quantize (ONNX QuantizeLinear) at a model's float -> int boundary in pro_fp+pro_int:
`x / scale`, CLAMPed to the integers the zero point leaves room for, one CAST to int16
(TOSA 1.0 rounds a float to the nearest integer, ties to even: the spec's main inference
rounding, numpy's rint, checked on the reference model), and a RESCALE by 1 that adds the
zero point (and writes uint8 unsigned); an int8 result with zero point 0 is the CAST
itself. The decomposition's rounding emulation (FLOOR,
compares and SELECTs for round half to even, then another FLOOR/CEIL to truncate for
legato's cast) is four operators instead.

Clamping before rounding is clamping after: the bounds `qmin - zero_point` and `qmax -
zero_point` are integers and rounding is monotonic. A NaN has no integer (TOSA leaves its
CAST undefined; legato's cast gives 0).
"""
from __future__ import annotations

import numpy as np
from legato.plugin_api import Const

from .quantized import one_zero_point, rounded


def quantize(b, call):
    """qnn.quantize of float32 data with constant parameters, one zero point (per tensor,
    or per axis but equal: RESCALE's zero point is a scalar); declines the others, whose
    decomposition runs."""
    x, scale, zero = call.inputs
    dtype = call.attrs["dtype"]
    if x.dtype != "float32" or not isinstance(scale, Const) or not isinstance(zero, Const):
        return None
    zp = one_zero_point(np.asarray(zero.data))
    if zp is None:
        return None
    s = np.asarray(scale.data, np.float32)
    if s.size > 1:  # along the axis, broadcast against x
        shape = [1] * x.rank
        shape[call.attrs["axis"] % x.rank] = s.size
        s = s.reshape(shape)
    elif x.rank == 0:
        s = s.reshape(())
    return rounded(b, b.divide(x, b.const(s)), zp, dtype)


RULES = {"qnn.quantize": quantize}
