"""NCHW convolution and pooling kernels (csrc/conv_pool.c)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from legato.plugin_api import ShapeError, Window, window

from .._lib import ffi, lib
from .common import (OUT, Array, CCall, Unbindable, bound, check_status, dense, detach, error,
                     f32, ints, num_threads, opt_f32, opt_ptr, out_array, ptr, run_call)
from .gemm import PackedWeight, _activation, _aligned_empty, _packed_buffer, pack_weight


def _packed_by_c(op: str, size: int, pack: Callable[[Any, int], int]) -> Array:
    """A read-only, 64-byte aligned buffer of `size` floats (a C size function's result:
    negative is -status) filled by pack(pointer, floats), a C packing call's status."""
    if size < 0:
        check_status(op, -size)
    data = _aligned_empty(size)
    check_status(op, pack(ptr(data), data.size))
    data.flags.writeable = False
    return data


class PackedConvWeight:
    """A constant nn.conv2d weight (O, C, kh, kw) of a conv with groups == 1, made by
    :func:`pack_conv_weight`. It is packed for the GEMM when a conv first uses it, in
    the orientation that conv's output size calls for (both, if convs of both sizes
    share it): as the right operand W^T (C*kh*kw, O) where pixels are the GEMM's rows
    (small maps), or as the left operand W (O, C*kh*kw) where filters are (large
    maps); for the direct conv, by blocks of channels and filters; for Winograd's F(2x2,
    3x3) (3x3 stride-1 convs), as 16 transformed matrices. ``weight`` is the source
    array."""

    __slots__ = ("weight", "_as_b", "_as_a", "_direct", "_winograd")

    def __init__(self, weight: Array):
        self.weight, self._as_b, self._as_a, self._direct = weight, None, None, None
        self._winograd: Optional[tuple[int, Array]] = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.weight.shape

    def _flat(self) -> Array:
        return np.ascontiguousarray(self.weight).reshape(self.weight.shape[0], -1)

    @property
    def packed(self) -> PackedWeight:
        """W^T packed as a GEMM right operand (lgk_sgemm_pack_b), for the kernel
        family in use."""
        if self._as_b is None or self._as_b.isa != lib.lgk_gemm_isa():
            self._as_b = pack_weight(self._flat(), transposed=True)
        return self._as_b

    def packed_left(self, op: str) -> Array:
        """W packed as a GEMM left operand (lgk_sgemm_pack_a), for the kernel family in
        use (packed again if another family has been selected since)."""
        isa = lib.lgk_gemm_isa()
        if self._as_a is None or self._as_a[0] != isa:
            flat = self._flat()
            data = _packed_by_c(op, lib.lgk_sgemm_packed_a_size(*flat.shape),
                                lambda dst, n: lib.lgk_sgemm_pack_a(
                                    flat.shape[0], flat.shape[1], ptr(flat), flat.size,
                                    flat.shape[1], 1, dst, n))
            self._as_a = (isa, data)
        return self._as_a[1]

    def packed_direct(self, op: str) -> Array:
        """The weight packed for lgk_conv2d_direct (groups of 32 filters by blocks of 16
        channels), once."""
        if self._direct is None:
            o, c, kh, kw = self.shape
            w = np.ascontiguousarray(self.weight)
            self._direct = _packed_by_c(op, lib.lgk_conv2d_direct_packed_size(o, c, kh, kw),
                                        lambda dst, n: lib.lgk_conv2d_direct_pack(
                                            o, c, kh, kw, ptr(w), w.size, dst, n))
        return self._direct

    def packed_winograd(self, op: str) -> Array:
        """The 3x3 weight transformed for lgk_conv2d_winograd (its 16 positions, each
        packed as a GEMM left operand), for the kernel family in use."""
        isa = lib.lgk_gemm_isa()
        if self._winograd is None or self._winograd[0] != isa:
            o, c = self.shape[:2]
            w = np.ascontiguousarray(self.weight)
            data = _packed_by_c(op, lib.lgk_conv2d_winograd_packed_size(o, c),
                                lambda dst, n: lib.lgk_conv2d_winograd_pack(
                                    o, c, ptr(w), w.size, dst, n))
            self._winograd = (isa, data)
        return self._winograd[1]

    def __repr__(self) -> str:
        return f"PackedConvWeight(shape={self.shape})"


