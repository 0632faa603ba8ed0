"""ATen op converters of the PyTorch importer: `fn(b, *args, **kwargs) -> Value | tuple`,
registered by ATen overload name ("aten.add.Tensor") in a table that refuses duplicates."""
from __future__ import annotations

import numpy as np

from ...ir import Const
from ...ir.errors import LegatoError
from ...ir.shapes import broadcast_shapes, chunk_sizes, norm_axis
from ...ops import REGISTRY

ATEN: dict = {}
# ops legato has whole: kept out of PyTorch's decomposition table so they stay high-level
KEEP = ("aten.layer_norm.default", "aten.gelu.default", "aten.softmax.int",
        "aten.log_softmax.int", "aten.scaled_dot_product_attention.default",
        "aten.linear.default", "aten.conv2d.default", "aten.silu.default",
        "aten.group_norm.default", "aten.instance_norm.default", "aten.batch_norm.default",
        "aten.max_pool2d.default", "aten.col2im.default",
        # PyTorch's decompositions resample an axis that keeps its size; its kernels copy it
        "aten.upsample_linear1d.vec", "aten.upsample_trilinear3d.vec")


RANDOM = "a random op (legato's results are deterministic)"
# ATen ops legato refuses on purpose, by a word of their packet name, and why
REFUSED = (
    (("backward",), "a backward op (legato imports inference graphs)"),
    (("rand", "bernoulli", "normal", "uniform", "multinomial", "exponential", "poisson"),
     RANDOM),
    (("nonzero", "unique", "masked_select", "argwhere"),
     "its output shape depends on the data (legato has static shapes)"),
    (("sym_", "_local_scalar_dense", "item"), "a dynamic shape or scalar query (legato "
                                              "has static shapes: export with fixed sizes)"),
    (("sparse",), "a sparse op (legato has dense tensors)"),
    (("resize_",), "an in-place resize of a tensor's storage (legato's tensors keep the "
                   "sizes they were exported with)"),
)


def refusal(name: str) -> str | None:
    """Why legato does not import the ATen op `name` ("aten.nonzero.default"), if that
    is on purpose."""
    packet = name.split(".")[1] if name.count(".") >= 2 else name
    for words, why in REFUSED:
        if any(w in packet for w in words):
            return why
    return None


def aten(*names: str):
    def register(fn):
        for name in names:
            if name in ATEN:
                raise LegatoError(f"ATen op {name} already has a converter")
            ATEN[name] = fn
        return fn
    return register


def _axes(dims, rank: int):
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [norm_axis(d, rank, 'dim') for d in dims]


# --- elementwise ----------------------------------------------------------------------------

OVERLOADS = ("default", "Tensor", "Scalar", "self", "Tensor_Tensor", "Tensor_Scalar",
             "Scalar_Tensor")


# ATen's bitwise ops (and add, mul) take bool tensors too, where they are the logical ops
ON_BOOL = {"bitwise_and": "logical_and", "bitwise_or": "logical_or",
           "bitwise_xor": "logical_xor", "bitwise_not": "logical_not",
           "add": "logical_or", "multiply": "logical_and"}
LOGICAL = ("logical_and", "logical_or", "logical_xor", "logical_not")
# float ops that torch applies to integers without leaving their dtype
INTEGER_FORMS = {**{op: lambda b, x: x for op in ("round", "floor", "ceil", "trunc")},
                 "nn.relu": lambda b, x: b.maximum(x, 0)}


def _category(dtype: str) -> int:
    """torch's dtype categories, in promotion order: bool, integer, float."""
    return 0 if dtype == "bool" else 2 if dtype.startswith(("float", "bfloat")) else 1


def _promote(a: str | None, b: str | None) -> str | None:
    """`torch.promote_types` on legato's dtypes (None: no operand yet)."""
    if a is None or b is None or a == b:
        return a or b
    if _category(a) != _category(b):
        return a if _category(a) > _category(b) else b
    if _category(a) == 2:  # two floats: the wider; float16 with bfloat16 needs float32
        return "float64" if "float64" in (a, b) else "float32"
    return np.result_type(a, b).name


def _combine(higher: str | None, lower: str | None) -> str | None:
    """A lower-priority operand changes the dtype only when its category is higher."""
    if higher is None or lower is None:
        return higher or lower
    if _category(higher) == 2:
        return higher
    return _promote(higher, lower) if higher == "bool" or _category(lower) == 2 else higher


