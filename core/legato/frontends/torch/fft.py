"""Complex values and FFTs in the PyTorch importer.

legato has no complex dtype: a complex tensor of shape S is imported as a float tensor of
shape S + [2] holding (real, imag), the layout `torch.view_as_real` gives (so it and
`view_as_complex` cost nothing) and the one `signal.dft` computes on. Complex inputs,
parameters and results of a program take that form too.

torch.export records each value's dtype, so the importer knows which values are complex: a
node that reads or produces one is converted by a converter of COMPLEX, which receives its
complex operands wrapped in `Complex`, never by the real converters (those would take the
(real, imag) axis for data). Complex ops without a converter here are refused by name.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir import Const, Value
from ...ir.errors import LegatoError
from ...ir.shapes import broadcast_shapes, norm_axis
from .ops import ATEN

COMPLEX_FLOAT = {"complex64": "float32", "complex128": "float64", "complex32": "float16"}
COMPLEX: dict = {}


@dataclass(frozen=True)
class Complex:
    """A complex operand: `value` is its float (..., 2) form."""
    value: Value

    @property
    def rank(self) -> int:
        return self.value.rank - 1

    @property
    def shape(self) -> tuple:
        return self.value.shape[:-1]


def complex_op(*names: str):
    def register(fn):
        for name in names:
            COMPLEX[name] = fn
        return fn
    return register


# --- what the importer asks -----------------------------------------------------------------

def is_complex(val) -> bool:
    """Whether a node's `meta["val"]` is a complex tensor."""
    return getattr(getattr(val, "dtype", None), "is_complex", False) is True


def _nodes(items):
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from _nodes(item)
        elif hasattr(item, "meta") and hasattr(item, "target"):
            yield item


def touches_complex(node) -> bool:
    """Whether the FX node reads or produces a complex value."""
    return is_complex(node.meta.get("val")) or any(
        is_complex(n.meta.get("val")) for n in _nodes([*node.args, *node.kwargs.values()]))


def value_type(val) -> tuple[tuple, str]:
    """(shape, dtype) of the legato value for a tensor torch describes by `val`."""
    dtype = str(val.dtype).removeprefix("torch.")
    if dtype in COMPLEX_FLOAT:
        return tuple(val.shape) + (2,), COMPLEX_FLOAT[dtype]
    return tuple(val.shape), dtype


def as_pairs(tensor):
    """A complex torch tensor (a parameter or buffer) as its float (..., 2) form."""
    import torch
    return torch.view_as_real(tensor.resolve_conj())


def convert(b, node, args: list, kwargs: dict):
    """The node's legato result (complex results in their (..., 2) form)."""
    converter = COMPLEX.get(str(node.target))
    if converter is None:
        raise LegatoError(f"{node.target} on complex values has no mapping")
    result = converter(b, *_wrapped(node.args, args),
                       **{k: _wrapped([node.kwargs[k]], [v])[0] for k, v in kwargs.items()})
    if isinstance(result, tuple):
        return tuple(r.value if isinstance(r, Complex) else r for r in result)
    return result.value if isinstance(result, Complex) else result


def _wrapped(fx_args, args) -> list:
    out = []
    for fx, arg in zip(fx_args, args):
        if isinstance(fx, (list, tuple)):
            out.append(_wrapped(fx, arg))
        elif hasattr(fx, "meta") and is_complex(fx.meta.get("val")):
            out.append(Complex(arg))
        else:
            out.append(arg)
    return out


# --- helpers --------------------------------------------------------------------------------

def parts(b, z: Complex):
    """(real, imag) of a complex operand."""
    return tuple(b.take(z.value, Const.of(np.int64(i)), axis=z.rank) for i in (0, 1))


def pack(b, real, imag) -> Complex:
    shape = list(broadcast_shapes(real.shape, imag.shape))
    real, imag = (v if list(v.shape) == shape else b.broadcast_to(v, shape=shape)
                  for v in (real, imag))
    return Complex(b.concat(b.expand_dims(real, axes=[len(shape)]),
                            b.expand_dims(imag, axes=[len(shape)]), axis=len(shape)))