def pack_conv_weight(weight: Array, groups: int = 1, **_attrs: Any) -> Optional[PackedConvWeight]:
    """A constant OIHW conv weight for :func:`nn_conv2d`, to be packed once, or None
    where packing does not apply (grouped convs). Other attributes of the conv are
    accepted and ignored, so a planner can pass the call's attributes as they are."""
    if isinstance(weight, np.ndarray) and weight.dtype == np.int32:  # ConvInteger's
        from .int_conv import pack_int_conv_weight
        return pack_int_conv_weight(weight)
    weight = f32("nn.conv2d", "weight", weight)
    if groups != 1 or weight.ndim != 4 or weight.size == 0:
        return None
    return PackedConvWeight(weight)


# Pixels as the GEMM's rows (weights as its right operand, result transposed) win
# while an image's output pixels are few (2x2..8x8 maps: the filters keep the GEMM
# wide and the weights stream once), as for 1x1 convs with few pixels per filter;
# filters as rows, straight into NCHW, win on larger maps (measured with
# benchmarks/convs.py: 8x8 maps 29 vs 34 us, 16x16 43 vs 52 us).
PACKED_MAX_PIXELS = 64
PACKED_MAX_PIXELS_PER_FILTER = 4
# Kernels larger than 1x1 run directly on channel-blocked data (csrc/conv_direct.c), no
# im2col, from 6x6 output maps up (single convs, 1 thread, against the faster GEMM
# orientation: 3x3 of 64 channels at 56^2 0.71x the time, 512 at 7^2 0.87x, 128 at 6^2
# 0.99x; 256 at 4^2 1.46x; the 7x7 stride-2 stem of 3 channels at 224^2 0.78x). 16 or more
# channels are padded to blocks of 16: not where that adds more than a quarter (24
# channels: 1.02x); fewer are read as single planes.
DIRECT_MIN_PIXELS = 36


