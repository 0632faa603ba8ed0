"""nn.max_pool2d of int8 / uint8 NCHW data, as an int8 CNN keeps it between its quantized
convs (ResNet-50's stem pool), on the C kernel of csrc/qpool.c: each window's maximum,
padded cells counting as the type's lowest value (no window is all padding: the op
refuses that). Without it the pool was legalized into a pad, a strided slice per tap and
a tree of maxima, each a step of its own: 1.6-2.3 ms of ResNet-50's int8 pass for its
64x112x112 map. float32 data goes to conv_pool.nn_max_pool2d."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from .._lib import ffi, lib
from .common import OUT, Array, CCall, bound, dense, detach, error, num_threads, out_array, \
    ptr, run_call
from .conv_pool import _geometry, nn_max_pool2d
from .qnn import QTYPES

OP = "nn.max_pool2d"
BYTES = (np.dtype(np.int8), np.dtype(np.uint8))


def _plan_qmax_pool2d(data: Array, *, pool_size: Sequence[int],
                      strides: Optional[Sequence[int]] = None,
                      padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                      ceil_mode: bool = False, data_layout: str = "NCHW",
                      out: Optional[Array] = None, strict: bool = False):
    if data_layout != "NCHW" or data.ndim != 4:
        raise error(OP, f"data {list(data.shape)} ({data_layout}) must be 4-D NCHW")
    p = ffi.new("lgk_pool2d_params *")
    p.kh, p.kw = pool_size
    p.ceil_mode = bool(ceil_mode)
    win = _geometry(OP, lib.lgk_pool2d_out_shape, p, data.shape, tuple(pool_size),
                    tuple(pool_size if strides is None else strides), padding, dilation,
                    ceil_mode)
    out = out_array(OP, out, data.shape[:2] + win.out, data.dtype)
    if out.size == 0:
        return out, None
    x = dense(detach(data, out, strict=strict), strict)
    return out, CCall(OP, lib.lgk_qmax_pool2d_nchw,
                      (p, QTYPES[x.dtype], ptr(x), x.size, ptr(out), out.size, num_threads()),
                      (), ((0, 2), (OUT, 4)))


def qmax_pool2d(data: Array, *, pool_size: Sequence[int],
                strides: Optional[Sequence[int]] = None,
                padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                ceil_mode: bool = False, data_layout: str = "NCHW",
                out: Optional[Array] = None) -> Array:
    """nn.max_pool2d (NCHW) of int8 / uint8 data."""
    return run_call(*_plan_qmax_pool2d(data, pool_size=pool_size, strides=strides,
                                       padding=padding, dilation=dilation,
                                       ceil_mode=ceil_mode, data_layout=data_layout, out=out))


bound(qmax_pool2d, _plan_qmax_pool2d)


def _kernel_for(data: Any):
    """qpool.c's kernel for int8 / uint8 data, conv_pool's float32 one otherwise."""
    return qmax_pool2d if np.asarray(data).dtype in BYTES else nn_max_pool2d


def max_pool2d(data: Array, **attrs: Any) -> Array:
    """nn.max_pool2d (NCHW): float32 on conv_pool's kernel, int8 / uint8 on qpool.c."""
    return _kernel_for(data)(data, **attrs)


def _bind(data: Any, *, out: Array, **attrs: Any):
    return _kernel_for(data).bind(data, out=out, **attrs)


max_pool2d.bind = _bind
