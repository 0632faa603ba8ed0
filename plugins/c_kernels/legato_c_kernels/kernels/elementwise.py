"""Elementwise kernels (csrc/elementwise.c): one kernel per op the C library lists.

The C library names its unary and binary ops (``lgk_unary_name``/``lgk_binary_name``):
a legato op name, or ``op:attribute=value`` for the variant of an op computed for that
attribute value (``nn.gelu:approximate=tanh``). The kernels here are built from those
lists at import, so an op added to the C tables is a kernel without any Python change.
An op with variants takes the attribute as a keyword (default: the op's default in the
core registry) and picks the variant by its value, as ``str(value)``.

Integer tensors: the arithmetic ops numpy computes with the same wrap-around as the op
definitions (add, subtract, multiply, maximum, minimum, negative, abs) also take integer
inputs (int8 to int64, uint8), as numpy ufuncs bound once to the planned buffers (a position-id or mask
computation is a chain of such steps on a few dozen elements, where the cost of a step is
its dispatch).

Also the strided copy: ``permute_dims``.
"""
from __future__ import annotations

import builtins
import functools
import inspect
import keyword
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from .._lib import ffi, lib
from .common import (MAX_NDIM, OUT, Array, CCall, Unbindable, bound, broadcast_shape, dense,
                     detach, error, estrides, extent, f32, i64, norm_axis, num_threads, out_array,
                     ptr, run_call, strided)


def python_name(op: str) -> str:
    """The function name of an op's kernel: dots become underscores, and a name that
    would shadow a builtin or a keyword gets a trailing underscore (``abs_``)."""
    name = op.replace(".", "_")
    return name + "_" if hasattr(builtins, name) or keyword.iskeyword(name) else name


def _listed(count: Callable[[], int], name_of: Callable[[int], Any]) -> dict[str, int]:
    return {ffi.string(name_of(code)).decode(): code for code in range(count())}


