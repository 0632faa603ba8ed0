"""Level-0 ops besides the elementwise ones (elementwise.py): reductions, matmul, data
movement and the tunnelled custom op."""
from __future__ import annotations

import numpy as np

from ..ir import CUSTOM_OP, TensorType
from ..ir.shapes import resolve_reshape, slice_params, split_sizes  # split and slice: re-exported
from . import layout_rules
from .base import (broadcast_shapes, fail, is_float, norm_axes, norm_axis, primitive,
                   reduced_shape, same_dtype)

INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")

# --- reductions ---------------------------------------------------------------------------


def _reduce(types, attrs):
    (t,) = types
    axes = norm_axes(attrs["axes"], t.rank)
    for a in axes:
        if t.shape[a] == 0:
            fail(f"cannot reduce over empty axis {a} of shape {list(t.shape)}")
    return TensorType(reduced_shape(t.shape, axes, attrs["keepdims"]), t.dtype)


REDUCE_ATTRS = {"axes": ("ints?", None), "keepdims": ("bool", False)}
for _name, _doc in (("sum", "sum over `axes`"), ("max", "maximum over `axes`"),
                   ("min", "minimum over `axes`"), ("prod", "product over `axes`")):
    primitive(_name, "data", _reduce, "reduce", REDUCE_ATTRS, tolerance=None if
              _name in ("sum", "prod") else 0.0, layout_rule=layout_rules.reduce,
              doc=f"{_doc} (`None`: every axis, `[]`: none; negative axes count from the "
                  "end); a reduced axis may not be empty")


def _argmax(types, attrs):
    (t,) = types
    axis = norm_axis(attrs["axis"], t.rank)
    if t.shape[axis] == 0:
        fail(f"cannot take the argmax over empty axis {axis} of shape {list(t.shape)}")
    return TensorType(reduced_shape(t.shape, (axis,), attrs["keepdims"]), "int64")


primitive("argmax", "data", _argmax, "reduce",
          {"axis": ("int", 0), "keepdims": ("bool", True), "select_last_index": ("bool", False)},
          tolerance=0.0, doc="index of the maximum along `axis`, as int64 (ONNX ArgMax); the "
                             "axis may not be empty")

# --- matmul -------------------------------------------------------------------------------


def _matmul(types, attrs):
    a, b = types
    dtype = same_dtype(types)
    if dtype == "bool":
        fail("matmul needs numeric tensors, got bool")
    if a.rank == 0 or b.rank == 0:
        fail("matmul inputs must have rank >= 1")
    ash = (1,) + a.shape if a.rank == 1 else a.shape
    bsh = b.shape + (1,) if b.rank == 1 else b.shape
    if ash[-1] != bsh[-2]:
        fail(f"inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast_shapes(ash[:-2], bsh[:-2])
    out = batch + ((ash[-2],) if a.rank > 1 else ()) + ((bsh[-1],) if b.rank > 1 else ())
    return TensorType(out, dtype)


primitive("matmul", "a, b", _matmul, "out_elemwise_fusable", onnx="MatMul",
          doc="`numpy.matmul` (1-D operands promoted, batch dims broadcast)")

# --- data movement ------------------------------------------------------------------------


def resolve_shape(data: TensorType, shape) -> tuple[int, ...]:
    """Resolve one -1 in a reshape target of `data`; errors on size mismatch."""
    return resolve_reshape(data.shape, shape)


def _reshape(types, attrs):
    return TensorType(resolve_shape(types[0], attrs["shape"]), types[0].dtype)


def _permute(types, attrs):
    (t,) = types
    axes = attrs["axes"]
    axes = tuple(reversed(range(t.rank))) if axes is None else tuple(
        norm_axis(a, t.rank) for a in axes)
    if sorted(axes) != list(range(t.rank)):
        fail(f"axes {list(attrs['axes'])} are not a permutation of {t.rank} dims")
    return TensorType(tuple(t.shape[a] for a in axes), t.dtype)


def _broadcast_to(types, attrs):
    (t,) = types
    shape = tuple(attrs["shape"])
    if any(isinstance(d, int) and d < 0 for d in shape):
        fail(f"shape {list(shape)} has a negative dimension")
    if broadcast_shapes(t.shape, shape) != shape:
        fail(f"cannot broadcast {list(t.shape)} to {list(shape)}")
    return TensorType(shape, t.dtype)


def _concat(types, attrs):
    first = types[0]
    dtype = same_dtype(types)
    axis = norm_axis(attrs["axis"], first.rank)
    for t in types[1:]:
        if t.rank != first.rank or any(d != e for i, (d, e) in
                                       enumerate(zip(t.shape, first.shape)) if i != axis):
            fail(f"cannot concatenate {list(first.shape)} and {list(t.shape)} on axis {axis}")
    total = sum(t.shape[axis] for t in types)
    return TensorType(first.shape[:axis] + (total,) + first.shape[axis + 1:], dtype)


def _split(types, attrs):
    (t,) = types
    axis = norm_axis(attrs["axis"], t.rank)
    return tuple(TensorType(t.shape[:axis] + (s,) + t.shape[axis + 1:], t.dtype)
                 for s in split_sizes(t.shape[axis], attrs["sections"]))


def _strided_slice(types, attrs):
    (t,) = types
    return TensorType(tuple(p[3] for p in slice_params(t.shape, attrs)), t.dtype)


def _take(types, attrs):
    data, indices = types
    if indices.dtype not in INT_DTYPES:
        fail(f"indices must be integers, got {indices.dtype}")
    axis = norm_axis(attrs["axis"], data.rank)
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)