def as_complex(b, x, dtype: str) -> Value:
    """The (..., 2) form of a complex operand, a real tensor or a Python number."""
    if isinstance(x, Complex):
        return x.value
    if isinstance(x, (bool, int, float, complex)):
        return Const.of(np.array([complex(x).real, complex(x).imag], dtype=dtype))
    x = x if x.dtype == dtype else b.cast(x, dtype=dtype)
    zeros = b.broadcast_to(b.scalar(0, dtype), shape=list(x.shape) + [1])
    return b.concat(b.expand_dims(x, axes=[x.rank]), zeros, axis=x.rank)


def _dtype(*operands) -> str:
    """The float dtype of the complex operands (the widest)."""
    dtypes = {z.value.dtype for z in operands if isinstance(z, Complex)}
    return "float64" if "float64" in dtypes else "float32" if "float32" in dtypes else \
        next(iter(dtypes))


def _dims(dims, rank: int) -> list[int]:
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [norm_axis(d, rank, "dim") for d in dims]


def _is_real_scalar(x) -> bool:
    return isinstance(x, (bool, int, float))


# --- FFTs -----------------------------------------------------------------------------------

def _norm(normalization: int, forward: bool) -> str:
    """numpy's `norm` for torch's normalization code: 0 none, 1 1/sqrt(n), 2 1/n, in
    either direction."""
    if normalization not in (0, 1, 2):
        raise LegatoError(f"FFT normalization {normalization!r} is not 0, 1 or 2")
    if normalization == 1:
        return "ortho"
    return "backward" if (normalization == 0) == forward else "forward"


def _dft(b, v, axis: int, **attrs):
    return b.call("signal.dft", v, axis=axis, **attrs)


@complex_op("aten._fft_r2c.default")
def fft_r2c(b, x, dim, normalization, onesided):
    """The last of `dim` first (one-sided when asked), then the others in full."""
    dims, norm = _dims(dim, x.rank), _norm(normalization, True)
    v = _dft(b, b.expand_dims(x, axes=[x.rank]), dims[-1], onesided=bool(onesided), norm=norm)
    for d in dims[:-1]:
        v = _dft(b, v, d, norm=norm)
    return Complex(v)


@complex_op("aten._fft_c2c.default")
def fft_c2c(b, z, dim, normalization, forward):
    v = z.value
    for d in _dims(dim, z.rank):
        v = _dft(b, v, d, inverse=not forward, norm=_norm(normalization, forward))
    return Complex(v)


@complex_op("aten._fft_c2r.default")
def fft_c2r(b, z, dim, normalization, last_dim_size):
    """Inverse transforms over `dim` but the last, then the half spectrum of the last to
    a real signal of `last_dim_size` points."""
    dims = _dims(dim, z.rank)
    v = fft_c2c(b, z, dims[:-1], normalization, False).value
    v = _dft(b, v, dims[-1], inverse=True, onesided=True, length=last_dim_size,
             norm=_norm(normalization, False))
    return b.squeeze(v, axes=[v.rank - 1])


# --- conversions ----------------------------------------------------------------------------

@complex_op("aten.view_as_real.default")
def view_as_real(b, z):
    return z.value


@complex_op("aten.view_as_complex.default")
def view_as_complex(b, x):
    return Complex(x)


@complex_op("aten.complex.default")
def complex_(b, real, imag):
    return pack(b, real, imag)


@complex_op("aten.polar.default")
def polar(b, magnitude, angle):
    return pack(b, b.multiply(magnitude, b.cos(angle)), b.multiply(magnitude, b.sin(angle)))


@complex_op("aten._to_copy.default")
def to_copy(b, x, dtype=None, **_):
    """Complex to complex or real to complex; complex to real keeps the real part, as
    torch does."""
    target = None if dtype is None else str(dtype).removeprefix("torch.")
    if not isinstance(x, Complex):
        return Complex(as_complex(b, x, COMPLEX_FLOAT[target]))
    if target is None or target in COMPLEX_FLOAT:
        want = x.value.dtype if target is None else COMPLEX_FLOAT[target]
        return x if want == x.value.dtype else Complex(b.cast(x.value, dtype=want))
    return b.cast(parts(b, x)[0], dtype=target)


def _float_of(dtype) -> str:
    """The float dtype of a complex torch dtype (None: torch's default, complex64)."""
    return COMPLEX_FLOAT[str(dtype or "complex64").removeprefix("torch.")]