def split_variant(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """'nn.gelu:approximate=tanh' -> ('nn.gelu', (('approximate', 'tanh'),))."""
    op, _, spec = name.partition(":")
    pairs = tuple(tuple(item.split("=", 1)) for item in spec.split(",") if item)
    if any(len(pair) != 2 for pair in pairs):
        raise ImportError(f"c_kernels: malformed op variant name {name!r} in the C library")
    return op, pairs


def _by_op(table: dict[str, int]) -> dict[str, dict[tuple, int]]:
    """op -> {variant (attribute, value) pairs: code}."""
    ops: dict[str, dict[tuple, int]] = {}
    for name, code in table.items():
        op, pairs = split_variant(name)
        ops.setdefault(op, {})[pairs] = code
    return ops


UNARY_CODES: dict[str, int] = _listed(lib.lgk_unary_count, lib.lgk_unary_name)
BINARY_CODES: dict[str, int] = _listed(lib.lgk_binary_count, lib.lgk_binary_name)
_UNARY_OPS, _BINARY_OPS = _by_op(UNARY_CODES), _by_op(BINARY_CODES)


def variant_name(op: str, attrs: Any) -> Optional[str]:
    """The C library's name of what ``op`` computes with these attributes (an op
    without variants: the op itself); None when it lists no such unary op."""
    variants = _UNARY_OPS.get(op)
    if variants is None:
        return None
    for pairs in variants:
        if all(str(attrs.get(key)) == value for key, value in pairs):
            return op + (":" + ",".join(f"{k}={v}" for k, v in pairs) if pairs else "")
    return None


# ---------------------------------------------------------------------------------
# unary and binary


def _broadcast_strides(x: Array, shape: tuple[int, ...]) -> list[int]:
    """Element strides of x viewed in the broadcast shape (0 on broadcast dims)."""
    lead = len(shape) - x.ndim
    return [0] * lead + [0 if d == 1 else s for d, s in zip(x.shape, estrides(x))]


_UNIT_STRIDE = ffi.new("int64_t[1]", [1])


def _plan_binary(op: str, code: int, a: Any, b: Any, out: Optional[Array],
                 strict: bool) -> tuple[Array, Optional[CCall]]:
    a, b = f32(op, "a", a), f32(op, "b", b)
    shape = a.shape if a.shape == b.shape else broadcast_shape(op, a.shape, b.shape)
    if len(shape) > MAX_NDIM:
        raise error(op, f"rank {len(shape)} exceeds the supported maximum of {MAX_NDIM}")
    out = out_array(op, out, shape)
    if out.size == 0:
        return out, None
    a = strided(detach(a, out, True, strict), strict)
    b = strided(detach(b, out, True, strict), strict)
    if a.shape == b.shape and a.flags.c_contiguous and b.flags.c_contiguous:
        # the common case: one flat unit-stride loop
        ndim, dims, sa, sb = 1, i64([out.size]), _UNIT_STRIDE, _UNIT_STRIDE
    else:
        ndim, dims = len(shape), i64(shape)
        sa, sb = i64(_broadcast_strides(a, shape)), i64(_broadcast_strides(b, shape))
    return out, CCall(op, lib.lgk_binary, (code, ndim, dims, ptr(a), extent(a), sa, ptr(b),
                                           extent(b), sb, ptr(out), out.size, num_threads()),
                      (a, b),
                      ((0, 3), (1, 6), (OUT, 9)))


def _plan_unary(op: str, code: int, x: Any, out: Optional[Array],
                strict: bool) -> tuple[Array, Optional[CCall]]:
    x = f32(op, "data", x)
    out = out_array(op, out, x.shape)
    if out.size == 0:
        return out, None
    x = dense(detach(x, out, True, strict), strict)
    return out, CCall(op, lib.lgk_unary, (code, x.size, ptr(x), ptr(out), num_threads()), (),
                      ((0, 2), (OUT, 3)))


def _code(op: str, variants: dict[tuple, int], attrs: dict) -> int:
    """The code of the variant the attributes select."""
    for pairs, code in variants.items():
        if all(str(attrs[key]) == value for key, value in pairs):
            return code
    choices = [", ".join(f"{k}={v}" for k, v in pairs) for pairs in variants]
    raise error(op, f"no C kernel for {attrs}; it has {choices}")


def _attr_defaults(op: str, names: list[str]) -> dict[str, Any]:
    """Defaults of a variant op's attributes, from the core's op definition (an
    attribute without one must be given)."""
    from legato.plugin_api import REQUIRED, default_registry
    registry = default_registry()
    if op not in registry:
        return {}
    specs = registry.get(op).attr_specs
    return {name: specs[name].default for name in names
            if name in specs and specs[name].default is not REQUIRED}


def _make(op: str, variants: dict[tuple, int], arity: int) -> Callable[..., Array]:
    """The kernel of one C op: unary (data) or binary (a, b), attributes selecting a
    variant as keywords, and ``out=``."""
    names = sorted({key for pairs in variants for key, _ in pairs})
    defaults = _attr_defaults(op, names)
    plan_one = _plan_unary if arity == 1 else _plan_binary

    def plan(*inputs: Any, out: Optional[Array] = None, strict: bool = False,
             **attrs: Any) -> tuple[Array, Optional[CCall]]:
        if len(inputs) != arity:
            raise error(op, f"takes {arity} inputs, got {len(inputs)}")
        unknown = set(attrs) - set(names)
        if unknown:
            raise error(op, f"unknown attribute {sorted(unknown)[0]!r}; attributes: {names}")
        code = _code(op, variants, {**defaults, **attrs}) if names else variants[()]
        return plan_one(op, code, *inputs, out, strict)

    def kernel(*inputs: Any, out: Optional[Array] = None, **attrs: Any) -> Array:
        return run_call(*plan(*inputs, out=out, **attrs))

    params = [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for p in (("data",) if arity == 1 else ("a", "b"))]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY,
                                 default=defaults.get(n, inspect.Parameter.empty))
               for n in names]
    params.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None))
    kernel.__signature__ = inspect.Signature(params)
    kernel.__name__ = kernel.__qualname__ = python_name(op)
    kernel.__doc__ = (f"{op}(data), elementwise (float32)." if arity == 1 else
                      f"{op}(a, b) with numpy broadcasting (float32).")
    return bound(kernel, plan)


# ---------------------------------------------------------------------------------
# integers


# ops whose numpy ufunc computes the op definition on integers (wrap-around included)
INTEGER_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply,
    "maximum": np.maximum, "minimum": np.minimum, "negative": np.negative, "abs": np.absolute,
}
INTEGER_DTYPES = frozenset({"int64", "int32", "int16", "int8", "uint8"})
_INTEGER_NP = frozenset(map(np.dtype, INTEGER_DTYPES))  # (a dtype's str costs several us)


