"""The core registry and the helpers op files use to define ops and infer types."""
from __future__ import annotations

from typing import Callable, Sequence

from ..errors import ShapeError
from ..ir import TensorType
from ..registry import OpDef, Registry

REGISTRY = Registry()


def primitive(name: str, inputs: str, infer: Callable, kind: str, attrs: dict | None = None,
              registry: Registry = REGISTRY, doc: str = "") -> OpDef:
    """Register a level-0 op (no decomposition)."""
    return registry.register(OpDef(name, inputs, attrs or {}, infer, kind, 0, doc=doc))


def composite(name: str, inputs: str, infer: Callable, kind: str, level: int,
              examples: Sequence, attrs: dict | None = None, registry: Registry = REGISTRY):
    """Decorator: register an op of `level` > 0 whose decomposition is the decorated function."""
    def register(decompose: Callable) -> Callable:
        registry.register(OpDef(name, inputs, attrs or {}, infer, kind, level, decompose,
                                examples))
        return decompose
    return register


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


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            fail(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes, rank: int) -> tuple[int, ...]:
    """Normalize reduction axes: None is every axis; negative counts from the end."""
    if axes is None:
        return tuple(range(rank))
    out = tuple(norm_axis(a, rank, "axis") for a in axes)
    if len(set(out)) != len(out):
        fail(f"axes {list(axes)} repeat an axis")
    return tuple(sorted(out))


def reduced_shape(shape, axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


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