@complex_op("aten.scalar_tensor.default")
def scalar_tensor(b, value, dtype=None, **_):
    return Complex(as_complex(b, value, _float_of(dtype)))


def _filled(default):
    """full(size, value), or zeros/ones(size) with `default`, in a complex dtype."""
    def convert(b, size, fill_value=default, dtype=None, **_):
        pair = as_complex(b, fill_value, _float_of(dtype)).data
        return Complex(Const.of(np.broadcast_to(pair, tuple(size) + (2,))))
    return convert


complex_op("aten.full.default")(_filled(None))
complex_op("aten.zeros.default")(_filled(0))
complex_op("aten.ones.default")(_filled(1))


@complex_op("aten.clone.default", "aten.contiguous.default", "aten.alias.default",
            "aten.detach.default", "aten.lift_fresh_copy.default",
            "aten.resolve_conj.default", "aten.resolve_neg.default")
def identity(b, z, *args, **kwargs):
    return z


# --- elementwise ----------------------------------------------------------------------------

def _cmul(b, x: Value, y: Value) -> Complex:
    """(a + ib)(c + id) on (..., 2) forms."""
    a, c = (b.take(v, Const.of(np.int64(0)), axis=v.rank - 1) for v in (x, y))
    s, d = (b.take(v, Const.of(np.int64(1)), axis=v.rank - 1) for v in (x, y))
    return pack(b, b.subtract(b.multiply(a, c), b.multiply(s, d)),
                b.add(b.multiply(a, d), b.multiply(s, c)))


def _scaled(b, z: Complex, factor, op: str) -> Complex:
    """A complex operand multiplied or divided by a real tensor or number."""
    if not _is_real_scalar(factor):
        dtype = z.value.dtype
        factor = b.expand_dims(factor if factor.dtype == dtype else
                               b.cast(factor, dtype=dtype), axes=[factor.rank])
    return Complex(b.call(op, z.value, factor))


def _additive(op: str):
    def convert(b, x, y, alpha=1):
        if not _is_real_scalar(alpha):
            raise LegatoError(f"alpha={alpha!r} is not a real number")
        dtype = _dtype(x, y)
        y = as_complex(b, y, dtype)
        y = y if alpha == 1 else b.multiply(y, alpha)
        return Complex(b.call(op, as_complex(b, x, dtype), y))
    return convert


complex_op("aten.add.Tensor")(_additive("add"))
complex_op("aten.sub.Tensor")(_additive("subtract"))


@complex_op("aten.rsub.Scalar")
def rsub(b, x, other, alpha=1):
    return _additive("subtract")(b, other, x, alpha)


@complex_op("aten.mul.Tensor")
def mul(b, x, y):
    if not isinstance(x, Complex):
        x, y = y, x
    if not isinstance(y, (Complex, complex)):
        return _scaled(b, x, y, "multiply")
    return _cmul(b, x.value, as_complex(b, y, x.value.dtype))


@complex_op("aten.div.Tensor")
def div(b, x, y):
    """By a real: both parts divided; by a complex: times the conjugate over |y|^2."""
    if isinstance(x, Complex) and not isinstance(y, (Complex, complex)):
        return _scaled(b, x, y, "divide")
    dtype = _dtype(x, y)
    y = as_complex(b, y, dtype)
    conjugate = b.multiply(y, Const.of(np.array([1, -1], dtype=dtype)))
    product = _cmul(b, as_complex(b, x, dtype), conjugate).value
    return Complex(b.divide(product, b.sum(b.multiply(y, y), axes=[y.rank - 1],
                                           keepdims=True)))


@complex_op("aten.reciprocal.default")
def reciprocal(b, z):
    return div(b, 1.0, z)


@complex_op("aten.where.self")
def where(b, condition, x, y):
    dtype = _dtype(x, y)
    return Complex(b.where(b.expand_dims(condition, axes=[condition.rank]),
                           as_complex(b, x, dtype), as_complex(b, y, dtype)))


@complex_op("aten.neg.default")
def neg(b, z):
    return Complex(b.negative(z.value))


@complex_op("aten._conj.default", "aten.conj.default", "aten.conj_physical.default")
def conj(b, z):
    return Complex(b.multiply(z.value, Const.of(np.array([1, -1], dtype=z.value.dtype))))