def _integer_operands(op: str, inputs: tuple, out: Optional[Array]) -> Optional[Array]:
    """None for float32 operands (the C kernel's); else the checked result array of
    integer operands of one dtype (a fresh one without `out`)."""
    dtypes = {getattr(x, "dtype", None) for x in inputs}
    if len(dtypes) == 1 and next(iter(dtypes)) not in _INTEGER_NP:
        return None
    if len(dtypes) != 1 or not all(isinstance(x, np.ndarray) for x in inputs):
        raise error(op, "inputs must be ndarrays of one dtype (float32 or an integer dtype), got "
                        + ", ".join(str(getattr(x, "dtype", type(x).__name__)) for x in inputs))
    shape = broadcast_shape(op, *(x.shape for x in inputs))
    dtype = inputs[0].dtype
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype:
        raise error(op, f"out must be a {dtype} array of shape {shape}, got "
                        f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
    return out


def _with_integers(op: str, kernel: Callable[..., Array]) -> Callable[..., Array]:
    """The float32 kernel, extended to integer operands by the op's numpy ufunc."""
    ufunc = INTEGER_UFUNCS.get(op)
    if ufunc is None:
        return kernel
    float_kernel, float_bind = kernel, kernel.bind

    def dispatch(*inputs: Any, out: Optional[Array] = None, **attrs: Any) -> Array:
        result = _integer_operands(op, inputs, out)
        if result is None:
            return float_kernel(*inputs, out=out, **attrs)
        return ufunc(*inputs, out=result)

    def bind(*inputs: Any, out: Array, **attrs: Any) -> Callable[[], None]:
        if _integer_operands(op, inputs, out) is None:
            return float_bind(*inputs, out=out, **attrs)
        if ufunc in (np.maximum, np.minimum):  # numpy deprecates their positional out
            return functools.partial(ufunc, *inputs, out=out)
        return functools.partial(ufunc, *inputs, out)  # positional out: the cheapest call

    functools.update_wrapper(dispatch, float_kernel)
    dispatch.__signature__ = float_kernel.__signature__
    dispatch.__doc__ = float_kernel.__doc__.replace("(float32)", "(float32 or integers)")
    dispatch.bind = bind
    return dispatch


UNARY: dict[str, Callable[..., Array]] = {
    op: _with_integers(op, _make(op, v, 1)) for op, v in _UNARY_OPS.items()}
BINARY: dict[str, Callable[..., Array]] = {
    op: _with_integers(op, _make(op, v, 2)) for op, v in _BINARY_OPS.items()}


# ---------------------------------------------------------------------------------
# permute


# permute_dims' dtypes (as capability.yaml declares): the C copy moves their elements as
# raw bytes (1, 2, 4 or 8); float64/float16 are not kernels of this backend
_MOVED = tuple(np.dtype(t) for t in ("float32", "int64", "int32", "int16", "int8", "uint8",
                                     "bool"))


def _moved(op: str, data: Any) -> Array:
    """permute_dims' input, an ndarray of one of _MOVED's dtypes."""
    if isinstance(data, np.generic):
        data = np.asarray(data)
    if not isinstance(data, np.ndarray) or data.dtype not in _MOVED:
        raise error(op, f"data must be a float32, int64/32/16/8, uint8 or bool ndarray, got "
                        f"{getattr(data, 'dtype', type(data).__name__)}")
    return data


def _elems_call(op: str, x: Array, shape: tuple[int, ...], perm: list[int], out: Array,
                strict: bool) -> CCall:
    """lgk_permute_copy_elems of a non-float32 input: strides and extent in its elements."""
    size = x.itemsize
    if not (x.flags.aligned and all(s >= 0 and s % size == 0 for s in x.strides)):
        if strict:
            raise Unbindable
        x = np.ascontiguousarray(x)
    steps = [s // size for s in x.strides]
    span = 1 + sum((d - 1) * s for d, s in zip(x.shape, steps))
    return CCall(op, lib.lgk_permute_copy_elems_threads,
                 (size, len(shape), i64(shape), _byte_ptr(x), span, i64([steps[p] for p in perm]),
                  _byte_ptr(out), out.size, num_threads()), (x,), ((0, 3), (OUT, 6)))


def _byte_ptr(x: Array) -> Any:
    if x.flags.c_contiguous:
        return ffi.from_buffer("unsigned char[]", x)
    return ffi.cast("unsigned char *", x.ctypes.data)


def _plan_permute(data: Array, *, axes: Optional[Sequence[int]] = None,
                  out: Optional[Array] = None, strict: bool = False):
    op = "permute_dims"
    data = _moved(op, data)
    if axes is not None and not isinstance(axes, (list, tuple, np.ndarray)):
        raise error(op, f"axes must be a list of ints or None, got {axes!r}")
    perm = list(range(data.ndim))[::-1] if axes is None else [norm_axis(op, a, data.ndim) for a in axes]
    if sorted(perm) != list(range(data.ndim)):
        raise error(op, f"axes {axes} is not a permutation of {data.ndim} dims")
    if data.ndim > MAX_NDIM:
        raise error(op, f"rank {data.ndim} exceeds the supported maximum of {MAX_NDIM}")
    shape = tuple(data.shape[p] for p in perm)
    if data.dtype != np.float32:
        out = out_array(op, out, shape, data.dtype)
        if out.size == 0:
            return out, None
        return out, _elems_call(op, detach(data, out, strict=strict), shape, perm, out, strict)
    out = out_array(op, out, shape)
    if out.size == 0:
        return out, None
    x = strided(detach(data, out, strict=strict), strict)
    src_strides = [estrides(x)[p] for p in perm]
    return out, CCall(op, lib.lgk_permute_copy_threads,
                      (len(shape), i64(shape), ptr(x), extent(x), i64(src_strides), ptr(out),
                       out.size, num_threads()), (x,), ((0, 2), (OUT, 5)))


def permute_dims(data: Array, *, axes: Optional[Sequence[int]] = None,
                 out: Optional[Array] = None) -> Array:
    """numpy.transpose into a new dense array (axes=None reverses), of float32 or any
    dtype of 1-, 2-, 4- or 8-byte elements."""
    return run_call(*_plan_permute(data, axes=axes, out=out))


bound(permute_dims, _plan_permute)
KERNELS: dict[str, Callable[..., Array]] = {**BINARY, **UNARY, "permute_dims": permute_dims}