def _direct(weight_shape: tuple[int, ...], pixels: int) -> bool:
    """Whether lgk_conv2d_direct is the faster kernel for this groups == 1 conv."""
    c, kh, kw = weight_shape[1:]
    return (kh * kw > 1 and pixels >= DIRECT_MIN_PIXELS
            and (c < 16 or (c + 15) // 16 * 16 * 4 <= 5 * c)
            and lib.lgk_gemm_isa() == lib.LGK_ISA_AVX512
            and lib.lgk_conv2d_direct_available() == 1)


# 3x3 stride-1 convs run as Winograd F(2x2, 3x3) (csrc/conv_winograd.c: 16/36 of the
# multiply-adds, as GEMMs) where there is enough work per tile and per channel to pay for
# its transforms: 32 or more channels in and out, maps of 7x7 or more, and output pixels
# times channels of at least 12800. Single convs, 1 thread, AVX-512, against the direct
# conv (channels in = out): 64 at 56^2 0.62x the time, 128 at 28^2 0.58x, 256 at 14^2
# 0.70x, 512 at 7^2 0.90x, 32 at 28^2 0.88x; about even below the thresholds, so left
# direct: 64 at 14^2 0.96x, 128 at 8^2 1.01x, 64 at 10^2 1.05x, 512 at 6^2 1.09x.
WINOGRAD_MIN_CHANNELS = 32
WINOGRAD_MIN_PIXELS = 49
WINOGRAD_MIN_WORK = 12800  # output pixels x min(channels, filters)


def _winograd(weight_shape: tuple[int, ...], p: Any, pixels: int) -> bool:
    """Whether lgk_conv2d_winograd runs this groups == 1 conv."""
    o, c, kh, kw = weight_shape
    return ((kh, kw, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w) == (3, 3, 1, 1, 1, 1)
            and min(o, c) >= WINOGRAD_MIN_CHANNELS and pixels >= WINOGRAD_MIN_PIXELS
            and pixels * min(o, c) >= WINOGRAD_MIN_WORK)


def _require_layout(op: str, name: str, value: str, supported: str) -> None:
    if value != supported:
        raise error(op, f"{name}={value!r} is not supported by c_kernels (only {supported!r})")


def _spatial(op: str, strides: Any, padding: Any, dilation: Any) -> tuple[list[int], ...]:
    return (ints(op, "strides", strides, 2, 1), ints(op, "padding", padding, 4, 0),
            ints(op, "dilation", dilation, 2, 1))


def _geometry(op: str, fn: Any, params: Any, data_shape: tuple[int, ...], kernel: list[int],
              strides: list[int], padding: list[int], dilation: list[int],
              ceil_mode: bool = False) -> Window:
    """The window geometry by legato.shapes (the one output-size rule), filled into the C
    parameters; the C library's own size check must agree."""
    try:
        win = window(data_shape[2:], kernel, strides, dilation, padding, bool(ceil_mode),
                     what=op)
    except ShapeError as err:
        raise error(op, f"invalid geometry: {err}") from None
    params.n, params.c, params.h, params.w = data_shape
    params.kh, params.kw = win.kernel  # ceil mode's window larger than the input is cut to it
    params.stride_h, params.stride_w = win.strides
    params.pad_top, params.pad_left = win.pads_begin
    params.pad_bottom, params.pad_right = win.pads_end
    params.dilation_h, params.dilation_w = win.dilation
    oh, ow = ffi.new("int64_t *"), ffi.new("int64_t *")
    status = fn(params, oh, ow)
    if status != lib.LGK_OK or (oh[0], ow[0]) != win.out:
        raise error(op, f"invalid geometry for the C kernel: input {data_shape}, kernel "
                        f"{kernel}, strides {strides}, padding {padding}, dilation {dilation}")
    return win


def _plan_conv2d(data: Array, weight: Array, bias: Optional[Array] = None, *,
                 strides: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0, 0, 0),
                 dilation: Sequence[int] = (1, 1), groups: int = 1, data_layout: str = "NCHW",
                 kernel_layout: str = "OIHW", out: Optional[Array] = None,
                 activation: str = "none", residual: Optional[Array] = None,
                 out_layout: str = "NCHW", strict: bool = False) -> tuple[Array, Optional[CCall]]:
    op = "nn.conv2d"
    if isinstance(data, np.ndarray) and data.dtype == np.int32:  # on the int8 conv or numpy
        if strict:
            raise Unbindable  # (int_conv looks at the data's values on every call)
        _require_layout(op, "out_layout", out_layout, "NCHW")
        from .int_conv import int_conv2d
        return int_conv2d(data, weight, bias, strides=strides, padding=padding,
                          dilation=dilation, groups=groups, data_layout=data_layout,
                          kernel_layout=kernel_layout, out=out, activation=activation,
                          residual=residual), None
    _require_layout(op, "data_layout", data_layout, "NCHW")
    _require_layout(op, "kernel_layout", kernel_layout, "OIHW")
    packed = weight if isinstance(weight, PackedConvWeight) else None
    data = f32(op, "data", data)
    weight_shape = packed.shape if packed is not None else f32(op, "weight", weight).shape
    bias, act = opt_f32(op, "bias", bias), _activation(op, activation)
    strides, padding, dilation = _spatial(op, strides, padding, dilation)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise error(op, f"groups must be a positive int, got {groups!r}")
    if packed is not None and groups != 1:
        raise error(op, f"a packed weight needs groups=1, got groups={groups}")
    if data.ndim != 4 or len(weight_shape) != 4:
        raise error(op, f"expected 4-D data and weight, got {data.shape}, {weight_shape}")
    n_out, c_per_group = weight_shape[:2]
    if data.shape[1] != c_per_group * groups or n_out % groups:
        raise error(op, f"channels do not match: data {data.shape}, weight {weight_shape}, "
                        f"groups {groups}")
    if bias is not None and bias.shape != (n_out,):
        raise error(op, f"bias must have shape ({n_out},), got {bias.shape}")
    p = ffi.new("lgk_conv2d_params *")
    p.o, p.kh, p.kw, p.groups = n_out, weight_shape[2], weight_shape[3], int(groups)
    win = _geometry(op, lib.lgk_conv2d_out_shape, p, data.shape, list(weight_shape[2:]),
                    strides, padding, dilation)
    if out_layout == "NHWC":  # the conv and a permute to channels last, in one C call
        if packed is not None or residual is not None:
            raise error(op, "out_layout NHWC takes an unpacked weight and no residual")
        out = out_array(op, out, (data.shape[0], *win.out, n_out))
    else:
        _require_layout(op, "out_layout", out_layout, "NCHW")
        out = out_array(op, out, (data.shape[0], n_out, *win.out))
    if out.size == 0:
        return out, None
    x = dense(detach(data, out, strict=strict), strict)
    b = None if bias is None else dense(detach(bias, out, strict=strict), strict)
    pixels = out.shape[2] * out.shape[3]
    by_pixels = pixels <= PACKED_MAX_PIXELS and pixels <= PACKED_MAX_PIXELS_PER_FILTER * n_out
    args = (p, ptr(x), x.size)
    tail = (opt_ptr(b), 0 if b is None else b.size, ptr(out), out.size, act, num_threads())
    bias_touch = ((2, 5),) if b is not None else ()
    if residual is not None:
        return out, _residual_call(op, packed, residual, out, by_pixels, args, tail, bias_touch,
                                   pixels, strict)
    if packed is not None and _winograd(weight_shape, p, pixels):
        w = packed.packed_winograd(op)
        return out, CCall(op, lib.lgk_conv2d_winograd, (*args, ptr(w), w.size, *tail), (),
                          ((0, 1), *bias_touch, (OUT, 7)))
    if packed is not None and _direct(weight_shape, pixels):
        w = packed.packed_direct(op)
        return out, CCall(op, lib.lgk_conv2d_direct, (*args, ptr(w), w.size, *tail), (),
                          ((0, 1), *bias_touch, (OUT, 7)))
    if packed is not None:
        w = _packed_buffer(op, packed.packed) if by_pixels else packed.packed_left(op)
        fn = lib.lgk_conv2d_nchw_prepacked if by_pixels else lib.lgk_conv2d_nchw_packed_a
        return out, CCall(op, fn, (*args, ptr(w), w.size, *tail), (),
                          ((0, 1), *bias_touch, (OUT, 7)))
    w = dense(detach(weight, out, strict=strict), strict)
    fn = lib.lgk_conv2d_nchw_to_nhwc if out_layout == "NHWC" else lib.lgk_conv2d_nchw
    return out, CCall(op, fn, (*args, ptr(w), w.size, *tail), (),
                      ((0, 1), (1, 3), *bias_touch, (OUT, 7)))


