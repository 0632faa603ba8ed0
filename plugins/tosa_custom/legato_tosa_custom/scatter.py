"""scatter_elements (ONNX ScatterElements, torch scatter / index_put, ScatterND) on TOSA 1.0.

TOSA SCATTER writes whole rows at indices that must not repeat and has no reductions, and
run-time indices cannot be proven distinct. So the scatter is a one-hot comparison of the
indices with every position of the axis, a reduction over the updates that hit each
position (max for `none`: one of the updates written twice, as legato allows), and a select
between that and the data where some update hit. Memory: indices x axis size booleans.
Integer and bool data go through float32 (integers.py).
"""
from __future__ import annotations

import numpy as np
from legato.plugin_api import Const, is_float, norm_axis

from .integers import INT_DTYPES, via_float_call
from .limits import shaped_rule
from .narrowing import narrow_array
from .rules import permute, reshape

# what a position no update hits holds before the reduction, and the reduction
FILL = {"none": -np.inf, "max": -np.inf, "min": np.inf, "add": 0.0, "mul": 1.0}
REDUCE = {"none": "max", "max": "max", "min": "min", "add": "sum", "mul": "prod"}
COMBINE = {"max": "maximum", "min": "minimum", "add": "add", "mul": "multiply"}


def _float_indices(b, indices, size: int):
    """The indices as float32, negatives counted from the end."""
    if isinstance(indices, Const):
        given = narrow_array(indices.data, "scatter_elements' index constant").astype(np.int64)
        return b.const(np.where(given < 0, given + size, given).astype(np.float32))
    index = b.cast(indices, dtype="float32")
    return b.where(b.less(index, 0.0), b.add(index, float(size)), index)


@shaped_rule
def scatter_elements(b, call):
    data, indices, updates = call.inputs
    if data.dtype in INT_DTYPES or data.dtype == "bool":
        return via_float_call(b, call, [0, 2], scatter_elements)
    if not is_float(data.dtype) or not (isinstance(indices, Const) or
                                        indices.dtype in INT_DTYPES):
        return None
    reduction, rank = call.attrs["reduction"], data.rank
    axis = norm_axis(call.attrs["axis"], rank)
    size = data.shape[axis]
    order = [a for a in range(rank) if a != axis] + [axis]  # the scattered axis last
    x, upd = permute(b, data, order), permute(b, updates, order)
    idx = _float_indices(b, permute(b, indices, order), size)
    short = [d - i for d, i in zip(x.shape[:-1], idx.shape[:-1])]
    if any(short):  # positions off the axis that no index reaches: index -1 hits nothing
        pads = [0] * rank + short + [0]
        idx, upd = b.pad(idx, pads=pads, value=-1.0), b.pad(upd, pads=pads, value=0.0)
    hit = b.equal(reshape(b, idx, idx.shape + (1,)),
                  b.const(np.arange(size, dtype=np.float32)))  # [..., updates, axis]
    picked = b.where(hit, reshape(b, upd, upd.shape + (1,)), b.scalar(FILL[reduction],
                                                                     x.dtype))
    value = b.call(REDUCE[reduction], picked, axes=[rank - 1], keepdims=False)
    written = b.greater(b.max(b.where(hit, b.scalar(1.0, x.dtype), b.scalar(0.0, x.dtype)),
                              axes=[rank - 1], keepdims=False), 0.0)
    if reduction != "none" and call.attrs.get("include_self", True):
        value = b.call(COMBINE[reduction], x, value)
    return permute(b, b.where(written, value, x), [int(a) for a in np.argsort(order)])