def result_dtype(operands) -> str | None:
    """The dtype torch computes an elementwise op of `operands` in: tensors with dims
    decide, 0-d tensors only where their category (bool < integer < float) is higher, and
    Python scalars (bool, int64, float32: the default dtypes) only after those."""
    dims = zero = scalars = None
    for v in operands:
        if hasattr(v, "type"):
            if v.rank:
                dims = _promote(dims, v.dtype)
            else:
                zero = _promote(zero, v.dtype)
        elif isinstance(v, (bool, int, float)):
            scalars = _promote(scalars, "bool" if isinstance(v, bool) else
                               "int64" if isinstance(v, int) else "float32")
    return _combine(dims, _combine(zero, scalars))


def _in_dtype(b, v, dtype: str):
    """A tensor cast to `dtype`, a Python scalar as a constant of it (None stays None)."""
    if v is None:
        return v
    if hasattr(v, "type"):
        return v if v.dtype == dtype else b.cast(v, dtype=dtype)
    return b.scalar(wrapped(v, dtype), dtype)


def wrapped(value, dtype: str):
    """A Python scalar as torch stores it in `dtype`: integers wrap modulo 2**bits into an
    integer dtype (uint8 * -1 multiplies by 255), as C casts do."""
    if isinstance(value, bool) or not isinstance(value, int) or _category(dtype) != 1:
        return value
    limits = np.iinfo(dtype)
    return (value - int(limits.min)) % (1 << limits.bits) + int(limits.min)


def _needs_float(opdef, dtype: str, count: int, attrs: dict) -> bool:
    """Whether `opdef` refuses `dtype`'s integers or bools as a float function does (sin,
    exp, ...): torch computes those in float32."""
    from ...ir import TensorType
    try:
        opdef.infer_types([TensorType((), dtype)] * count, opdef.normalize_attrs(attrs))
    except LegatoError as err:
        return "float" in str(err)
    return False


def _direct(opdef):
    """The converter of an ATen op that maps one to one onto `opdef`: tensors and Python
    scalars positionally, keyword arguments named as the op's attributes. Operands are
    cast to the dtype torch computes in (`result_dtype`); integers and bools in float32
    for true division and the float functions; on bools the bitwise ops (and add, mul)
    are the logical ones."""
    def convert(b, *args, alpha=1, **kwargs):
        op = opdef.name
        attrs = {k: v for k, v in kwargs.items() if k in opdef.attr_specs}
        first = 1 if op == "where" else 0  # a where's condition stays bool
        operands = list(args[first:])
        dtype = "bool" if op in LOGICAL else result_dtype(operands)
        if dtype is None:
            return b.call(op, *args, **attrs)
        if dtype == "bool" and op in ON_BOOL:
            op = ON_BOOL[op]
        elif _category(dtype) == 1 and op in INTEGER_FORMS:
            return INTEGER_FORMS[op](b, _in_dtype(b, operands[0], dtype))
        elif _category(dtype) < 2 and op != "where" and (
                op == "divide" or _needs_float(opdef, dtype, len(args), attrs)):
            dtype = "float32"
        inputs = [*args[:first], *(_in_dtype(b, v, dtype) for v in operands)]
        if alpha != 1:  # add/sub: x + alpha * y
            inputs[1] = b.multiply(inputs[1], b.scalar(wrapped(alpha, dtype), dtype))
        return b.call(op, *inputs, **attrs)
    convert.__name__ = f"direct_{opdef.name.replace('.', '_')}"
    return convert


# ATen packets that map one to one onto a legato op say so in its definition (`aten`)
for _opdef in REGISTRY.ops():
    for _packet in _opdef.aten:
        aten(*(f"aten.{_packet}.{overload}" for overload in OVERLOADS))(_direct(_opdef))


@aten("aten.clamp.default")
def clamp(b, x, min=None, max=None):  # noqa: A002 - ATen's argument names
    # torch stores integer bounds in x's dtype first: clamp(uint8, min=-3) clamps at 253
    return b.clip(x, min=wrapped(min, x.dtype), max=wrapped(max, x.dtype))


@aten("aten._to_copy.default")
def to_copy(b, x, dtype=None, **_):
    return x if dtype is None else b.cast(x, dtype=str(dtype).removeprefix("torch."))


@aten("aten.clone.default", "aten.contiguous.default", "aten.alias.default",
      "aten.dropout.default", "aten.detach.default")
def identity(b, x, *args, **kwargs):
    return x


