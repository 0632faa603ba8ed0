"""Einsum contraction as the importers write it: two operands with lettered dims become one
batched matmul (dims only one side has and nobody keeps are summed first)."""
from __future__ import annotations

import math


def sum_others(b, x, term: str, wanted: str):
    """x summed over the dims of `term` not in `wanted`; (value, its term)."""
    gone = [i for i, c in enumerate(term) if c not in wanted]
    if not gone:
        return x, term
    return b.call("sum", x, axes=gone), "".join(c for c in term if c in wanted)


def contract(b, x, xt: str, y, yt: str, keep: str):
    """x (dims xt) times y (dims yt), summed over the shared dims not in `keep`: one
    batched matmul (batch: shared and kept; left/right: only in x/y; inner: summed)."""
    # dims only one side has and nobody keeps are summed on that side first
    x, xt = sum_others(b, x, xt, yt + keep)
    y, yt = sum_others(b, y, yt, xt + keep)
    batch = [c for c in xt if c in yt and c in keep]
    inner = [c for c in xt if c in yt and c not in keep]
    left = [c for c in xt if c not in yt]
    right = [c for c in yt if c not in xt]
    dim = {**dict(zip(xt, x.shape)), **dict(zip(yt, y.shape))}

    def size(letters):
        return math.prod(dim[c] for c in letters)
    x = b.call("permute_dims", x, axes=[xt.index(c) for c in batch + left + inner])
    y = b.call("permute_dims", y, axes=[yt.index(c) for c in batch + inner + right])
    x = b.call("reshape", x, shape=[size(batch), size(left), size(inner)])
    y = b.call("reshape", y, shape=[size(batch), size(inner), size(right)])
    z = b.call("matmul", x, y)
    z = b.call("reshape", z, shape=[dim[c] for c in batch + left + right])
    return z, "".join(batch + left + right)