# The slot role of a fused residual (after data, weight and bias): a run passes the
# caller's array there when the residual is a model input, instead of copying it in.
RESIDUAL_INPUT = 3


def _residual_call(op: str, packed: Optional[PackedConvWeight], residual: Array, out: Array,
                   by_pixels: bool, args: tuple, tail: tuple, bias_touch: tuple, pixels: int,
                   strict: bool) -> CCall:
    """The GEMM conv with a fused residual: act(conv + bias + residual), the add done on
    each block of the output while it is in cache, or in the GEMM's tiles as it writes
    them over the residual when `residual` is `out` (the fusion pass fuses 1x1 convs with
    constant weights only, which take the GEMM convs)."""
    if packed is None or _direct(packed.shape, pixels):
        raise error(op, "a fused residual needs a constant weight of a conv the GEMM runs "
                        "(groups=1, not the direct conv)")
    r = f32(op, "residual", residual)
    if r.shape != out.shape:
        raise error(op, f"residual must have the output's shape {out.shape}, got {r.shape}")
    r = dense(detach(r, out, in_place_ok=True, strict=strict), strict)  # r is out: in place
    w = _packed_buffer(op, packed.packed) if by_pixels else packed.packed_left(op)
    fn = (lib.lgk_conv2d_nchw_prepacked_residual if by_pixels
          else lib.lgk_conv2d_nchw_packed_a_residual)
    b_ptr, b_size, *rest = tail
    return CCall(op, fn, (*args, ptr(w), w.size, b_ptr, b_size, ptr(r), r.size, *rest), (r,),
                 ((0, 1), *bias_touch, (RESIDUAL_INPUT, 7), (OUT, 9)))


def nn_conv2d(data: Array, weight: Array, bias: Optional[Array] = None, *,
              strides: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0, 0, 0),
              dilation: Sequence[int] = (1, 1), groups: int = 1, data_layout: str = "NCHW",
              kernel_layout: str = "OIHW", out: Optional[Array] = None,
              activation: str = "none", residual: Optional[Array] = None,
              out_layout: str = "NCHW") -> Array:
    """nn.conv2d, NCHW data and OIHW weight (or a :class:`PackedConvWeight`);
    ``activation``, ``residual`` (added before the activation; packed weights only) and
    ``out_layout="NHWC"`` (the result permuted to channels last; unpacked weights only)
    are optional fusions."""
    return run_call(*_plan_conv2d(data, weight, bias, strides=strides, padding=padding,
                                  dilation=dilation, groups=groups, data_layout=data_layout,
                                  kernel_layout=kernel_layout, out=out, activation=activation,
                                  residual=residual, out_layout=out_layout))


