"""Softmax, layer/RMS norm and reductions (csrc/norms.c)."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from .._lib import lib
from .common import (OUT, Array, CCall, F32, Unbindable, bound, broadcasts_to, dense, detach,
                     error, f32, norm_axes, norm_axis, num_threads, number, opt_f32, opt_ptr,
                     out_array, prod, ptr, run_call)
from .elementwise import BINARY, permute_dims


def _plan_softmax(op: str, fn: Any, data: Any, axis: Any, out: Optional[Array],
                  strict: bool) -> tuple[Array, Optional[CCall]]:
    data = f32(op, "data", data)
    if data.ndim == 0:
        raise error(op, "softmax needs at least one dimension")
    ax = norm_axis(op, axis, data.ndim)
    out = out_array(op, out, data.shape)
    if out.size == 0:
        return out, None
    x = dense(detach(data, out, True, strict), strict)
    outer, n, inner = prod(data.shape[:ax]), data.shape[ax], prod(data.shape[ax + 1:])
    return out, CCall(op, fn, (outer, n, inner, ptr(x), ptr(out), num_threads()), (),
                      ((0, 3), (OUT, 4)))


def _plan_nn_softmax(data: Array, *, axis: int = -1, out: Optional[Array] = None,
                     strict: bool = False):
    return _plan_softmax("nn.softmax", lib.lgk_softmax, data, axis, out, strict)


def _plan_nn_log_softmax(data: Array, *, axis: int = -1, out: Optional[Array] = None,
                         strict: bool = False):
    return _plan_softmax("nn.log_softmax", lib.lgk_log_softmax, data, axis, out, strict)


def nn_softmax(data: Array, *, axis: int = -1, out: Optional[Array] = None) -> Array:
    """nn.softmax along one axis (ONNX opset 13)."""
    return run_call(*_plan_nn_softmax(data, axis=axis, out=out))


def nn_log_softmax(data: Array, *, axis: int = -1, out: Optional[Array] = None) -> Array:
    """nn.log_softmax along one axis."""
    return run_call(*_plan_nn_log_softmax(data, axis=axis, out=out))


def _per_feature(p: Optional[Array], norm_shape: tuple[int, ...]) -> Optional[Array]:
    """gamma/beta (already known to broadcast against the data) as a dense vector
    over the trailing normalised dims, or None when it also spans other dims."""
    if p is None or p.ndim > len(norm_shape):
        return None
    return dense(np.broadcast_to(p, norm_shape)).reshape(-1)


def _norm_call(op: str, rms: bool, rows: int, n: int, x: Array, g: Optional[Array],
               b: Optional[Array], eps: float, y: Array) -> CCall:
    affine = ((1, 3),) if g is not None else ()  # gamma: the data of input 1 (no copy)
    if rms:
        return CCall(op, lib.lgk_rms_norm, (rows, n, ptr(x), opt_ptr(g), eps, ptr(y),
                                             num_threads()), (g,),
                     ((0, 2), *affine, (OUT, 5)))
    affine += ((2, 4),) if b is not None else ()
    return CCall(op, lib.lgk_layer_norm, (rows, n, ptr(x), opt_ptr(g), opt_ptr(b), eps, ptr(y),
                                          num_threads()),
                 (g, b), ((0, 2), *affine, (OUT, 6)))


def _plan_normalize(op: str, data: Any, gamma: Any, beta: Any, axes: Any, epsilon: Any,
                    out: Optional[Array], rms: bool,
                    strict: bool) -> tuple[Array, Optional[CCall]]:
    """One C call when the axes are trailing and gamma/beta span only them; otherwise
    (Unbindable in strict mode) the whole op runs here with temporaries."""
    data = f32(op, "data", data)
    gamma, beta = opt_f32(op, "gamma", gamma), opt_f32(op, "beta", beta)
    ax = norm_axes(op, axes, data.ndim)
    if not ax:
        raise error(op, "axes must name at least one axis")
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p is not None and not broadcasts_to(p.shape, data.shape):
            raise error(op, f"{name} of shape {p.shape} does not broadcast to data {data.shape}")
    eps = number(op, "epsilon", epsilon)
    perm = [d for d in range(data.ndim) if d not in ax] + list(ax)
    trailing = perm == list(range(data.ndim))
    norm_shape = tuple(data.shape[d] for d in ax)
    # gamma/beta fuse into the C kernel when they only span the normalised dims.
    g, b = (_per_feature(gamma, norm_shape), _per_feature(beta, norm_shape)) if trailing else (None, None)
    fused = trailing and (gamma is None) == (g is None) and (beta is None) == (b is None)
    out = out_array(op, out, data.shape)
    if out.size == 0:
        return out, None
    rows, n = data.size // prod(norm_shape), prod(norm_shape)
    if fused:
        if strict and any(v is not None and not np.may_share_memory(v, p)
                          for v, p in ((g, gamma), (b, beta))):
            raise Unbindable  # _per_feature copied gamma or beta: a temporary
        x = dense(detach(data, out, True, strict), strict)
        return out, _norm_call(op, rms, rows, n, x, g, b, eps, out)
    if strict:
        raise Unbindable
    # Non-trailing axes: normalise a transposed copy, then transpose back.
    x = dense(detach(data, out, True)) if trailing else permute_dims(data, axes=perm)
    y = out if trailing else np.empty(x.shape, F32)
    _norm_call(op, rms, rows, n, x, None, None, eps, y).run()
    if not trailing:
        permute_dims(y, axes=[int(i) for i in np.argsort(perm)], out=out)
    if gamma is not None:
        BINARY["multiply"](out, gamma, out=out)
    if beta is not None:
        BINARY["add"](out, beta, out=out)
    return out, None


def _plan_layer_norm(data: Array, gamma: Optional[Array] = None, beta: Optional[Array] = None, *,
                     axes: Sequence[int] = (-1,), epsilon: float = 1e-5,
                     out: Optional[Array] = None, strict: bool = False):
    return _plan_normalize("nn.layer_norm", data, gamma, beta, axes, epsilon, out, False, strict)


def _plan_rms_norm(data: Array, gamma: Optional[Array] = None, *, axes: Sequence[int] = (-1,),
                   epsilon: float = 1e-5, out: Optional[Array] = None, strict: bool = False):
    return _plan_normalize("nn.rms_norm", data, gamma, None, axes, epsilon, out, True, strict)


def nn_layer_norm(data: Array, gamma: Optional[Array] = None, beta: Optional[Array] = None, *,
                  axes: Sequence[int] = (-1,), epsilon: float = 1e-5,
                  out: Optional[Array] = None) -> Array:
    """nn.layer_norm over ``axes`` (population variance); gamma/beta broadcast
    against the trailing dims."""
    return run_call(*_plan_layer_norm(data, gamma, beta, axes=axes, epsilon=epsilon, out=out))


def nn_rms_norm(data: Array, gamma: Optional[Array] = None, *, axes: Sequence[int] = (-1,),
                epsilon: float = 1e-5, out: Optional[Array] = None) -> Array:
    """nn.rms_norm: ``x / sqrt(mean(x^2) + eps) * gamma`` over ``axes``."""
    return run_call(*_plan_rms_norm(data, gamma, axes=axes, epsilon=epsilon, out=out))


# ---------------------------------------------------------------------------------
# reductions


def _reduce_view(x: Array, ax: tuple[int, ...], strict: bool) -> tuple[Array, int, int, int]:
    """(dense input, outer, r, inner) so the reduction runs over the middle dim.
    A contiguous run of axes is reduced in place; otherwise the kept axes are
    moved to the front first."""
    if ax == tuple(range(ax[0], ax[-1] + 1)):
        x = dense(x, strict)
        shape = x.shape
        return x, prod(shape[:ax[0]]), prod(shape[ax[0]:ax[-1] + 1]), prod(shape[ax[-1] + 1:])
    if strict:
        raise Unbindable
    keep = [d for d in range(x.ndim) if d not in ax]
    moved = permute_dims(x, axes=keep + list(ax))
    return moved, prod(x.shape[d] for d in keep), prod(x.shape[d] for d in ax), 1


def _make_reduce(op: str, code: int) -> Callable[..., Array]:
    def plan(data: Array, *, axes: Optional[Sequence[int]] = None, keepdims: bool = False,
             out: Optional[Array] = None, strict: bool = False):
        data = f32(op, "data", data)
        ax = norm_axes(op, axes, data.ndim)
        shape = tuple(1 if d in ax else n for d, n in enumerate(data.shape)
                      if keepdims or d not in ax)
        out = out_array(op, out, shape)
        if not ax:  # axes=[] is the identity
            if strict:
                raise Unbindable
            np.copyto(out, data)
            return out, None
        if out.size == 0:
            return out, None
        if data.size == 0 and code in (lib.LGK_REDUCE_MAX, lib.LGK_REDUCE_MIN):
            raise error(op, f"cannot reduce a zero-size array {data.shape} (no identity)")
        # size-1 axes change nothing: leaving them out keeps e.g. axes [0, 2] of a batch of
        # one one contiguous run (one C call) instead of a permuted copy on every run
        ax = tuple(d for d in ax if data.shape[d] != 1) or ax[-1:]
        x, outer, r, inner = _reduce_view(detach(data, out, strict=strict), ax, strict)
        return out, CCall(op, lib.lgk_reduce, (code, outer, r, inner, ptr(x), ptr(out)), (x,),
                          ((0, 4), (OUT, 5)))

    def kernel(data: Array, *, axes: Optional[Sequence[int]] = None, keepdims: bool = False,
               out: Optional[Array] = None) -> Array:
        return run_call(*plan(data, axes=axes, keepdims=keepdims, out=out))

    kernel.__name__ = kernel.__qualname__ = op + "_" if op != "mean" else op
    kernel.__doc__ = f"{op} over axes (None: all; []: identity; negative allowed)."
    return bound(kernel, plan)


_float_sum = _make_reduce("sum", lib.LGK_REDUCE_SUM)


def _integers(data: Any) -> bool:
    return isinstance(data, np.ndarray) and data.dtype.kind in "iu"


def sum_(data: Array, *, axes: Optional[Sequence[int]] = None, keepdims: bool = False,
         out: Optional[Array] = None) -> Array:
    """sum over axes (None: all; []: identity; negative allowed); integer tensors as numpy
    sums them in their own dtype (wrapping on overflow, as the reference's cast back does):
    index arithmetic, e.g. counts of a mask, which otherwise ran on the fallback."""
    if not _integers(data):
        return _float_sum(data, axes=axes, keepdims=keepdims, out=out)
    ax = norm_axes("sum", axes, data.ndim)
    result = np.sum(data, axis=ax, keepdims=keepdims, dtype=data.dtype)
    if out is None:
        return np.asarray(result)
    np.copyto(out, result)
    return out


def _sum_bind(data: Array, *, out: Array, axes: Optional[Sequence[int]] = None,
              keepdims: bool = False) -> Callable[[], None]:
    if not _integers(data):
        return _float_sum.bind(data, out=out, axes=axes, keepdims=keepdims)
    # the ufunc's reduce: np.sum's wrapper costs more than a small count itself (3 vs 1 us)
    return functools.partial(np.add.reduce, data, axis=norm_axes("sum", axes, data.ndim),
                             dtype=data.dtype, out=out, keepdims=keepdims)


sum_.bind = _sum_bind
mean = _make_reduce("mean", lib.LGK_REDUCE_MEAN)
max_ = _make_reduce("max", lib.LGK_REDUCE_MAX)
min_ = _make_reduce("min", lib.LGK_REDUCE_MIN)

bound(nn_softmax, _plan_nn_softmax)
bound(nn_log_softmax, _plan_nn_log_softmax)
bound(nn_layer_norm, _plan_layer_norm)
bound(nn_rms_norm, _plan_rms_norm)
# Row-wise kernels the C side runs with out == data: a planned executor may give their
# result the buffer of a data input that dies there.
for _kernel in (nn_softmax, nn_log_softmax, nn_layer_norm, nn_rms_norm):
    _kernel.in_place = True
