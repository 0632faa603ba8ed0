"""Typed Python wrappers of the C kernels, one module per C source (gemm, conv_pool,
elementwise, norms; common helpers in common).

Every public kernel follows the reference-kernel convention ``kernel(*inputs, **attrs)``:
inputs positionally, every attribute as a keyword (defaults as in docs/ops.md; list
attributes may be tuples), returning a new float32 ndarray. Each also takes ``out=``: a
preallocated C-contiguous float32 array of the result's shape, which is filled and
returned (for executors that plan buffers). ``out`` may alias an input.

Before any call into C the inputs are validated: dtype float32, consistent shapes,
valid attributes. Non-contiguous inputs are passed as strided views where the C kernel
supports it (GEMM operands, broadcasting binary ops, permute) and copied otherwise.
Every failure raises :class:`legato.ir.errors.ExecutionError` (a ``LegatoError``) whose
message names the op; attribute combinations a kernel does not implement (e.g. NHWC
conv) raise it too, saying so.

Function names are the op names with ``.`` replaced by ``_`` (``nn.layer_norm`` ->
``nn_layer_norm``), plus a trailing ``_`` where that would shadow a Python builtin
(``abs_``, ``sum_``, ``max_``, ``min_``). ``KERNELS`` maps op names to the functions.
The elementwise kernels are made from the C library's own list of ops (see
:mod:`.elementwise`): an op added to csrc/elementwise.c is a kernel here; the integer
arithmetic ops among them also take integer tensors; ``cast`` converts between
dtypes and ``isnan`` tests floats (:mod:`.casts`). Data movement
and comparisons of any dtype (slices, concat, split, pad, take, where, ...) are numpy
copies and ufuncs whose views `bind` works out once (:mod:`.movement`).

Prepared calls: every kernel has ``kernel.bind(*inputs, out=..., **attrs)``, a
zero-argument callable that computes the kernel into ``out`` on each call. Where the
buffers allow it (dense, aligned, no overlap other than an exact in-place update) that
is the one C call with its arguments fixed, marked ``.direct``; else a call of the
kernel. A planned executor binds every step once and then only makes those calls.

Constant weights: :func:`pack_weight` packs a 2-D right operand once (the layout the GEMM
micro-kernel reads); the resulting :class:`PackedWeight` is accepted by ``matmul``,
``nn_linear`` and the fused variants in place of ``b`` / ``weight`` and saves the
per-call packing of B (15-25% of a GEMM at M = 64..128). :func:`pack_conv_weight` does the
same for an nn.conv2d weight with groups == 1 (:class:`PackedConvWeight`).

Quantized ops (:mod:`.qnn`, :mod:`.qnn_elementwise`): qnn.conv2d, qnn.linear, qnn.matmul,
qnn.add, qnn.quantize and qnn.dequantize on int8/uint8 tensors
with onnxruntime's arithmetic, on the int8 GEMM (AVX-512 VNNI / AVX2 / portable); their
constant weights are packed once as well.

Threads: ``LEGATO_NUM_THREADS`` (read at every call, and by ``bind`` for the call it
prepares; default: the usable cores, at most 2, measured fastest on the 2-core target).
Small problems always run single-threaded.
"""

from __future__ import annotations

from collections.abc import Callable

from legato.plugin_api import REGISTRY

from . import casts, elementwise, movement, qnn, qnn_elementwise, qnn_rescale, qpool
from .common import MAX_NDIM, Array, bind_generic, num_threads, release_scratch
from .casts import cast, isnan
from .conv_pool import (PackedConvWeight, nn_avg_pool2d, nn_conv2d, nn_max_pool2d,
                        pack_conv_weight)
from .elementwise import python_name
from .gemm import (ACTIVATIONS, PackedWeight, fused_linear, fused_matmul, matmul,
                   matmul_softmax, nn_linear, pack_weight)
from .norms import (max_, mean, min_, nn_layer_norm, nn_log_softmax, nn_rms_norm, nn_softmax,
                    sum_)

KERNELS: dict[str, Callable[..., Array]] = {
    "matmul": matmul,
    "nn.linear": nn_linear,
    "nn.conv2d": nn_conv2d,
    "nn.max_pool2d": qpool.max_pool2d,  # float32 on nn_max_pool2d, bytes on qpool.c
    "nn.avg_pool2d": nn_avg_pool2d,
    **elementwise.KERNELS,
    "nn.softmax": nn_softmax,
    "nn.log_softmax": nn_log_softmax,
    "nn.layer_norm": nn_layer_norm,
    "nn.rms_norm": nn_rms_norm,
    "sum": sum_,
    "mean": mean,
    "max": max_,
    "min": min_,
    **movement.KERNELS,
    **casts.KERNELS,
    # the int8 kernels of the qnn ops this legato defines (kernels/qnn.py)
    **{op: kernel for op, kernel in {**qnn.KERNELS, **qnn_elementwise.KERNELS,
                                    **qnn_rescale.KERNELS}.items()
       if op in REGISTRY},
}

# the elementwise kernels under their function names (exp, abs_, nn_relu, ...)
globals().update({python_name(op): kernel for op, kernel in elementwise.KERNELS.items()})

__all__ = [
    "KERNELS", "ACTIVATIONS", "MAX_NDIM", "num_threads", "release_scratch", "bind_generic",
    "PackedWeight", "pack_weight", "fused_linear", "fused_matmul", "matmul_softmax",
    "PackedConvWeight",
    "pack_conv_weight", "cast", "isnan",
    *sorted({python_name(op) for op in KERNELS}),
]