def _pad(types, attrs):
    (t,) = types
    pads = attrs["pads"]
    if len(pads) != 2 * t.rank or any(p < 0 for p in pads):
        fail(f"pads {list(pads)} must be {2 * t.rank} non-negative ints (begins, then ends)")
    if t.dtype == "bool" and attrs["value"] not in (0.0, 1.0):
        fail(f"pad value {attrs['value']} is not a bool (0 or 1)")
    if t.dtype != "bool" and not is_float(t.dtype) and not (
            float(attrs["value"]).is_integer() and
            np.iinfo(t.dtype).min <= attrs["value"] <= np.iinfo(t.dtype).max):
        fail(f"pad value {attrs['value']} is not representable in {t.dtype}")
    if attrs["mode"] == "reflect" and any(
            max(pads[i], pads[i + t.rank]) >= d for i, d in enumerate(t.shape)
            if pads[i] or pads[i + t.rank]):
        fail(f"reflect padding {list(pads)} must be smaller than the dims {list(t.shape)}")
    return TensorType(tuple(d + pads[i] + pads[i + t.rank] for i, d in enumerate(t.shape)),
                      t.dtype)


primitive("reshape", "data", _reshape, "injective", {"shape": ("dims",)}, tolerance=0.0,
          doc="the same elements in a new shape; one `-1` is inferred")
primitive("permute_dims", "data", _permute, "injective", {"axes": ("ints?", None)},
          tolerance=0.0, layout_rule=layout_rules.permute_dims,
          doc="`numpy.transpose`; `axes=None` reverses the dims")
primitive("broadcast_to", "data", _broadcast_to, "broadcast", {"shape": ("dims",)},
          tolerance=0.0, layout_rule=layout_rules.broadcast_to, doc="`numpy.broadcast_to`")
primitive("concat", "*data", _concat, "injective", {"axis": ("int", 0)}, tolerance=0.0,
          layout_rule=layout_rules.concat, doc="`numpy.concatenate`, at least one input")
primitive("split", "data", _split, "injective",
          {"sections": ("int|ints", 2), "axis": ("int", 0)}, tolerance=0.0,
          layout_rule=layout_rules.one_axis,
          doc="several results: an int is that many equal parts (it must divide the dim), a "
              "list the size of each part (summing to the dim)")
primitive("strided_slice", "data", _strided_slice, "injective",
          {"begin": ("dims",), "end": ("dims",), "strides": ("ints?", None),
           "axes": ("ints?", None)}, tolerance=0.0,
          doc="ONNX Slice: `axes=None` is `0..len(begin)-1`; negative indices count from "
              "the end; out-of-range indices are clamped; negative strides allowed")
primitive("take", "data, indices", _take, "injective", {"axis": ("int", 0)}, tolerance=0.0,
          doc="ONNX Gather: integer indices (negative ones count from the end); shape "
              "`data.shape[:axis] + indices.shape + data.shape[axis+1:]`")
primitive("pad", "data", _pad, "injective",
          {"pads": ("ints",), "value": ("float", 0.0), "mode": ("str:constant|reflect|edge",
                                                                "constant")}, tolerance=0.0,
          doc="ONNX Pad: `pads` is all begins then all ends, non-negative; `mode` "
              "`constant`, `reflect` or `edge`")

# --- tunnelled custom ops -----------------------------------------------------------------


def _custom(types, attrs):
    try:
        return tuple(TensorType(tuple(shape), dtype) for shape, dtype in attrs["result_types"])
    except (TypeError, ValueError) as err:
        fail(f"result_types must be a list of [shape, dtype] pairs: {err}")


primitive(CUSTOM_OP, "*data", _custom, "opaque",
          {"operator_name": ("str",), "domain_name": ("str", "legato"),
           "implementation_attrs": ("str", "{}"), "result_types": ("any",)},
          doc="a kept op tunnelled to a backend that handles it itself "
              "(docs/custom-ops.md)")
