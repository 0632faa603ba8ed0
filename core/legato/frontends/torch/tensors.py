"""ATen converters for tensor factories (folded to constants: legato has static shapes),
no-op asserts, indexing, scans and selection. They register in ops.ATEN."""
from __future__ import annotations

import math

import numpy as np

from ...ir import Const
from ...ir.errors import LegatoError
from ...ir.shapes import norm_axis
from ...ir.symbols import Expr, assume_le
from ..common.indexing import one_hot_values
from .ops import ATEN, aten, empty_reduction, wrapped

# --- factories: static shapes, so their results are constants -------------------------------


def _dtype(dtype, value=None) -> str:
    """A torch dtype as legato names it; without one, what torch infers from `value`."""
    if dtype is not None:
        return str(dtype).removeprefix("torch.")
    if isinstance(value, bool):
        return "bool"
    return "int64" if isinstance(value, int) else "float32"


def _full(shape, value, dtype) -> Const:
    size = math.prod(int(d) for d in shape)
    if size > 1 << 24:
        raise LegatoError(f"a constant of shape {list(shape)} is too large to fold")
    return Const.of(np.full([int(d) for d in shape], wrapped(value, dtype),
                            dtype=_numpy(dtype)))


def _numpy(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


@aten("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def arange(b, *bounds, dtype=None, **_):
    start, end, step = (0, bounds[0], 1) if len(bounds) == 1 else \
        (bounds[0], bounds[1], bounds[2] if len(bounds) > 2 else 1)
    if step == 0:
        raise LegatoError("arange step must not be 0")
    if any(isinstance(v, Expr) for v in (start, end, step)):
        return _symbolic_arange(b, start, end, step, dtype)
    exact = all(isinstance(v, int) for v in (start, end, step))
    dtype = _dtype(dtype, 0 if exact else 0.0)
    # torch: ceil((end - start) / step) elements start + i * step, computed in double
    count = max(0, math.ceil((end - start) / step))
    values = start + np.arange(count, dtype=np.int64 if exact else np.float64) * step
    return Const.of(values.astype(_numpy(dtype)))


def _symbolic_arange(b, start, end, step, dtype):
    """arange over symbolic sizes (`arange(seq)`, a decoder's `arange(past, past + seq)`):
    a running count over a tensor of that many ones, since no constant can hold it; a
    symbolic start slices the count from 0. Its length must not be negative: a guard."""
    if not (isinstance(step, int) and step > 0 and (isinstance(start, int) or step == 1)):
        raise LegatoError(f"arange({start}, {end}, {step}) over symbolic sizes needs a "
                          "constant positive step, and step 1 where the start is symbolic")
    dtype = _dtype(dtype, 0)
    count = (end - start + step - 1) // step
    assume_le(0, count, f"arange({start}, {end}, {step})")
    ones = b.broadcast_to(Const.of(np.ones(1, np.int64)),
                          shape=[end if isinstance(start, Expr) else count])
    counted = b.cumsum(ones, axis=0, exclusive=True, reverse=False)
    if isinstance(start, Expr):
        counted = b.strided_slice(counted, begin=[start], end=[end], axes=[0])
    elif (start, step) != (0, 1):
        counted = b.add(b.multiply(counted, Const.of(np.int64(step))), Const.of(np.int64(start)))
    return counted if dtype == "int64" else b.cast(counted, dtype=dtype)


@aten("aten.full.default")
def full(b, size, fill_value, dtype=None, **_):
    return _full(size, fill_value, _dtype(dtype, fill_value))


@aten("aten.zeros.default", "aten.empty.memory_format")
def zeros(b, size, dtype=None, **_):
    return _full(size, 0, _dtype(dtype, 0.0))


@aten("aten.ones.default")
def ones(b, size, dtype=None, **_):
    return _full(size, 1, _dtype(dtype, 0.0))


@aten("aten.full_like.default")
def full_like(b, x, fill_value, dtype=None, **_):
    return _full(x.shape, fill_value, _dtype(dtype) if dtype is not None else x.dtype)


@aten("aten.zeros_like.default", "aten.empty_like.default")
def zeros_like(b, x, dtype=None, **_):
    return full_like(b, x, 0, dtype)


@aten("aten.ones_like.default")
def ones_like(b, x, dtype=None, **_):
    return full_like(b, x, 1, dtype)


@aten("aten.new_full.default")
def new_full(b, x, size, fill_value, dtype=None, **_):
    return _full(size, fill_value, _dtype(dtype) if dtype is not None else x.dtype)


@aten("aten.new_zeros.default", "aten.new_empty.default")
def new_zeros(b, x, size, dtype=None, **_):
    return new_full(b, x, size, 0, dtype)


@aten("aten.new_empty_strided.default")
def new_empty_strided(b, x, size, stride, dtype=None, **_):  # strides: a layout, not values
    return new_full(b, x, size, 0, dtype)


@aten("aten.new_ones.default")
def new_ones(b, x, size, dtype=None, **_):
    return new_full(b, x, size, 1, dtype)


@aten("aten.scalar_tensor.default")
def scalar_tensor(b, value, dtype=None, **_):
    return _full((), value, _dtype(dtype, 0.0))


def _triangle_indices(upper: bool):
    """The (row, column) coordinates of a row x col matrix's lower (upper) triangle from
    diagonal `offset`, row by row: a 2 x count constant."""
    def convert(b, row, col, offset=0, dtype=None, **_):
        where = np.triu_indices if upper else np.tril_indices
        return Const.of(np.stack(where(row, offset, col)).astype(_numpy(_dtype(dtype, 0))))
    return convert


aten("aten.tril_indices.default")(_triangle_indices(False))
aten("aten.triu_indices.default")(_triangle_indices(True))


@aten("aten.lift_fresh_copy.default")
def lift_fresh_copy(b, x):
    return x


# --- asserts on what is known statically: nothing to compute --------------------------------

@aten("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
      "aten._assert_async.msg", "aten._assert_async.default",
      "aten.sym_constrain_range_for_size.default", "aten._functional_assert_async.msg")
def no_op_assert(b, *args, **kwargs):
    return None


# --- indexing --------------------------------------------------------------------------------

@aten("aten.index_select.default")
def index_select(b, x, dim, index):
    if x.rank == 0:  # a scalar: index 0 (or -1) of it, as a scalar
        norm_axis(dim, 1, "dim")
        return b.reshape(b.take(b.reshape(x, shape=[1]), index, axis=0), shape=[])
    return b.take(x, index, axis=dim)


@aten("aten.gather.default")
def gather(b, x, dim, index, sparse_grad=False):
    return b.gather_elements(x, index, axis=dim)


@aten("aten.flip.default")
def flip(b, x, dims):
    axes = sorted({norm_axis(d, x.rank, "dim") for d in dims})
    if not axes:
        return x
    return b.strided_slice(x, begin=[-1] * len(axes), end=[-(1 << 62)] * len(axes),
                           strides=[-1] * len(axes), axes=axes)


@aten("aten.repeat.default")
def repeat(b, x, repeats):
    lead = len(repeats) - x.rank
    if lead < 0:
        raise LegatoError(f"repeats {list(repeats)} has fewer dims than the input {x.type}")
    if lead:
        x = b.reshape(x, shape=[1] * lead + list(x.shape))
    return b.tile(x, repeats=list(repeats))


def _trilu(upper: bool):
    def convert(b, x, diagonal=0):
        return b.trilu(x, k=diagonal, upper=upper)
    return convert


aten("aten.triu.default")(_trilu(True))
aten("aten.tril.default")(_trilu(False))


@aten("aten.one_hot.default")
def one_hot(b, x, num_classes=-1):
    if num_classes < 0:
        raise LegatoError("one_hot needs num_classes: the default (max + 1) depends on data")
    return one_hot_values(b, x, num_classes, -1, Const.of(np.int64(1)), Const.of(np.int64(0)))


# --- scans, reductions and selection -----------------------------------------------------------

def _running(op: str):
    def convert(b, x, dim, dtype=None):
        x = _accumulated(b, x, dtype)
        if x.rank == 0:  # torch scans a scalar as one element
            return b.reshape(b.call(op, b.reshape(x, shape=[1]), axis=0), shape=[])
        return b.call(op, x, axis=dim)
    return convert


aten("aten.cumsum.default")(_running("cumsum"))
aten("aten.cumprod.default")(_running("cumprod"))


def _arg(op: str):
    def convert(b, x, dim=None, keepdim=False):
        if x.rank == 0:  # a scalar: index 0
            return Const.of(np.int64(0))
        if dim is None:  # over every element: of the flattened tensor
            index = b.call(op, b.reshape(x, shape=[-1]), axis=0, keepdims=False)
            return b.reshape(index, shape=[1] * x.rank) if keepdim else index
        return b.call(op, x, axis=dim, keepdims=keepdim)
    return convert


def _any_all(op: str):
    """any/all as max/min of the bool tensor (x != 0 for numbers); torch answers uint8
    inputs in uint8, all others in bool."""
    def convert(b, x, dims=None, keepdim=False):
        flags = x if x.dtype == "bool" else b.not_equal(x, 0)
        if isinstance(dims, int):
            dims = [dims]
        empty = empty_reduction(x, dims, keepdim, op == "min", "uint8" if x.dtype == "uint8"
                                else "bool")  # any of nothing is False, all of it True
        if empty is not None:
            return empty
        found = flags if flags.rank == 0 else \
            b.call(op, flags, axes=None if dims is None else list(dims), keepdims=keepdim)
        return b.cast(found, dtype="uint8") if x.dtype == "uint8" else found
    return convert


aten("aten.any.default", "aten.any.dim", "aten.any.dims")(_any_all("max"))
aten("aten.all.default", "aten.all.dim", "aten.all.dims")(_any_all("min"))
aten("aten.argmax.default")(_arg("argmax"))


def _extreme(op: str):
    def convert(b, x, dim, keepdim=False):
        if x.rank == 0:  # dim 0 or -1 of a scalar: the scalar, at index 0
            norm_axis(dim, 1, "dim")
            return x, Const.of(np.int64(0))
        return (b.call(op, x, axes=[dim], keepdims=keepdim),
                b.call("arg" + op, x, axis=dim, keepdims=keepdim))
    return convert


aten("aten.max.dim")(_extreme("max"))
aten("aten.min.dim")(_extreme("min"))


def _full_extreme(op: str):
    """The max or min of every element (NaN if there is one), as a 0-d tensor."""
    def convert(b, x):
        if x.rank and not x.type.size:
            raise LegatoError(f"{op} of the empty tensor {x.type} has no value (torch "
                              "raises)")
        return x if x.rank == 0 else b.call(op, x)
    return convert


aten("aten.max.default")(_full_extreme("max"))
aten("aten.min.default")(_full_extreme("min"))


@aten("aten.var.correction", "aten.var.dim")
def var(b, x, dims=None, *args, correction=None, keepdim=False, unbiased=None):
    if args and isinstance(args[0], bool):  # var.dim(x, dims, unbiased, keepdim)
        unbiased, args = args[0], args[1:]
    keepdim = args[0] if args else keepdim
    correction = (1 if unbiased is None or unbiased else 0) if correction is None \
        else correction
    axes = None if not dims else [dims] if isinstance(dims, int) else list(dims)
    empty = empty_reduction(x, axes, keepdim, np.nan)
    if empty is not None:  # no elements: 0 / 0
        return empty
    if correction in (0, 1):
        return b.variance(x, axes=axes, keepdims=keepdim, unbiased=bool(correction))
    n = math.prod(x.shape[a] for a in (range(x.rank) if axes is None else
                                       [norm_axis(a, x.rank) for a in axes]))
    return b.multiply(b.variance(x, axes=axes, keepdims=keepdim), n / (n - correction))


@aten("aten.var_mean.correction")
def var_mean(b, x, dims=None, correction=None, keepdim=False):
    mean = ATEN["aten.mean.dim"](b, x, dims, keepdim)
    return var(b, x, dims, correction=correction, keepdim=keepdim), mean


@aten("aten.linalg_vector_norm.default")
def vector_norm(b, x, ord=2, dim=None, keepdim=False, dtype=None):
    """(sum |x|^ord)^(1/ord) over `dim`; ord inf/-inf the largest/smallest |x|, 0 the
    count of nonzeros."""
    x = x if dtype is None else b.cast(x, dtype=_dtype(dtype))
    axes = None if dim is None else [dim] if isinstance(dim, int) else list(dim) or None
    reduce = {"axes": axes, "keepdims": keepdim} if x.rank else {}
    empty = empty_reduction(x, axes, keepdim, 0.0) if ord >= 0 and ord != math.inf else None
    if empty is not None:  # a sum of no terms
        return empty

    def over(v, op):
        return b.call(op, v, **reduce) if x.rank else v
    if ord == 2:
        return b.sqrt(over(b.multiply(x, x), "sum"))
    size = b.abs(x)
    if ord in (math.inf, -math.inf):
        return over(size, "max" if ord > 0 else "min")
    if ord == 0:
        return over(b.cast(b.not_equal(x, 0), dtype=x.dtype), "sum")
    if ord == 1:
        return over(size, "sum")
    return b.power(over(b.power(size, float(ord)), "sum"), 1.0 / ord)


aten("aten.argmin.default")(_arg("argmin"))


def _accumulated(b, x, dtype):
    """x in the dtype torch sums and multiplies it in: the one asked for, else int64 for
    bools and integers."""
    target = _dtype(dtype) if dtype is not None else \
        x.dtype if x.dtype.startswith(("float", "bfloat")) else "int64"
    return x if target == x.dtype else b.cast(x, dtype=target)


@aten("aten.prod.dim_int")
def prod(b, x, dim, keepdim=False, dtype=None):
    x = _accumulated(b, x, dtype)
    if x.rank == 0:  # dim 0 or -1 of a scalar: the scalar itself
        return x
    empty = empty_reduction(x, [dim], keepdim, 1)
    return empty if empty is not None else b.prod(x, axes=[dim], keepdims=keepdim)


@aten("aten.prod.default")
def prod_all(b, x, dtype=None):
    x = _accumulated(b, x, dtype)
    empty = empty_reduction(x, None, False, 1)
    return empty if empty is not None else b.prod(x)


@aten("aten.topk.default")
def topk(b, x, k, dim=-1, largest=True, sorted=True):
    return b.topk(x, k=k, axis=dim, largest=largest)


@aten("aten.sort.default", "aten.sort.stable")
def sort(b, x, *args, dim=-1, descending=False, stable=None):
    if args and isinstance(args[0], bool) or args and args[0] is None:  # sort.stable
        args = args[1:]
    dim = args[0] if args else dim
    descending = args[1] if len(args) > 1 else descending
    axis = norm_axis(dim, max(x.rank, 1), "dim")
    return b.topk(x, k=x.shape[axis] if x.rank else 1, axis=axis, largest=descending)


# --- scatter ---------------------------------------------------------------------------------

SCATTER_REDUCE = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul",
                  "amax": "max", "amin": "min"}
BOOL_REDUCE = {"add": "max", "mul": "min"}


def _scatter(b, x, dim, index, src, **attrs):
    """scatter_elements as torch's scatters define it: `src` may be larger than `index`
    (its leading corner is used), a 0-d tensor scatters as one element, and bools are
    added as by or, multiplied as by and."""
    if x.dtype == "bool":
        attrs["reduction"] = BOOL_REDUCE.get(attrs["reduction"], attrs["reduction"])
    if src.shape != index.shape and src.rank == index.rank:
        src = b.strided_slice(src, begin=[0] * index.rank, end=list(index.shape))
    if x.rank == 0:
        norm_axis(dim, 1, "dim")
        flat = [b.reshape(v, shape=[1]) for v in (x, index, src)]
        return b.reshape(b.scatter_elements(*flat, axis=0, **attrs), shape=[])
    return b.scatter_elements(x, index, src, axis=dim, **attrs)


@aten("aten.scatter.src", "aten.scatter.value", "aten.scatter.reduce",
      "aten.scatter.value_reduce")
def scatter(b, x, dim, index, src, reduce=None):
    if not hasattr(src, "type"):  # scatter.value: one value everywhere
        src = Const.of(np.full(index.shape, src, dtype=_numpy(x.dtype)))
    reduction = "none" if reduce is None else SCATTER_REDUCE.get(reduce)
    if reduction is None:
        raise LegatoError(f"scatter reduce {reduce!r} is not supported")
    return _scatter(b, x, dim, index, src, reduction=reduction)


@aten("aten.scatter_add.default")
def scatter_add(b, x, dim, index, src):
    return _scatter(b, x, dim, index, src, reduction="add")


@aten("aten.scatter_reduce.two")
def scatter_reduce(b, x, dim, index, src, reduce, include_self=True):
    if reduce == "mean":
        return _scatter_mean(b, x, dim, index, src, include_self)
    reduction = SCATTER_REDUCE.get(reduce)
    if reduction is None:
        raise LegatoError(f"scatter_reduce {reduce!r} is not supported "
                          f"({', '.join(SCATTER_REDUCE)}, mean)")
    return _scatter(b, x, dim, index, src, reduction=reduction, include_self=include_self)


def _scatter_mean(b, x, dim, index, src, include_self):
    """The sum over the count of values reduced at each position (at least 1, so a position
    no index hits keeps its data); integers floor-divided, as torch does."""
    total = _scatter(b, x, dim, index, src, reduction="add", include_self=include_self)
    counts = _scatter(b, _full(x.shape, int(include_self), "int64"), dim, index,
                      _full(index.shape, 1, "int64"), reduction="add")
    counts = b.maximum(counts, 1)
    if x.dtype.startswith(("float", "bfloat")):
        return b.divide(total, b.cast(counts, dtype=x.dtype))
    mean = ATEN["aten.div.Tensor_mode"](b, b.cast(total, dtype="int64"), counts,
                                        rounding_mode="floor")
    return b.cast(mean, dtype=x.dtype)
