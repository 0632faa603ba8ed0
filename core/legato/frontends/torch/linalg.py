"""ATen's determinants and nn.Bilinear's product: `_linalg_det`, `_linalg_slogdet` (by
elimination, linalg.py) and `_trilinear` (as an einsum of three operands, contracted
pairwise by matmuls). They register in ops.ATEN."""
from __future__ import annotations

import string

from ...ir.errors import LegatoError
from ..common import linalg
from ..common.einsum import contract
from .ops import aten


def _square(a, op: str):
    if a.rank < 2 or a.shape[-1] != a.shape[-2] or not a.dtype.startswith("float"):
        raise LegatoError(f"{op} needs a float tensor of square matrices, got {a.type}")


@aten("aten._linalg_det.default")
def linalg_det(b, a):
    """(det, LU, pivots): the factors serve backward only, and are not computed."""
    _square(a, "det")
    return linalg.det(b, a), None, None


@aten("aten._linalg_slogdet.default")
def linalg_slogdet(b, a):
    """(sign, log |det|, LU, pivots): the factors serve backward only."""
    _square(a, "slogdet")
    return (*linalg.slogdet(b, a), None, None)


@aten("aten._trilinear.default")
def trilinear(b, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """Each operand unsqueezed at its `expand` dims, the three multiplied (broadcasting)
    and summed over `sumdim`: an einsum whose letters are the output's dims."""
    rank = i1.rank + len(expand1)
    letters = string.ascii_letters[:rank]
    operands, terms = [], []
    for x, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        term = "".join(c for d, c in enumerate(letters) if d not in expand)
        if len(term) != x.rank:
            raise LegatoError(f"_trilinear operand {x.type} with expand dims {list(expand)} "
                              f"does not have {rank} dims")
        operands.append(x)
        terms.append(term)
    sizes = {c: ([x.shape[t.index(c)] for x, t in zip(operands, terms)
                  if c in t and x.shape[t.index(c)] != 1] or [1])[0]
             for c in letters if any(c in t for t in terms)}
    operands = [x if list(x.shape) == [sizes[c] for c in t] else
                b.broadcast_to(x, shape=[sizes[c] for c in t])
                for x, t in zip(operands, terms)]
    keep = "".join(c for d, c in enumerate(letters) if d not in sumdim)
    value, term = contract(b, operands[0], terms[0], operands[1], terms[1], keep + terms[2])
    value, term = contract(b, value, term, operands[2], terms[2], keep)
    gone = [i for i, c in enumerate(term) if c not in keep]
    if gone:
        value, term = b.sum(value, axes=gone), "".join(c for c in term if c in keep)
    missing = [c for c in keep if c not in term]  # expanded in all three: size 1
    if missing:
        value = b.reshape(value, shape=[*value.shape, *[1] * len(missing)])
        term += "".join(missing)
    if term != keep:
        value = b.permute_dims(value, axes=[term.index(c) for c in keep])
    return value
