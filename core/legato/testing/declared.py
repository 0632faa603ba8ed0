"""What a backend declares legal, as the combinations the conformance check must sample:
each dtype of a condition's `dtypes` list crossed with each branch of its attribute
conditions (`data_layout: [NCHW, NHWC]` is two branches).

    for combo in combinations("nn.conv2d", backend.legal["nn.conv2d"]):
        drawn, _ = draw(combo, seed=0, count=12)   # samples of that dtype and branch

Drawn samples of the dtype whose attributes differ are also tried with the branch's
values put in. A combination still without samples is reported, not skipped silently: a
backend's claim the kit never ran is a claim nobody tested.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from ..ir import thaw_attr
from ..ir.errors import LegatoError
from .samples import SampleError, checked, default_registry, samples

MAX_COMBINATIONS = 64   # per op: dtype lists crossed with attribute branches grow fast
ROUNDS = 6              # draws (of `count` each, new seeds) before a combination is given up


@dataclass(frozen=True)
class Combination:
    """One declared (dtype, attribute branch) of an op; dtype None: any dtype."""

    op: str
    dtype: str | None = None
    attrs: tuple = ()   # ((key, value), ...), values as conditions hold them

    def label(self) -> str:
        branch = ", ".join(f"{k}: {thaw_attr(v)}" for k, v in self.attrs)
        return " ".join(filter(None, (self.op, branch and f"{{{branch}}}", self.dtype)))

    def matches(self, sample) -> bool:
        dtypes = {a.dtype.name for a in sample.inputs if a is not None}
        return (self.dtype is None or self.dtype in dtypes) and \
            all(sample.attrs.get(k) == v for k, v in self.attrs)


def combinations(op: str, condition) -> list[Combination]:
    """The combinations `condition` (a backend.Condition, or None) declares for `op`; one
    combination of any dtype when it names neither dtypes nor attribute values."""
    dtypes = sorted(condition.dtypes) if condition is not None and condition.dtypes else [None]
    attrs = dict(condition.attrs) if condition is not None else {}
    keys = sorted(attrs)
    branches = itertools.product(*(attrs[k] for k in keys))
    return [Combination(op, dtype, tuple(zip(keys, branch)))
            for branch in branches for dtype in dtypes]


def declares(condition) -> bool:
    """Whether the condition names dtypes or attribute values (anything to cross)."""
    return condition is not None and bool(condition.dtypes or condition.attrs)


def draw(combo: Combination, seed: int, count: int, accept=None) -> tuple[list, list]:
    """(drawn, accepted): samples of the combination, drawn with its dtype as the main
    dtype over up to ROUNDS seeds until `count` of them pass `accept` (a backend's
    legality: its ranks or check may take few of them; default: all); ([], []) when no
    generator produces the combination."""
    drawn: list = []
    accepted: list = []
    for round_ in range(ROUNDS):
        try:
            new = samples(combo.op, seed + 7919 * round_, count, dtype=combo.dtype)
        except SampleError:
            new = []
        mine = [s for s in new if combo.matches(s)]
        if len(accepted) + len(mine) < count:  # few drawn with the branch's attributes
            mine += filter(None, (_with_branch(combo, s) for s in new if not combo.matches(s)))
        drawn += mine
        accepted += [s for s in mine if accept is None or accept(s)]
        if len(accepted) >= count:
            break
    return drawn, accepted


def _with_branch(combo: Combination, sample):
    """The sample with the branch's attribute values put in (a generator drawing a
    float bound seldom draws clip's 0 and 6 themselves); None where the op refuses that."""
    attrs = {**sample.attrs, **{k: thaw_attr(v) for k, v in combo.attrs}}
    try:
        made = checked(replace(sample, attrs=attrs, note="declared attribute values"),
                       default_registry())
    except LegatoError:
        return None
    return made if combo.matches(made) else None
