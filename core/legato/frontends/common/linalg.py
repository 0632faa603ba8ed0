"""Determinants as the importers write them: Gaussian elimination with partial pivoting,
unrolled over the static matrix size. Each column's largest remaining entry is swapped up
(gathers at run-time positions, the sign flipping per swap) and the rows below are
eliminated; the determinant is the product of the diagonal left, times the sign."""
from __future__ import annotations

import numpy as np

from ...ir import Const


def eliminated(b, a):
    """(diagonal, sign) of a's batch of square float matrices (..., n, n) after elimination:
    det = sign * prod(diagonal), and a singular matrix leaves a 0 on the diagonal."""
    n, last = a.shape[-1], a.rank - 1
    rows = Const.of(np.arange(n, dtype=np.int64))
    column_rows = Const.of(np.arange(n, dtype=np.int64).reshape(n, 1))
    sign = Const.of(np.ones((), a.dtype))
    for j in range(n):
        column = b.squeeze(b.strided_slice(a, begin=[j], end=[j + 1], axes=[last]),
                           axes=[last])
        candidates = b.where(b.greater_equal(rows, j), b.abs(column), -1.0)
        pivot_row = b.argmax(candidates, axis=-1, keepdims=True)
        order = b.where(b.equal(rows, j), pivot_row,
                        b.where(b.equal(rows, pivot_row), j, rows))
        order = b.broadcast_to(b.expand_dims(order, axes=[last]), shape=list(a.shape))
        a = b.gather_elements(a, order, axis=last - 1)
        swapped = b.squeeze(b.not_equal(pivot_row, j), axes=[last - 1])
        sign = b.where(swapped, b.negative(sign), sign)
        pivot = b.strided_slice(a, begin=[j, j], end=[j + 1, j + 1], axes=[last - 1, last])
        safe = b.where(b.equal(pivot, 0.0), 1.0, pivot)
        column = b.strided_slice(a, begin=[j], end=[j + 1], axes=[last])
        factors = b.where(b.greater(column_rows, j), b.divide(column, safe), 0.0)
        pivot_row_values = b.strided_slice(a, begin=[j], end=[j + 1], axes=[last - 1])
        a = b.subtract(a, b.multiply(factors, pivot_row_values))
    diagonal = b.sum(b.multiply(a, Const.of(np.eye(n, dtype=a.dtype))), axes=[last],
                     keepdims=False)
    return diagonal, sign


def _empty(a, value: float) -> Const:
    """What every 0 x 0 matrix of the batch gives: det 1 (an empty product)."""
    return Const.of(np.full(a.shape[:-2], value, a.dtype))


def det(b, a):
    if a.shape[-1] == 0:
        return _empty(a, 1.0)
    diagonal, sign = eliminated(b, a)
    return b.multiply(b.prod(diagonal, axes=[a.rank - 2], keepdims=False), sign)


def slogdet(b, a):
    """(sign, log |det|): the log a sum of logs, so it does not overflow where det would;
    a singular matrix gives (0, -inf)."""
    if a.shape[-1] == 0:
        return _empty(a, 1.0), _empty(a, 0.0)
    diagonal, sign = eliminated(b, a)
    axis = a.rank - 2
    signs = b.multiply(b.prod(b.sign(diagonal), axes=[axis], keepdims=False), sign)
    return signs, b.sum(b.log(b.abs(diagonal)), axes=[axis], keepdims=False)
