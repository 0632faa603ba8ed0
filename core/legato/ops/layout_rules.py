"""Layout rules of the core ops: how each layout-sensitive op runs on values laid out in
another layout (legato.passes.layout's pass calls them). Each op names its rule in its
definition (`layout_rule=`).

A rule gets the pass's context and the call; it returns (new value, perm) per result, with
`original == permute_dims(new, perm)` (perm None: the identity), or None to run the op in
the original layout. Rules only look at attributes and constants, so this module needs no
registry.
"""
from __future__ import annotations

import numpy as np

from ..ir import Call, Const
from ..ir.shapes import norm_axes

LAYOUTS = ("NCHW", "NHWC")
Perm = tuple  # original = permute_dims(new, perm); None is the identity


def layout_perm(src: str, dst: str) -> Perm | None:
    """perm with tensor_in_src == permute_dims(tensor_in_dst, perm)."""
    perm = tuple(dst.index(c) for c in src)
    return None if perm == tuple(range(len(perm))) else perm


def compose_perms(first: Perm, then: Perm) -> Perm | None:
    perm = tuple(first[i] for i in then)
    return None if perm == tuple(range(len(perm))) else perm


def inverse_perm(perm: Perm) -> Perm:
    return tuple(int(i) for i in np.argsort(perm))


def _first_perm(ctx, call):
    return next((ctx.get(v)[1] for v in call.inputs if ctx.get(v)[1] is not None), None)


def propagate(ctx, call: Call):
    """Elementwise and broadcast ops: run on the permuted values, carry the perm."""
    perm = _first_perm(ctx, call)
    if perm is None or call.outputs[0].rank != len(perm):
        return None
    inputs = []
    for v in call.inputs:
        if v is None:
            inputs.append(None)
        elif v.rank == len(perm):
            inputs.append(ctx.in_perm(v, perm))
        elif isinstance(v, Const) and v.rank < len(perm):  # align a broadcast constant
            full = v.data.reshape((1,) * (len(perm) - v.rank) + v.data.shape)
            inputs.append(ctx.in_perm(Const.of(full), perm))
        elif v.rank == 0:  # its converted value: the conversion may have made it anew
            inputs.append(ctx.original(v))
        else:
            return None
    new = ctx.emit(call, inputs)
    return [(o, perm) for o in new.outputs]


def data_layout(ctx, call: Call):
    source = call.attrs["data_layout"]
    if source == ctx.target:
        return None
    perm = layout_perm(source, ctx.target)
    inputs = [ctx.in_perm(call.inputs[0], perm)] + [ctx.original(v) for v in call.inputs[1:]]
    new = ctx.emit(call, inputs, data_layout=ctx.target)
    return [(new.outputs[0], perm)]


def permute_dims(ctx, call: Call):
    """Emit nothing: a transpose is a perm carried until a consumer needs it materialized,
    so permute pairs (ours and the model's) cancel."""
    new, perm = ctx.get(call.inputs[0])
    axes = call.attrs["axes"] or tuple(reversed(range(call.inputs[0].rank)))
    axes = tuple(a % call.inputs[0].rank for a in axes)
    if isinstance(new, Const):
        return None
    composed = tuple(axes) if perm is None else compose_perms(perm, axes)
    identity = tuple(range(len(axes)))
    return [(new, None if composed in (None, identity) else composed)]


def one_axis(ctx, call: Call):
    new, perm = ctx.get(call.inputs[0])
    if perm is None:
        return None
    axis = call.attrs["axis"] % call.inputs[0].rank
    out = ctx.emit(call, [new], axis=perm[axis])
    return [(o, perm) for o in out.outputs]


def broadcast_to(ctx, call: Call):
    """The target shape follows the value's layout."""
    new, perm = ctx.get(call.inputs[0])
    shape = call.attrs["shape"]
    if perm is None or len(shape) != len(perm):
        return None
    out = ctx.emit(call, [new], shape=[shape[i] for i in inverse_perm(perm)])
    return [(out.outputs[0], perm)]


def concat(ctx, call: Call):
    perm = _first_perm(ctx, call)
    if perm is None:
        return None
    axis = call.attrs["axis"] % call.inputs[0].rank
    out = ctx.emit(call, [ctx.in_perm(v, perm) for v in call.inputs], axis=perm[axis])
    return [(out.outputs[0], perm)]


def reduce(ctx, call: Call):
    new, perm = ctx.get(call.inputs[0])
    if perm is None:
        return None
    rank = len(perm)
    axes = norm_axes(call.attrs["axes"], rank)
    out = ctx.emit(call, [new], axes=sorted(perm[a] for a in axes))
    if call.attrs["keepdims"]:
        return [(out.outputs[0], perm)]
    kept = [i for i in range(rank) if i not in set(axes)]
    kept_new = sorted(perm[i] for i in kept)
    out_perm = tuple(kept_new.index(perm[i]) for i in kept)
    return [(out.outputs[0], None if out_perm == tuple(range(len(kept))) else out_perm)]


def norm(ctx, call: Call):
    data, *params = call.inputs
    new, perm = ctx.get(data)
    if perm is None or any(p is not None and not isinstance(p, Const) for p in params):
        return None
    rank = len(perm)
    axes = sorted(perm[a] for a in norm_axes(call.attrs["axes"], rank))
    aligned = [None if p is None else ctx.in_perm(
        Const.of(p.data.reshape((1,) * (rank - p.rank) + p.data.shape)), perm) for p in params]
    out = ctx.emit(call, [new, *aligned], axes=axes)
    return [(out.outputs[0], perm)]


def batch_norm(ctx, call: Call):
    data, *params = call.inputs
    new, perm = ctx.get(data)
    if perm is None:
        return None
    out = ctx.emit(call, [new, *params], axis=perm[call.attrs["axis"] % data.rank])
    return [(out.outputs[0], perm)]
