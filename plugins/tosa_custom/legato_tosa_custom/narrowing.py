"""int64 in TOSA 1.0: narrowed to int32.

TOSA 1.0 has no int64 tensors, yet exported models carry int64 token ids, position ids,
masks, shape tensors and gather indices. tosa_custom treats an int64 tensor as an int32
one: legalization accepts int64 wherever int32 is taken, and the emitter prints every
int64 tensor type as i32. So

- an int64 constant is printed as an i32 `tosa.const`, after checking that every value
  fits int32 (otherwise a LegalizationError names the constant and the value);
- an int64 function parameter or result is an i32 one in the artifact's signature, marked
  `{legato.dtype = "int64"}` (arg_attrs / res_attrs): the caller passes int32 arrays
  (`narrow_inputs` converts and checks) and reads int32 results (`widen_results`);
- an int64 <-> int32 cast is no operation at all.

uint8 (profile pro_int) is printed as i8 the same way, its bits unchanged: TOSA 1.0 has no
unsigned tensor type, RESCALE reads and writes them as input_unsigned / output_unsigned,
and data movement moves the bits. Parameters and results are marked `"uint8"`; the caller
passes and reads the same bytes viewed as int8.

Integer ops that pro_fp has no integer form for (compares, select, data movement,
reductions) run on float32 copies of the values (integers.py), which hold integers
exactly up to 2**24 in magnitude: the range ids, positions, masks and shapes live in.
"""
from __future__ import annotations

import re

import numpy as np
from legato.plugin_api import LegalizationError, TensorType, clip

NARROWED = {"int64": "int32", "uint8": "int8"}
VIEWED = {"uint8": "int8"}  # the same bits as the other type (no values change)
# the attribute the emitter puts on a narrowed parameter or result of a function
SIGNATURE_ATTR = "legato.dtype"
INT32 = np.iinfo(np.int32)
# float32 holds every integer up to this magnitude exactly
FLOAT_EXACT = 2 ** 24


def tosa_dtype(dtype: str) -> str:
    """The element type a tensor of `dtype` has in the emitted module."""
    return NARROWED.get(dtype, dtype)


def tosa_type(t: TensorType) -> TensorType:
    return TensorType(t.shape, NARROWED[t.dtype]) if t.dtype in NARROWED else t


def _first_outside(array: np.ndarray, low: int, high: int):
    """(index, value) of the first element outside [low, high], or None."""
    outside = (array < low) | (array > high)
    if not outside.any():
        return None
    index = np.unravel_index(int(np.argmax(outside)), array.shape)
    return [int(i) for i in index], int(array[index])


def narrow_array(array: np.ndarray, what: str) -> np.ndarray:
    """An int64 array as the int32 array the module holds; LegalizationError naming `what`
    and the first value outside int32. Other arrays are returned as they are."""
    array = np.asarray(array)
    if array.dtype.name in VIEWED:
        return array.view(VIEWED[array.dtype.name])
    if array.dtype.name not in NARROWED:
        return array
    found = _first_outside(array, INT32.min, INT32.max)
    if found is not None:
        index, value = found
        raise LegalizationError(
            f"tosa_custom: {what} holds {value} at index {index}, outside int32 "
            f"[{INT32.min}, {INT32.max}]; TOSA 1.0 has no int64, so tosa_custom narrows "
            "int64 tensors to int32 and needs their values to fit")
    return array.astype(NARROWED[array.dtype.name])


def float_exact(array: np.ndarray, what: str) -> np.ndarray:
    """Integer constant data as float32 for an op pro_fp computes on floats only;
    LegalizationError if a value is beyond 2**24, where float32 would round it."""
    found = _first_outside(np.asarray(array), -FLOAT_EXACT, FLOAT_EXACT)
    if found is not None:
        index, value = found
        raise LegalizationError(
            f"tosa_custom: {what} holds {value} at index {index}; pro_fp has this op for "
            f"floats only, and float32 holds integers exactly up to 2**24 = {FLOAT_EXACT}")
    return np.asarray(array).astype(np.float32)


def narrow_inputs(arrays) -> list[np.ndarray]:
    """The arrays a caller passes to an emitted function: int64 ones as int32 (checked),
    uint8 ones viewed as int8."""
    return [narrow_array(np.asarray(a), f"input {i} ({clip(str(np.shape(a)), 40)} int64)")
            for i, a in enumerate(arrays)]


def signature_attrs(values) -> str | None:
    """func.func's arg_attrs / res_attrs marking the narrowed values, or None if none is."""
    if not any(v.dtype in NARROWED for v in values):
        return None
    return "[" + ", ".join(f'{{{SIGNATURE_ATTR} = "{v.dtype}"}}' if v.dtype in NARROWED
                           else "{}" for v in values) + "]"


_MAIN = re.compile(r'^\s*"func\.func"\(\) <\{(?P<props>.*sym_name = "main")\}>', re.M)
_RES_ATTRS = re.compile(r'res_attrs = \[(?P<items>[^\]]*)\]')
_ITEM = re.compile(r'\{([^}]*)\}')
_DTYPE = re.compile(re.escape(SIGNATURE_ATTR) + r' = "(\w+)"')


def result_dtypes(text: str) -> list[str | None]:
    """Per result of an emitted module's main: the dtype it was narrowed from, or None."""
    main = _MAIN.search(text)
    attrs = _RES_ATTRS.search(main["props"]) if main else None
    if attrs is None:
        return []
    return [(_DTYPE.search(item) or [None, None])[1] for item in _ITEM.findall(attrs["items"])]


def _widen(out, dtype: str) -> np.ndarray:
    out = np.asarray(out)
    return out.view(dtype) if dtype in VIEWED else out.astype(dtype)


def widen_results(text: str, outputs) -> list[np.ndarray]:
    """Results of running an emitted module, the narrowed ones as the dtype they stand for."""
    dtypes = result_dtypes(text)
    return [_widen(out, dtype) if dtype else out
            for out, dtype in zip(outputs, dtypes + [None] * (len(outputs) - len(dtypes)))]
