"""ATen's bit shifts (`x << s`, `x >> s`, bitwise_left/right_shift) on integer tensors, as
integer arithmetic (shifts.shift): torch shifts in the operands' promoted dtype, and a
count outside [0, bits) gives 0, or -1 for a negative value shifted right. They register
in ops.ATEN."""
from __future__ import annotations

from ...ir.errors import LegatoError
from ..common import shifts
from .ops import _in_dtype, aten, result_dtype


def _shift(left: bool):
    def convert(b, x, amount):
        dtype = result_dtype([x, amount])
        if dtype is None or dtype == "bool" or dtype.startswith(("float", "bfloat")):
            raise LegatoError(f"bit shifts need integer operands, got {dtype} (torch "
                              "refuses them)")
        return shifts.shift(b, _in_dtype(b, x, dtype), _in_dtype(b, amount, dtype), left)
    return convert


def _names(packet: str, operator: str) -> list[str]:
    return [*(f"aten.{packet}.{overload}" for overload in ("Tensor", "Tensor_Scalar",
                                                           "Scalar_Tensor")),
            f"aten.{operator}.Tensor", f"aten.{operator}.Scalar"]


aten(*_names("bitwise_left_shift", "__lshift__"))(_shift(True))
aten(*_names("bitwise_right_shift", "__rshift__"))(_shift(False))