def _plan_pool(op: str, fn: Any, data: Array, pool_size: Any, strides: Any, padding: Any,
               dilation: Any, ceil_mode: bool, count_include_pad: bool, data_layout: str,
               out: Optional[Array], strict: bool) -> tuple[Array, Optional[CCall]]:
    _require_layout(op, "data_layout", data_layout, "NCHW")
    data = f32(op, "data", data)
    if data.ndim != 4:
        raise error(op, f"expected 4-D NCHW data, got shape {data.shape}")
    kernel = ints(op, "pool_size", pool_size, 2, 1)
    strides, padding, dilation = _spatial(op, kernel if strides is None else strides, padding,
                                          dilation)
    p = ffi.new("lgk_pool2d_params *")
    p.kh, p.kw = kernel
    p.ceil_mode, p.count_include_pad = bool(ceil_mode), bool(count_include_pad)
    win = _geometry(op, lib.lgk_pool2d_out_shape, p, data.shape, kernel, strides, padding,
                    dilation, ceil_mode)
    out = out_array(op, out, data.shape[:2] + win.out)
    if out.size == 0:
        return out, None
    x = dense(detach(data, out, strict=strict), strict)
    return out, CCall(op, fn, (p, ptr(x), x.size, ptr(out), out.size, num_threads()), (),
                      ((0, 1), (OUT, 3)))


def _plan_max_pool2d(data: Array, *, pool_size: Sequence[int],
                     strides: Optional[Sequence[int]] = None,
                     padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                     ceil_mode: bool = False, data_layout: str = "NCHW",
                     out: Optional[Array] = None, strict: bool = False):
    return _plan_pool("nn.max_pool2d", lib.lgk_max_pool2d_nchw, data, pool_size, strides,
                      padding, dilation, ceil_mode, False, data_layout, out, strict)


def _plan_avg_pool2d(data: Array, *, pool_size: Sequence[int],
                     strides: Optional[Sequence[int]] = None,
                     padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                     ceil_mode: bool = False, count_include_pad: bool = False,
                     data_layout: str = "NCHW", out: Optional[Array] = None, strict: bool = False):
    return _plan_pool("nn.avg_pool2d", lib.lgk_avg_pool2d_nchw, data, pool_size, strides,
                      padding, dilation, ceil_mode, count_include_pad, data_layout, out, strict)


def nn_max_pool2d(data: Array, *, pool_size: Sequence[int], strides: Optional[Sequence[int]] = None,
                  padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                  ceil_mode: bool = False, data_layout: str = "NCHW",
                  out: Optional[Array] = None) -> Array:
    """nn.max_pool2d (NCHW); padded cells are -inf."""
    return run_call(*_plan_max_pool2d(data, pool_size=pool_size, strides=strides,
                                      padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                                      data_layout=data_layout, out=out))


def nn_avg_pool2d(data: Array, *, pool_size: Sequence[int], strides: Optional[Sequence[int]] = None,
                  padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                  ceil_mode: bool = False, count_include_pad: bool = False,
                  data_layout: str = "NCHW", out: Optional[Array] = None) -> Array:
    """nn.avg_pool2d (NCHW, ONNX AveragePool). With count_include_pad the divisor
    counts taps inside the padded input (windows are clipped at its end, as in
    PyTorch / ONNX Runtime for ceil_mode)."""
    return run_call(*_plan_avg_pool2d(data, pool_size=pool_size, strides=strides,
                                      padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                                      count_include_pad=count_include_pad,
                                      data_layout=data_layout, out=out))


bound(nn_conv2d, _plan_conv2d)
# A constant weight (input 1) may be packed once by `pack` (None: not for this call).
nn_conv2d.packed_input, nn_conv2d.pack = (1, True), pack_conv_weight
# The planner may fuse a following activation the C epilogue has (no bias add: conv
# biases are per channel, not per column).
nn_conv2d.epilogue = nn_conv2d
bound(nn_max_pool2d, _plan_max_pool2d)
bound(nn_avg_pool2d, _plan_avg_pool2d)
