"""What every tensor of a TOSA 1.0 module obeys under profile pro_fp, level 8K.

The specification allows ranks 0 to MAX_RANK (6 at level 8K), needs every dimension to be
at least 1 (there are no empty tensors), and pro_fp knows only these element types. The
legality checks (rules.py) refuse calls that break them, so legalization reports them, and
the emitter refuses to print a tensor that breaks them, so no invalid module is written.
"""
from __future__ import annotations

import functools

import numpy as np
from legato.plugin_api import Const, TensorType

from .narrowing import tosa_dtype

MAX_RANK = 6
MAX_BYTES = (1 << 31) - 1     # MAX_LOG2_SIZE 31: bytes of one tensor
MAX_KERNEL = MAX_STRIDE = 8192  # window extent (dilated), padding; stride
MAX_TENSOR_LIST = 64          # operands of one CONCAT or CUSTOM
# int64: printed as int32 (narrowing.py)
TOSA_DTYPES = ("float32", "float16", "int32", "int16", "int8", "bool", "int64")
CUSTOM_DTYPES = TOSA_DTYPES
# pro_int: uint8 too, as the i8 bits RESCALE reads unsigned and data movement moves
INT_DTYPES = TOSA_DTYPES + ("uint8",)


def shape_problem(t: TensorType) -> str | None:
    """Why a tensor of this shape is not a TOSA 1.0 tensor, or None."""
    if t.rank > MAX_RANK:
        return f"{t} has rank {t.rank} (TOSA 1.0 level 8K allows rank 0 to {MAX_RANK})"
    if any(d < 1 for d in t.shape):
        return f"{t} is empty (TOSA 1.0 tensors need every dim >= 1)"
    return None


def type_problem(t: TensorType, dtypes=TOSA_DTYPES) -> str | None:
    """Why this tensor type cannot appear in a TOSA 1.0 pro_fp module, or None."""
    if t.dtype not in dtypes:
        profile = "pro_int" if "uint8" in dtypes else "pro_fp"
        return f"{t} has element type {t.dtype} (not a TOSA 1.0 {profile} type)"
    problem = shape_problem(t)
    if problem is None and t.size * np.dtype(tosa_dtype(t.dtype)).itemsize > MAX_BYTES:
        problem = f"{t} holds more than {MAX_BYTES} bytes (TOSA 1.0 level 8K)"
    return problem


def window_problem(kernel, strides, padding) -> str | None:
    """Level 8K's limits on a window: `kernel` already multiplied by the dilation."""
    if max(kernel) > MAX_KERNEL or max(padding) > MAX_KERNEL:
        return f"kernel {list(kernel)}, padding {list(padding)} (TOSA 1.0 level 8K allows " \
               f"at most {MAX_KERNEL})"
    if max(strides) > MAX_STRIDE:
        return f"strides {list(strides)} (TOSA 1.0 level 8K allows at most {MAX_STRIDE})"
    return None


def _tensors(call):
    return [v.type for v in call.inputs if v is not None] + [v.type for v in call.outputs]


def call_problem(call, problem_of=type_problem) -> str | None:
    """The first operand or result of `call` that no TOSA operator takes, or None."""
    return next(filter(None, map(problem_of, _tensors(call))), None)


def value_problem(value) -> str | None:
    """Why a value cannot be an operand or result of a tosa.custom, or None."""
    return type_problem(value.type, CUSTOM_DTYPES)


def custom_problem(call) -> str | None:
    """Why `call` cannot be tunnelled as one tosa.custom (its tensors are the operands)."""
    inputs = [v for v in call.inputs if v is not None]
    if len(inputs) > MAX_TENSOR_LIST:
        return f"{len(inputs)} operands (TOSA CUSTOM takes at most {MAX_TENSOR_LIST})"
    return next(filter(None, map(value_problem, inputs + list(call.outputs))), None)


def checked(check=None, name: str | None = None, dtypes=TOSA_DTYPES):
    """A legality check `check(call)` that first applies the limits on every tensor (of
    `dtypes`); it goes by `name` (default: the check's) in legalization reports."""
    problem_of = type_problem if dtypes is TOSA_DTYPES else \
        functools.partial(type_problem, dtypes=dtypes)

    def with_limits(call):
        return call_problem(call, problem_of) or (check(call) if check is not None else None)
    if check is not None:
        functools.update_wrapper(with_limits, check)
    if name is not None:
        with_limits.__name__ = with_limits.__qualname__ = name
    return with_limits


def shaped_rule(rule):
    """A lowering rule that declines calls with a tensor no TOSA shape can hold: no rewrite
    makes an empty or rank-7 operand or result valid, and declining reports why. Empty
    tensors are first taken out where that loses nothing (`without_empty`)."""
    @functools.wraps(rule)
    def declining(b, call):
        found = without_empty(b, call)
        if found is not None:
            return found
        return None if call_problem(call, shape_problem) is not None else rule(b, call)
    return declining


def _empty(t: TensorType) -> bool:
    return t.rank <= MAX_RANK and any(d == 0 for d in t.shape)


def without_empty(b, call):
    """What replaces a call with empty tensors that need not be computed, or None: empty
    results are constants (they hold no data), a concat drops its empty operands. So a
    model that slices nothing off and concatenates it (a rotary embedding over the whole
    head keeps an empty pass-through part) lowers; an empty function result still cannot.
    Empty parameters are left for the checks to report where they are first used."""
    if any(_empty(v.type) and not isinstance(v, Const) for v in call.inputs if v is not None):
        return None
    if call.outputs and all(_empty(o.type) for o in call.outputs):
        consts = tuple(b.const(np.zeros(o.shape, o.dtype)) for o in call.outputs)
        return consts if len(consts) > 1 else consts[0]
    if call.op == "concat" and any(_empty(v.type) for v in call.inputs):
        kept = [v for v in call.inputs if not _empty(v.type)]
        return kept[0] if len(kept) == 1 else b.concat(*kept, axis=call.attrs["axis"])
    return None
