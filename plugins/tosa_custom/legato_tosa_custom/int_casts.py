"""legato's cast in profile pro_int: integer CASTs natively, uint8 at the boundary.

pro_int has CAST between int8, int16 and int32 (narrowing keeps the low bits, as legato's
cast wraps around: checked on the TOSA reference model) and between those and bool. uint8
tensors are i8 bits (narrowing.py), so uint8 <-> int8 prints nothing, and other casts of
uint8 go through int32 by a RESCALE by 1 (input_unsigned), or, to uint8, take the low 8
bits (BITWISE_AND 255) and RESCALE them out unsigned. Float sides (dequantize, quantize at
the boundaries of a quantized model) use pro_fp's CASTs and the float rules (rules.cast).
"""
from __future__ import annotations

import numpy as np
from legato.plugin_api import make_call

from .limits import INT_DTYPES, checked, shaped_rule
from .narrowing import tosa_dtype
from .quantized import rescale
from .rules import PRO_FP_CASTS
from . import rules

INTS = ("int8", "int16", "int32", "int64")
INT_CASTS = {(s, d) for s in INTS + ("bool",) for d in INTS + ("bool",) if s != d}


def _int_cast_problem(call):
    src, dst = call.inputs[0].dtype, call.attrs["dtype"]
    if src != dst and tosa_dtype(src) == tosa_dtype(dst):
        return None  # int64 <-> int32, uint8 <-> int8: the same bits, nothing printed
    if (src, dst) in INT_CASTS:
        return None
    if "uint8" in (src, dst):  # its i8 bits would be read signed
        return f"{src} to {dst} (uint8 goes through int32 by a RESCALE)"
    if (tosa_dtype(src), tosa_dtype(dst)) in PRO_FP_CASTS and dst.startswith("float"):
        return None
    return f"{src} to {dst} (pro_int CASTs integers and bools; float to int rounds, " \
           "uint8 goes through a RESCALE)"


int_cast_supported = checked(_int_cast_problem, "int_cast_supported", INT_DTYPES)


def _to_int32(b, x):
    """x as int32: floats by pro_fp's rule (truncation; the cast it would make here is
    this rule's own op), integers and bools by CAST."""
    if x.dtype.startswith("float"):
        return rules.cast(b, make_call(b.registry, "cast", [x], {"dtype": "int32"}))
    return b.cast(x, dtype="int32")


@shaped_rule
def int_cast(b, call):
    """uint8 sides through int32 (RESCALE); the other casts as pro_fp's rule makes them
    (float to integer: truncated, then to the integer type)."""
    x, dst = call.inputs[0], call.attrs["dtype"]
    if x.dtype == "uint8":
        wide = rescale(b, x, 1.0, 0, 0, "int32")
        return wide if dst == "int32" else b.cast(wide, dtype=dst)
    if dst == "uint8":
        wide = x if x.dtype == "int32" else _to_int32(b, x)
        low = b.bitwise_and(wide, rules.splat(b, wide, 255, np.int32))  # legato wraps
        return rescale(b, low, 1.0, 0, 0, "uint8")
    if (x.dtype, dst) in INT_CASTS:
        return None
    return rules.cast(b, call)
