"""The core registry and the helpers op files use to define ops and infer types."""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Sequence

import numpy as np

from ..ir import TensorType
from ..ir.errors import ShapeError
from ..ir.shapes import broadcast_shapes, norm_axes, norm_axis, reduced_shape
from .registry import OpDef, Registry

# The shape helpers live in legato.shapes; op files keep importing them from here.
__all__ = ["REGISTRY", "T", "broadcast_shapes", "composite", "f32", "fail", "float_unary_infer",
           "is_float", "norm_axes", "norm_axis", "primitive", "reduced_shape", "require_float",
           "same_dtype", "unary_infer"]

REGISTRY = Registry()


def primitive(name: str, inputs: str, infer: Callable, kind: str, attrs: dict | None = None,
              registry: Registry = REGISTRY, doc: str = "", **facts) -> OpDef:
    """Register a level-0 op (no decomposition). `facts` are OpDef's keyword-only
    arguments: onnx, aten, tolerance, layout_rule, samples."""
    return registry.register(OpDef(name, inputs, attrs or {}, infer, kind, 0, doc=doc,
                                   **facts))


def composite(name: str, inputs: str, infer: Callable, kind: str, level: int,
              examples: Sequence, attrs: dict | None = None, registry: Registry = REGISTRY,
              doc: str = "", **facts):
    """Decorator: register an op of `level` > 0 whose decomposition is the decorated function
    (its docstring's first line is the op's doc unless `doc` is given).

    Inside `registry.deferred()` the decomposition is checked when the block ends, so op
    modules need no import order. When every result of a call is empty, the registered decomposition emits
    empty constants instead: any empty array of the inferred type is the right answer, and
    the decomposition's own arithmetic (a max or a mean over an empty axis, a reshape with
    -1 of an empty tensor) may be undefined there."""
    def register(decompose: Callable) -> Callable:
        registry.register(OpDef(name, inputs, attrs or {}, infer, kind, level,
                                _empty_results_first(decompose, infer), examples,
                                doc=doc or inspect.getdoc(decompose) or "", **facts))
        return decompose
    return register


def _empty_results_first(decompose: Callable, infer: Callable) -> Callable:
    @functools.wraps(decompose)
    def definition(b, *inputs, **attrs):
        types = infer([None if v is None else v.type for v in inputs], attrs)
        types = types if isinstance(types, tuple) else (types,)
        if all(t.size == 0 for t in types):
            empties = tuple(_empty_const(b, t) for t in types)
            if None not in empties:
                return empties if len(empties) > 1 else empties[0]
        return decompose(b, *inputs, **attrs)
    return definition


def _empty_const(b, t: TensorType):
    try:
        if t.dtype == "bfloat16":
            import ml_dtypes  # noqa: F401  (registers the dtype with numpy)
        return b.const(np.zeros(t.shape, dtype=t.dtype))
    except (ImportError, TypeError):
        return None  # no numpy dtype for it: the decomposition itself must cope


def T(dtype: str, *shape: int) -> TensorType:
    return TensorType(tuple(shape), dtype)


def f32(*shape: int) -> TensorType:
    return TensorType(tuple(shape), "float32")


# --- inference helpers ------------------------------------------------------------------

def fail(message: str):
    raise ShapeError(message)


def same_dtype(types: Sequence[TensorType], what: str = "inputs") -> str:
    dtypes = {t.dtype for t in types if t is not None}
    if len(dtypes) > 1:
        fail(f"{what} must share one dtype, got {', '.join(sorted(dtypes))}")
    return next(iter(dtypes))


def is_float(dtype: str) -> bool:
    return dtype in ("float64", "float32", "float16", "bfloat16")


def require_float(t: TensorType, what: str = "input"):
    if not is_float(t.dtype):
        fail(f"{what} must be a float tensor, got {t.dtype}")


def unary_infer(types, attrs):
    return types[0]


def float_unary_infer(types, attrs):
    require_float(types[0])
    return types[0]