# --- linear algebra and nn ------------------------------------------------------------------

@aten("aten.linear.default")
def linear(b, x, weight, bias=None):
    return b.nn_linear(x, weight, bias)


@aten("aten.matmul.default", "aten.mm.default", "aten.bmm.default")
def matmul(b, x, y):
    return b.matmul(x, y)


@aten("aten.addmm.default")
def addmm(b, bias, x, y, beta=1, alpha=1):
    product = b.matmul(x, y)
    product = product if alpha == 1 else b.multiply(product, alpha)
    return b.add(product, bias if beta == 1 else b.multiply(bias, beta))


@aten("aten.layer_norm.default")
def layer_norm(b, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    axes = list(range(x.rank - len(normalized_shape), x.rank))
    return b.nn_layer_norm(x, weight, bias, axes=axes, epsilon=eps)


@aten("aten.softmax.int", "aten._softmax.default")
def softmax(b, x, dim, dtype_or_half=None):
    return b.nn_softmax(_as_dtype(b, x, dtype_or_half), axis=dim)


@aten("aten.log_softmax.int", "aten._log_softmax.default")
def log_softmax(b, x, dim, dtype_or_half=None):
    return b.nn_log_softmax(_as_dtype(b, x, dtype_or_half), axis=dim)


def _as_dtype(b, x, dtype):
    """x cast to a torch dtype argument (None or a bool `half_to_float` flag: as is)."""
    if dtype is None or isinstance(dtype, bool):
        return x
    name = str(dtype).removeprefix("torch.")
    return x if name == x.dtype else b.cast(x, dtype=name)


@aten("aten.scaled_dot_product_attention.default")
def attention(b, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    if dropout_p:
        raise LegatoError(f"dropout_p={dropout_p} (refused: {RANDOM})")
    if attn_mask is not None and is_causal:
        attn_mask, is_causal = _causal_mask(b, q, k, v, attn_mask, enable_gqa), False
    if enable_gqa and k.rank == 4 and k.shape[1] != q.shape[1]:  # each k/v head serves
        k, v = (_repeat_heads(b, t, q.shape[1] // t.shape[1]) for t in (k, v))  # a group
    if q.rank == k.rank == v.rank == 3:  # (batch, seq, head_dim): one head
        heads = [b.expand_dims(t, axes=[1]) for t in (q, k, v)]
        mask = b.expand_dims(attn_mask, axes=[1]) if attn_mask is not None and \
            attn_mask.rank == 3 else attn_mask
        return b.squeeze(attention(b, *heads, mask, dropout_p, is_causal, scale), axes=[1])
    if q.rank == 3 and k.rank == v.rank == 4:  # q's batch dims broadcast against k's
        q = b.broadcast_to(q, shape=[*k.shape[:2], *q.shape[1:]])
    if q.rank == k.rank == v.rank == 4:  # batch and head dims broadcast (multi-query k, v)
        lead = list(broadcast_shapes(*(t.shape[:2] for t in (q, k, v))))
        q, k, v = (t if list(t.shape[:2]) == lead else
                   b.broadcast_to(t, shape=[*lead, *t.shape[2:]]) for t in (q, k, v))
    out = b.nn_attention(q, k, v, attn_mask, scale=scale, causal=bool(is_causal))
    return out if attn_mask is None else _zero_masked_rows(b, out, attn_mask)


def _causal_mask(b, q, k, v, mask, enable_gqa):
    """attn_mask with the causal mask folded in. PyTorch computes both only on its fused
    CPU kernel, which takes 4-d q, k, v of one batch and head size and a 2-d or 4-d mask;
    elsewhere it refuses them together, and so does legato."""
    fused = q.rank == k.rank == v.rank == 4 and mask.rank in (2, 4) and \
        q.shape[0] == k.shape[0] == v.shape[0] and q.shape[3] == k.shape[3] == v.shape[3] \
        and (enable_gqa or q.shape[1] == k.shape[1] == v.shape[1])
    if not fused:
        raise LegatoError(f"attn_mask {mask.type} with is_causal=True for q {q.type}, k "
                          f"{k.type}, v {v.type}: PyTorch refuses an explicit mask with "
                          "is_causal outside its fused kernel (4-d inputs of one batch, "
                          "head count and head size; a 2-d or 4-d mask)")
    keep = Const.of(np.tril(np.ones((q.shape[2], k.shape[2]), dtype=bool)))
    if mask.dtype == "bool":
        return b.logical_and(mask, keep)
    return b.where(keep, mask, float("-inf"))


def _zero_masked_rows(b, out, mask):
    """PyTorch answers 0 for a query row whose every key is masked out (a bool mask all
    False, a float mask all -inf), where the softmax alone gives NaN."""
    kept = mask if mask.dtype == "bool" else b.not_equal(mask, float("-inf"))
    alive = b.max(kept, axes=[-1], keepdims=True) if kept.rank else kept
    return b.where(alive, out, 0.0)


def _repeat_heads(b, t, times: int):
    """(batch, heads, seq, dim) with each head repeated `times` times in place."""
    n, h, s, d = t.shape
    wide = b.broadcast_to(b.expand_dims(t, axes=[2]), shape=[n, h, times, s, d])
    return b.reshape(wide, shape=[n, h * times, s, d])


@aten("aten.conv2d.default")
def conv2d(b, x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
           groups=1):
    stride, padding, dilation = (list(v) * (2 if len(v) == 1 else 1)
                                 for v in (stride, padding, dilation))
    if x.rank == 3:  # an unbatched (C, H, W) image
        return b.squeeze(conv2d(b, b.expand_dims(x, axes=[0]), weight, bias, stride,
                                padding, dilation, groups), axes=[0])
    return b.nn_conv2d(x, weight, bias, strides=stride, padding=padding + padding,
                       dilation=dilation, groups=groups)


@aten("aten.max_pool2d.default")
def max_pool2d(b, x, kernel, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    if x.rank == 3:  # an unbatched (C, H, W) image
        return b.squeeze(max_pool2d(b, b.expand_dims(x, axes=[0]), kernel, stride, padding,
                                    dilation, ceil_mode), axes=[0])
    padding = list(padding) * (2 if len(padding) == 1 else 1)
    return b.nn_max_pool2d(x, pool_size=list(kernel), strides=list(stride) or None,
                           padding=padding + padding, dilation=list(dilation),
                           ceil_mode=ceil_mode)


def _pair(v, default=None) -> list:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return default if not v and default is not None else v * 2 if len(v) == 1 else v


def _as_pool3d(b, pool: str, x, kernel, stride, padding, *args):
    """A 2-d pool of (N, C, H, W) or (C, H, W) data as the 3-d pool `pool` converts it over
    a unit depth: one copy of the window arithmetic (flat indices, exact integer means)."""
    kernel = _pair(kernel)
    volume = b.expand_dims(x, axes=[x.rank - 2])
    y = ATEN[pool](b, volume, [1, *kernel], [1, *_pair(stride, kernel)],
                   [0, *_pair(padding)], *args)
    return tuple(b.squeeze(v, axes=[v.rank - 3]) for v in y) if isinstance(y, tuple) \
        else b.squeeze(y, axes=[y.rank - 3])


@aten("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(b, x, kernel, stride=(), padding=(0, 0), dilation=(1, 1),
                            ceil_mode=False):
    """The pooled values and torch's indices: each maximum's flat position in its (H, W)
    plane (unread indices are dropped with the calls that computed them)."""
    _, indices = _as_pool3d(b, "aten.max_pool3d_with_indices.default", x, kernel, stride,
                            padding, [1, *_pair(dilation)], ceil_mode)
    return max_pool2d(b, x, kernel, stride, padding, dilation, ceil_mode), indices


@aten("aten.avg_pool2d.default")
def avg_pool2d(b, x, kernel, stride=(), padding=(0, 0), ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    if divisor_override or not x.dtype.startswith(("float", "bfloat")):
        # a window's sum over a divisor; integers summed exactly and divided as torch does
        return _as_pool3d(b, "aten.avg_pool3d.default", x, kernel, stride, padding,
                          ceil_mode, count_include_pad, divisor_override)
    if x.rank == 3:  # an unbatched (C, H, W) image
        return b.squeeze(avg_pool2d(b, b.expand_dims(x, axes=[0]), kernel, stride, padding,
                                    ceil_mode, count_include_pad), axes=[0])
    padding = list(padding) * (2 if len(padding) == 1 else 1)
    return b.nn_avg_pool2d(x, pool_size=list(kernel), strides=list(stride) or None,
                           padding=padding + padding, ceil_mode=ceil_mode,
                           count_include_pad=count_include_pad)


@aten("aten.batch_norm.default")
def batch_norm(b, x, weight, bias, mean, var, training, momentum, eps, cudnn=True):
    if training:
        raise LegatoError("training-mode batch_norm is not supported (call .eval())")
    return b.nn_batch_norm(x, weight, bias, mean, var, epsilon=eps)


@aten("aten._native_batch_norm_legit_no_training.default")
def native_batch_norm(b, x, weight, bias, mean, var, momentum, eps):
    empty = Const.of(np.zeros(0, dtype=x.dtype))  # nothing saved: torch's empty tensors
    return b.nn_batch_norm(x, weight, bias, mean, var, epsilon=eps), empty, empty


@aten("aten.instance_norm.default")
def instance_norm(b, x, weight, bias, running_mean, running_var, use_input_stats, momentum,
                  eps, cudnn=True):
    """Per (sample, channel) statistics; running ones (track_running_stats in eval) are a
    batch_norm's."""
    if not use_input_stats:
        return b.nn_batch_norm(x, weight, bias, running_mean, running_var, epsilon=eps)
    c = x.shape[1]
    weight = weight if weight is not None else Const.of(np.ones(c, dtype=x.dtype))
    bias = bias if bias is not None else Const.of(np.zeros(c, dtype=x.dtype))
    return b.nn_instance_norm(x, weight, bias, epsilon=eps)


@aten("aten.group_norm.default")
def group_norm(b, x, groups, weight=None, bias=None, eps=1e-5, cudnn=True):
    return b.nn_group_norm(x, weight, bias, num_groups=groups, epsilon=eps)


@aten("aten.embedding.default")
def embedding(b, weight, indices, *args):
    return b.take(weight, indices, axis=0)


# --- data movement and reductions -----------------------------------------------------------

@aten("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")
def reshape(b, x, shape):
    return b.reshape(x, shape=list(shape))


@aten("aten.permute.default")
def permute(b, x, dims):
    return b.permute_dims(x, axes=_axes(dims, x.rank))


@aten("aten.transpose.int")
def transpose(b, x, dim0, dim1):
    axes = list(range(x.rank))
    dim0, dim1 = norm_axis(dim0, x.rank, 'dim0'), norm_axis(dim1, x.rank, 'dim1')
    axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
    return b.permute_dims(x, axes=axes)


@aten("aten.t.default")
def t(b, x):
    return b.permute_dims(x) if x.rank == 2 else x


@aten("aten.unsqueeze.default")
def unsqueeze(b, x, dim):
    return b.expand_dims(x, axes=[norm_axis(dim, x.rank + 1, 'dim')])


@aten("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def squeeze(b, x, dims=None):
    if dims is None:
        return b.squeeze(x)
    axes = [a for a in _axes(dims, max(x.rank, 1)) if x.shape[a] == 1]  # torch skips non-1
    return b.squeeze(x, axes=axes) if axes else x


@aten("aten.flatten.using_ints")
def flatten(b, x, start_dim=0, end_dim=-1):
    start = norm_axis(start_dim, max(x.rank, 1), 'start_dim')
    end = norm_axis(end_dim, max(x.rank, 1), 'end_dim')
    shape = list(x.shape[:start]) + [-1] + list(x.shape[end + 1:])
    return b.reshape(x, shape=shape)


@aten("aten.expand.default")
def expand(b, x, size, implicit=False):
    lead = len(size) - x.rank
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return b.broadcast_to(x, shape=list(broadcast_shapes(x.shape, tuple(shape))))


@aten("aten.cat.default")
def cat(b, tensors, dim=0):
    dtype = None  # torch concatenates mixed dtypes in their promoted one
    for t in tensors:  # the skipped empty tensors' dtypes included
        dtype = _promote(dtype, t.dtype)
    # torch's legacy rule skips 1-D empty tensors whatever `dim` is: a decoder's cache
    # starts as torch.tensor([]) and each step concatenates its keys onto it at dim -2
    kept = [t for t in tensors if t.shape != (0,)]
    if not kept:
        return _in_dtype(b, tensors[0], dtype)
    return b.concat(*(_in_dtype(b, t, dtype) for t in kept), axis=dim)


@aten("aten.split_with_sizes.default")
def split_with_sizes(b, x, sizes, dim=0):
    parts = b.split(x, sections=list(sizes), axis=dim)
    return parts if isinstance(parts, tuple) else (parts,)


@aten("aten.split.Tensor")
def split(b, x, size, dim=0):
    dim = norm_axis(dim, x.rank, 'dim')
    return split_with_sizes(b, x, list(chunk_sizes(x.shape[dim], size)), dim)


@aten("aten.slice.Tensor")
def slice_(b, x, dim=0, start=None, end=None, step=1):
    dim = norm_axis(dim, x.rank, 'dim')
    start = 0 if start is None else start
    size = x.shape[dim]
    if end is None or isinstance(end, int) and isinstance(size, int):
        end = size if end is None else min(end, size)
    # (a symbolic end or size: the slice's shape rule clamps it, with a guard)
    return b.strided_slice(x, begin=[start], end=[end], strides=[step], axes=[dim])


@aten("aten.select.int")
def select(b, x, dim, index):
    return b.take(x, Const.of(np.int64(index)), axis=dim)


def empty_reduction(x, dims, keepdim: bool, value, dtype: str | None = None):
    """The constant torch gives for reducing `x` over `dims` (None or []: all) when one of
    them has no elements (0 for a sum, NaN for a mean or a variance, ...), None otherwise:
    shapes are static, so that is known here and legato's reductions, which refuse empty
    axes, are not needed. Over symbolic dims that is left to the reductions, which refuse
    a binding that empties an axis."""
    if x.type.symbolic or x.type.size or x.rank == 0:  # a 0-d tensor holds one element
        return None
    axes = range(x.rank) if not dims else _axes(dims, x.rank)
    if all(x.shape[a] for a in axes):
        return None
    shape = [1 if a in axes else d for a, d in enumerate(x.shape) if keepdim or a not in axes]
    return Const.of(np.full(shape, value, dtype=dtype or x.dtype))


EMPTY = {"sum": 0, "mean": np.nan}  # a sum or mean over no elements (max, min: torch raises)
REDUCE = {"aten.sum.dim_IntList": "sum", "aten.mean.dim": "mean", "aten.amax.default": "max",
          "aten.amin.default": "min"}


def _reduction(op):
    def convert(b, x, dims=None, keepdim=False, dtype=None):
        if dtype is not None:
            x = _as_dtype(b, x, dtype)
        elif op == "sum" and not x.dtype.startswith(("float", "bfloat")):
            x = b.cast(x, dtype="int64")  # torch sums bools and integers in int64
        if x.rank == 0:  # dim 0 or -1 of a scalar: the scalar itself
            return x if op != "mean" or x.dtype.startswith(("float", "bfloat")) else \
                b.mean(x)
        empty = empty_reduction(x, dims, keepdim, EMPTY[op]) if op in EMPTY else None
        if empty is not None:
            return empty
        axes = None if not dims else _axes(dims, x.rank)
        return b.call(op, x, axes=axes, keepdims=keepdim)
    return convert


for _name, _op in REDUCE.items():
    aten(_name)(_reduction(_op))


def _rounding_divide(b, x, y, rounding_mode=None):
    """div with rounding_mode "trunc" (toward zero) or "floor" (down)."""
    if rounding_mode is None:
        return ATEN["aten.div.Tensor"](b, x, y)
    dtype = result_dtype([x, y])
    x, y = _in_dtype(b, x, dtype), _in_dtype(b, y, dtype)
    integer = not x.dtype.startswith(("float", "bfloat"))
    quotient = b.divide(x, y)
    if rounding_mode == "trunc":
        return quotient if integer else b.trunc(quotient)
    if rounding_mode != "floor":
        raise LegatoError(f"rounding_mode {rounding_mode!r} is not trunc or floor")
    if not integer:
        return b.floor(quotient)
    # integer floor division: one less where the truncated quotient was rounded up
    inexact = b.not_equal(b.subtract(x, b.multiply(quotient, y)), 0)
    below = b.not_equal(b.less(x, 0), b.less(y, 0))
    return b.subtract(quotient, b.cast(b.logical_and(inexact, below), dtype=x.dtype))


aten("aten.div.Tensor_mode", "aten.div.Scalar_mode")(_rounding_divide)


@aten("aten.round.decimals")
def round_decimals(b, x, decimals=0):
    """Rounding half to even at 10**-decimals, scaled as torch's kernel does (x * 10**d,
    or x / 10**-d for negative d, in x's dtype)."""
    if not decimals:
        return b.round(x)
    scale = b.scalar(10.0 ** abs(decimals), x.dtype)
    if decimals > 0:
        return b.divide(b.round(b.multiply(x, scale)), scale)
    return b.multiply(b.round(b.divide(x, scale)), scale)

