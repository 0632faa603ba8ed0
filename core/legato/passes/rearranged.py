"""Inputs of a recovered op that the rewrite computes (legato.passes.matching): exporters
move attention's heads and keys around with reshapes and transposes that the op's form
writes differently; a chain of them is solved once into one reshape and one transpose.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..ir import Call, TensorType, Value


class Rearranged(NamedTuple):
    """An op input the rewrite computes from a graph value: `base` reshaped to `shape`
    (None: as it is), then transposed by `axes` (None: not). Exporters move attention's
    heads and keys around with reshapes and transposes the op's form writes differently."""

    base: Value
    shape: tuple | None
    axes: tuple | None

    @property
    def type(self) -> TensorType:
        return TensorType(*self.type_key)

    @property
    def type_key(self) -> tuple:
        """(shape, dtype) of `type`, without making (and checking) a TensorType: region
        keys ask for it at every try."""
        shape = self.shape if self.shape is not None else self.base.shape
        if self.axes is not None:
            shape = tuple([shape[a] for a in self.axes])
        return shape, self.base.dtype


_REARRANGEMENTS: dict = {}


def _rearrangement(base: Value, chain: list[Call], inverse: tuple):
    """`base` through the reshapes and transposes of `chain`, then transposed by
    `inverse`, as one Rearranged (or `base` itself), or None if it is not one."""
    key = (base.shape, inverse, tuple((c.op, c.outputs[0].shape, _perm(c, c.outputs[0].rank)
                                       if c.op == "permute_dims" else None) for c in chain))
    found = _REARRANGEMENTS.get(key, False)
    if found is False:  # shapes and permutations decide it: layers repeat them
        if len(_REARRANGEMENTS) > 1024:
            _REARRANGEMENTS.clear()
        found = _REARRANGEMENTS[key] = _solve_rearrangement(base.shape, chain, inverse)
    if found is None:
        return None
    shape, axes = found
    return base if shape is None and axes is None else Rearranged(base, shape, axes)


def _solve_rearrangement(shape: tuple, chain: list[Call], inverse: tuple):
    """(reshape to, then transpose by) that `_rearrangement` describes, by following the
    element indices through the chain; None if no such pair exists."""
    size = int(np.prod(shape, dtype=np.int64))
    index = np.arange(size).reshape(shape)
    for call in chain:
        index = index.reshape(call.outputs[0].shape) if call.op == "reshape" else \
            np.transpose(index, _perm(call, index.ndim))
    wanted = np.transpose(index, inverse)
    if np.array_equal(wanted.ravel(), np.arange(wanted.size)):
        return (None if wanted.shape == shape else wanted.shape), None
    if wanted.ndim != len(shape):
        return None
    strides = np.cumprod((1,) + shape[:0:-1])[::-1]  # row-major strides of base
    axes, free = [], set(range(len(shape)))
    for i, n in enumerate(wanted.shape):
        step = int(wanted[(0,) * i + (1,) + (0,) * (wanted.ndim - i - 1)]) if n > 1 else None
        match = next((a for a in sorted(free) if shape[a] == n and
                      (step is None or strides[a] == step)), None)
        if match is None:
            return None
        axes.append(match)
        free.discard(match)
    axes = tuple(axes)
    ok = np.array_equal(np.transpose(np.arange(size).reshape(shape), axes), wanted)
    return (None, axes) if ok else None



def _perm(call: Call, rank: int) -> tuple:
    axes = call.attrs.get("axes")
    return tuple(range(rank - 1, -1, -1)) if axes is None else \
        tuple(a % rank for a in axes)