@complex_op("aten.abs.default")
def abs_(b, z):
    """|z| = sqrt(re^2 + im^2): three ops where torch's hypot takes a dozen, the squares
    overflowing to inf only past |z| ~ 1.8e19 in float32."""
    return b.sqrt(b.sum(b.multiply(z.value, z.value), axes=[z.rank]))


@complex_op("aten.angle.default")
def angle(b, z):
    real, imag = parts(b, z)
    return b.atan2(imag, real)


@complex_op("aten.exp.default")
def exp(b, z):
    """exp(re) (cos im + i sin im), with C's cexp rule that a zero imaginary part stays zero:
    where exp(re) overflows, inf * sin(0) would be NaN where torch gives inf + 0j."""
    real, imag = parts(b, z)
    magnitude = b.exp(real)
    imag_part = b.where(b.equal(imag, 0.0), imag, b.multiply(magnitude, b.sin(imag)))
    return pack(b, b.multiply(magnitude, b.cos(imag)), imag_part)


def _reduction(op: str):
    def convert(b, z, dims=None, keepdim=False, dtype=None):
        if dtype is not None:
            raise LegatoError(f"a {op} of complex values in dtype {dtype} is not mapped")
        axes = list(range(z.rank)) if not dims else _dims(dims, z.rank)
        return Complex(b.call(op, z.value, axes=axes, keepdims=keepdim))
    return convert


complex_op("aten.sum.dim_IntList")(_reduction("sum"))
complex_op("aten.mean.dim")(_reduction("mean"))


# --- data movement: the real converters on the (..., 2) form, dims counted in S -------------

@complex_op("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")
def reshape(b, z, shape):
    return Complex(b.reshape(z.value, shape=list(shape) + [2]))


@complex_op("aten.permute.default")
def permute(b, z, dims):
    return Complex(b.permute_dims(z.value, axes=_dims(dims, z.rank) + [z.rank]))


@complex_op("aten.transpose.int")
def transpose(b, z, dim0, dim1):
    return Complex(ATEN["aten.transpose.int"](b, z.value, *_dims([dim0, dim1], z.rank)))


@complex_op("aten.t.default")
def t(b, z):
    return permute(b, z, [1, 0]) if z.rank == 2 else z


@complex_op("aten.unsqueeze.default")
def unsqueeze(b, z, dim):
    return Complex(b.expand_dims(z.value, axes=[norm_axis(dim, z.rank + 1, "dim")]))


@complex_op("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def squeeze(b, z, dims=None):
    axes = range(z.rank) if dims is None else _dims(dims, max(z.rank, 1))
    axes = [a for a in axes if a < z.rank and z.shape[a] == 1]  # torch skips the others
    return Complex(b.squeeze(z.value, axes=axes)) if axes else z


@complex_op("aten.expand.default")
def expand(b, z, size, implicit=False):
    return Complex(ATEN["aten.expand.default"](b, z.value, list(size) + [2]))


@complex_op("aten.repeat.default")
def repeat(b, z, repeats):
    return Complex(ATEN["aten.repeat.default"](b, z.value, list(repeats) + [1]))


@complex_op("aten.cat.default")
def cat(b, tensors, dim=0):
    dtype = _dtype(*tensors)
    rank = next(t.rank for t in tensors if isinstance(t, Complex))
    return Complex(b.concat(*(as_complex(b, t, dtype) for t in tensors),
                            axis=norm_axis(dim, rank, "dim")))


def _along_dim(name: str):
    """The real converter `name(x, dim, ...)` on the (..., 2) form, `dim` counted in S."""
    def convert(b, z, dim=0, *args):
        return Complex(ATEN[name](b, z.value, norm_axis(dim, z.rank, "dim"), *args))
    return convert


for _name in ("aten.slice.Tensor", "aten.select.int", "aten.index_select.default"):
    complex_op(_name)(_along_dim(_name))


def _split(name: str):
    def convert(b, z, sizes, dim=0):
        parts = ATEN[name](b, z.value, sizes, norm_axis(dim, z.rank, "dim"))
        return tuple(map(Complex, parts))
    return convert


for _name in ("aten.split_with_sizes.default", "aten.split.Tensor"):
    complex_op(_name)(_split(_name))


@complex_op("aten.flip.default")
def flip(b, z, dims):
    return Complex(ATEN["aten.flip.default"](b, z.value, _dims(dims, z.rank)))
