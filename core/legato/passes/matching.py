"""Matching a template against a function's canonical view (legato.passes.patterns).

`Matcher(template, view, claimed, concrete)` finds the template at a call of the view:
ops and edges always; constants (within a relative 1e-5, broadcast scalars included),
attributes and result types too when `concrete`. Sums, products, maxima, minima and
logical and/or are compared as multisets of operands. A transpose of an input in the
template matches a constant (folded by the rewrite) or a chain of reshapes and transposes
in the view (the input becomes a `Rearranged` value the rewrite computes).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Call, Const, TensorType
from ..ir.shapes import norm_axes
from .operands import (ASSOC, _tree, operand_kinds, plausible,  # noqa: F401 - re-exported
                       root_need, tree_at)
from .patterns import Template, View
from .rearranged import Rearranged, _perm, _rearrangement

SWAP = frozenset({"equal"})

RTOL = 1e-5


class Env:
    """One complete match: pattern values bound to graph values, pattern calls to graph
    calls (-1: absorbed into an operand tree), extra graph calls of operand trees."""

    __slots__ = ("binds", "calls", "taken", "extra", "_region")

    def __init__(self, binds=None, calls=None, taken=frozenset(), extra=()):
        self.binds, self.calls = binds or {}, calls or {}
        self.taken, self.extra = taken, extra
        self._region = None

    def region(self) -> set[int]:
        """The graph calls of the match (worked out once: the recovery asks often; the
        caller does not change it)."""
        if self._region is None:
            self._region = {g for g in self.calls.values() if g >= 0} | set(self.extra)
        return self._region


def same_value(a, b) -> bool:
    return a is b or (isinstance(a, Rearranged) and isinstance(b, Rearranged) and
                      a.base is b.base and a.shape == b.shape and a.axes == b.axes)


def _type_of(value) -> TensorType:
    return value.type


def consts_close(p: Const, g: Const) -> bool:
    pd, gd = p.data, g.data
    if pd.size == 1 and gd.size == 1 and pd.dtype != bool and gd.dtype != bool:
        a, b = float(pd.ravel()[0]), float(gd.ravel()[0])
        return a == b or math.isclose(a, b, rel_tol=RTOL) or (a != a and b != b)
    if pd.dtype == bool or gd.dtype == bool:
        return pd.shape == gd.shape and bool(np.array_equal(pd, gd)) or \
            (pd.size == 1 or gd.size == 1) and bool(np.all(pd == gd))
    if pd.size != gd.size and pd.size != 1 and gd.size != 1:
        return False
    if pd.size == gd.size and pd.squeeze().shape != gd.squeeze().shape:
        return False
    try:
        a, b = np.broadcast_arrays(pd.astype(np.float64).ravel() if pd.size == gd.size
                                   else pd.astype(np.float64),
                                   gd.astype(np.float64).ravel() if pd.size == gd.size
                                   else gd.astype(np.float64))
    except ValueError:
        return False
    return bool(np.allclose(a, b, rtol=RTOL, atol=0.0, equal_nan=True))


def attrs_equal(pc: Call, gc: Call) -> bool:
    if pc.op in ("reshape", "broadcast_to"):
        return True  # the output types say it all
    for key, pa in pc.attrs.items():
        ga = gc.attrs.get(key)
        if key in ("axes", "axis") and pc.op != "permute_dims" and pc.inputs and \
                pc.inputs[0] is not None and pa is not None and ga is not None:
            rank = pc.inputs[0].rank
            try:
                pa = sorted(norm_axes(pa if isinstance(pa, tuple) else [pa], rank))
                ga = sorted(norm_axes(ga if isinstance(ga, tuple) else [ga], gc.inputs[0].rank))
            except Exception:  # noqa: BLE001 - out of range: not equal
                return False
        if pa != ga:
            return False
    return True


class Matcher:
    """Finds `template` at a graph call; `concrete` also compares constants, attributes
    and types (the template's trace is then on the real input types).

    The search is a depth-first backtracking over a stack of goals (a pattern value to
    match a graph value; pattern operands to assign to a tree's graph operands), in the
    order a recursive matcher would take them, with one mutable partial match undone on
    the way back: no generator chain per value, no copy of the match per step. What it
    needs of each pattern value is worked out once per template (`_steps`)."""

    def __init__(self, template: Template, graph: View, claimed: set, concrete: bool):
        self.t, self.p, self.g = template, template.view, graph
        self.claimed, self.concrete = claimed, concrete
        self.params = template.param_ids
        # the pattern side is the template's: worked out once for every pass
        self._leaves: dict[int, tuple] = template.matching.setdefault("leaves", {})
        steps = template.matching.get("steps")
        if steps is None:
            steps = template.matching["steps"] = _steps(template)
        self._step = steps
        self._result_at = next(i for i, out in enumerate(template.root.outputs)
                               if out is template.result)
        self._producer, self._gcalls = graph.producer, graph.calls
        # the partial match: pattern value -> graph value, pattern call -> graph call (-1:
        # absorbed into an operand tree), graph calls taken, extra calls of operand trees
        self._binds: dict = {}
        self._calls: dict = {}
        self._taken: set = set()
        self._extra: list = []
        self._found: list = []
        self._limit = 1
        self._accept = None
        self._pending = False  # the search stopped with a choice not yet tried

    @property
    def pending(self) -> bool:
        """Whether the last search stopped with a choice not yet tried (else it saw every
        match there is)."""
        return self._pending

    def at(self, gi: int):
        """Matches of the template whose result is made by graph call `gi`, in order."""
        found = self.find(gi, 1)
        if not found:
            return
        yield found[0]
        if not self._pending:  # the search saw every choice: no other match
            return
        more = self.find(gi, 4)  # a caller that asks again seldom asks for many
        yield from more[1:]
        if len(more) == 4:
            yield from self.find(gi, None)[4:]

    def find(self, gi: int, limit: int | None, accept=None) -> list[Env]:
        """The first `limit` matches at graph call `gi` (all: None); with `accept`, the
        search stops at the first match it accepts (returned last)."""
        root = self.t.root
        gc = self._gcalls[gi]
        if gc.op != root.op or len(gc.outputs) != len(root.outputs):
            return []
        k = self._result_at
        self._found, self._limit, self._accept = [], limit, accept
        self._pending = False
        try:  # the outermost frame's changes are all there is: emptied, not undone
            self._solve((0, self.t.result, gc.outputs[k], None), [])
        finally:
            self._binds.clear()
            self._calls.clear()
            self._taken.clear()
            self._extra.clear()
        return self._found

    def _emit(self) -> bool:
        env = Env(dict(self._binds), dict(self._calls), frozenset(self._taken),
                  tuple(self._extra))
        self._found.append(env)
        if self._accept is not None:
            return bool(self._accept(env))
        return self._limit is not None and len(self._found) >= self._limit

    def _run(self, goals) -> bool:
        """Solve the goals (a linked list: (0, pattern value, graph value, rest) or
        (1, pattern leaves, graph leaves, rest)); True once the search should stop.
        A goal with one way to go is taken in this frame, its changes to the partial
        match kept on a trail undone when the frame returns; only a choice (which graph
        operand a pattern operand takes, the order of a swapped call) recurses, so the
        depth is the number of choices, not of values (a template of 688 calls)."""
        trail: list = []
        try:
            return self._solve(goals, trail)
        finally:
            if trail:
                self._rewind(trail)

    def _solve(self, goals, trail) -> bool:
        binds, calls, taken, steps = self._binds, self._calls, self._taken, self._step
        producer, concrete, claimed, gcalls = \
            self._producer, self.concrete, self.claimed, self._gcalls
        while True:
            if goals is None:
                return self._emit()
            kind, pv, gv, rest = goals
            if kind == 1:  # pattern leaves pv to graph leaves gv, each to one
                if not pv:
                    goals = rest
                    continue
                if len(pv) == 1:  # the last takes the graph leaf left: no choice to make
                    for last in gv:
                        if last is not None:
                            break
                    goals = (0, pv[0], last, rest)
                    continue
                first, others = pv[0], pv[1:]
                choices = self._choices(first, gv)
                if len(choices) == 1:
                    j = choices[0]
                    goals = (0, first, gv[j], (1, others, gv[:j] + [None] + gv[j + 1:], rest))
                    continue
                for j in choices:
                    if self._run((0, first, gv[j],
                                  (1, others, gv[:j] + [None] + gv[j + 1:], rest))):
                        self._pending = self._pending or j != choices[-1]
                        return True
                return False
            if pv is None or gv is None:
                if pv is None and gv is None:
                    goals = rest
                    continue
                return False
            step = steps[id(pv)]
            what = step[0]
            if what == PARAM:  # (_bind, written out: a third of the goals)
                have = binds.get(id(pv))
                if have is None:
                    if concrete and gv.type != pv.type:
                        return False
                    binds[id(pv)] = gv
                    trail.append((_BIND, id(pv)))
                elif not same_value(have, gv):
                    return False
                goals = rest
                continue
            if what == CONST:
                if isinstance(gv, Const) and (not concrete or consts_close(pv, gv)):
                    goals = rest
                    continue
                return False
            pi = step[1]
            if pi in calls:
                if calls[pi] == producer.get(id(gv), -2):
                    goals = rest
                    continue
                return False
            if what == PERMUTED:
                found = self._permuted(step, gv)
                if found is None:
                    return False
                at, extra, bound = found
                trail.append((_CALL, pi, self._with_call(pi, at, extra), len(extra)))
                if not self._bind(step[3], bound, trail):
                    return False
                goals = rest
                continue
            gi = producer.get(id(gv))
            if gi is None or gi in claimed or gi in taken:
                return False
            gc = gcalls[gi]
            pc = step[2]
            if gc.op != pc.op or len(gc.inputs) != len(pc.inputs) or (
                    gc.outputs[0] is not gv if step[3] == 0 else
                    step[3] != _index(gc.outputs, gv)):
                return False
            if concrete and (pv.type != gv.type or not attrs_equal(pc, gc)):
                return False
            if what == TREE:
                p_leaves, p_inner = self.pattern_leaves(pi)
                g_leaves, g_inner = tree_at(self.g, gi, claimed, taken)
                if len(p_leaves) != len(g_leaves):
                    return False
                trail.append((_CALL, pi, self._with_call(pi, gi, g_inner), len(g_inner)))
                trail.append((_INNER, [(inner, calls.get(inner, _MISSING))
                                       for inner in p_inner]))
                for inner in p_inner:
                    calls[inner] = -1
                goals = (1, p_leaves, g_leaves, rest)
                continue
            calls[pi] = gi
            taken.add(gi)
            trail.append((_CALL, pi, (gi,), 0))
            g_ins, orders = gc.inputs, step[4]
            if len(orders) == 1:
                p_ins = orders[0]
                if len(p_ins) == 2:  # most calls: the pairs written out
                    goals = (0, p_ins[0], g_ins[0], (0, p_ins[1], g_ins[1], rest))
                else:
                    goals = _pairs(p_ins, g_ins, rest)
                continue
            for n, p_ins in enumerate(orders):
                if self._run(_pairs(p_ins, g_ins, rest)):
                    self._pending = self._pending or n < len(orders) - 1
                    return True
            return False

    def _bind(self, pv, gv, trail) -> bool:
        binds = self._binds
        have = binds.get(id(pv))
        if have is None:
            if self.concrete and _type_of(gv) != pv.type:
                return False
            binds[id(pv)] = gv
            trail.append((_BIND, id(pv)))
            return True
        return same_value(have, gv)

    def _with_call(self, pi: int, gi: int, extra) -> list:
        """Record pattern call `pi` as graph call `gi` (and the extra calls); what was new."""
        self._calls[pi] = gi
        added = [] if gi < 0 else [gi]
        taken = self._taken
        for j in extra:
            if j not in taken:
                added.append(j)
        taken.update(added)
        self._extra.extend(extra)
        return added

    def _rewind(self, trail: list) -> None:
        """Undo the changes of `trail`, last first."""
        binds, calls = self._binds, self._calls
        for record in reversed(trail):
            if record[0] == _BIND:
                del binds[record[1]]
            elif record[0] == _CALL:
                _, pi, added, extra = record
                del calls[pi]
                self._taken.difference_update(added)
                if extra:
                    del self._extra[len(self._extra) - extra:]
            else:
                for inner, old in reversed(record[1]):
                    if old is _MISSING:
                        calls.pop(inner, None)
                    else:
                        calls[inner] = old

    def _permuted(self, step, gv):
        """`permute_dims(param)` in the pattern: the param is whatever transposes to gv.
        Returns (the graph call the transpose stands for or -1, the extra calls absorbed,
        the param's value), or None."""
        _, pi, pc, param, rank, inverse = step
        if gv.rank != rank:
            return None
        g, producer, taken = self.g, self._producer, self._taken
        chain, value = [], gv  # reshapes and transposes that make gv, last first
        while len(chain) < 4:
            j = producer.get(id(value))
            call = self._gcalls[j] if j is not None else None
            if call is None or call.op not in ("reshape", "permute_dims") or \
                    j in self.claimed or j in taken or not g.single_use(value):
                break
            chain.append(j)
            value = call.inputs[0]
        for depth in range(len(chain), 0, -1):  # absorb as many of them as possible
            base = self._gcalls[chain[depth - 1]].inputs[0]
            bound = _rearrangement(base, [self._gcalls[j] for j in reversed(chain[:depth])],
                                   inverse)
            if bound is not None:
                return chain[0], chain[1:depth], bound
        if isinstance(gv, Const):  # folded into a transposed constant by the rewrite
            return -1, [], gv if inverse == tuple(range(rank)) else \
                Rearranged(gv, None, inverse)
        return None

    def _choices(self, first, g_leaves) -> list[int]:
        """The graph leaves pattern leaf `first` may take, in order; leaves that would fail
        at once are passed over (a constant for a constant, a call of the op for a call
        not yet matched), which leaves the matches and their order as they were."""
        step = self._step[id(first)]
        kind = step[0]
        if kind == PARAM:
            have = self._binds.get(id(first))
            if have is None:
                return [j for j, gv in enumerate(g_leaves) if gv is not None]
            # a parameter bound already takes only the value it has
            return [j for j, gv in enumerate(g_leaves) if gv is not None and same_value(have, gv)]
        if kind == CONST:
            return [j for j, gv in enumerate(g_leaves) if isinstance(gv, Const)]
        producer = self._producer
        at = self._calls.get(step[1])
        if at is not None:  # a call matched already takes only its own result
            return [j for j, gv in enumerate(g_leaves)
                    if gv is not None and producer.get(id(gv), -2) == at]
        if kind == PERMUTED:
            return [j for j, gv in enumerate(g_leaves) if gv is not None]
        want, calls = step[2].op, self._gcalls
        out = []
        for j, gv in enumerate(g_leaves):
            if gv is not None:
                gi = producer.get(id(gv))
                if gi is not None and calls[gi].op == want:
                    out.append(j)
        return out

    def pattern_leaves(self, pi):
        cached = self._leaves.get(pi)
        if cached is None:
            leaves, inner = [], []
            _tree(self.p, self.p.calls[pi], leaves, inner, None)
            # calls first (they constrain most), then constants, then parameters
            leaves.sort(key=lambda v: 2 if id(v) in self.params else
                        1 if isinstance(v, Const) else 0)
            cached = self._leaves[pi] = (leaves, inner)
        return cached


PARAM, CONST, PERMUTED, TREE, CALL = range(5)
_BIND, _CALL, _INNER = range(3)  # what a trail record undoes
_MISSING = object()


def _pairs(p_ins, g_ins, rest):
    """Goals matching each pattern input to the graph input at its place, then `rest`."""
    goals = rest
    for i in range(len(p_ins) - 1, -1, -1):
        goals = (0, p_ins[i], g_ins[i], goals)
    return goals


def _steps(template: Template) -> dict:
    """What matching does at each pattern value, by id: (PARAM,), (CONST,), (PERMUTED,
    call index, call, param, rank, inverse permutation), or (TREE | CALL, call index,
    call, output index, operand orders)."""
    view, params = template.view, template.param_ids
    steps: dict = {}
    for v in template.params:
        if v is not None:
            steps[id(v)] = (PARAM,)
    for pi, pc in enumerate(view.calls):
        for v in pc.inputs:
            if isinstance(v, Const) and id(v) not in params:
                steps[id(v)] = (CONST,)
        for k, out in enumerate(pc.outputs):
            if id(out) in params:
                continue
            if pc.op == "permute_dims" and id(pc.inputs[0]) in params:
                rank = pc.outputs[0].rank
                perm = _perm(pc, rank)
                inverse = tuple(sorted(range(len(perm)), key=perm.__getitem__))  # argsort
                steps[id(out)] = (PERMUTED, pi, pc, pc.inputs[0], rank, inverse)
            elif pc.op in ASSOC and len(pc.inputs) == 2:
                steps[id(out)] = (TREE, pi, pc, k, None)
            else:
                orders = (pc.inputs, pc.inputs[::-1]) if pc.op in SWAP else (pc.inputs,)
                steps[id(out)] = (CALL, pi, pc, k, orders)
    return steps


def lone_root(template: Template):
    """For a template that is its root call over the op's inputs, some transposed (the
    linear's `matmul(x, permute_dims(w))`): per root input, the rank a transposed input
    must have, or -1 for an input taken as it is; None for any other template. Where
    each transposed input is a constant of that rank, the match at a root call of the
    same arity is the root call alone (the search would find just that), so a caller can
    tell "the region is one call" without the search (worked out once per template)."""
    found = template.matching.get("lone", False)
    if found is not False:
        return found
    steps = template.matching.get("steps")
    if steps is None:
        steps = template.matching["steps"] = _steps(template)
    root, ranks, seen = template.root, [], set()
    step = steps.get(id(template.result))
    ok = step is not None and step[0] == CALL and len(step[4]) == 1 and \
        len(root.outputs) == 1
    for v in root.inputs if ok else ():
        kind = steps.get(id(v)) if v is not None else None
        ok = kind is not None and kind[0] in (PARAM, PERMUTED) and id(v) not in seen
        if not ok:
            break
        param = v if kind[0] == PARAM else kind[3]
        ok = id(param) not in seen  # an input used twice must be one value: searched
        if not ok:
            break
        seen.update((id(v), id(param)))
        ranks.append(kind[4] if kind[0] == PERMUTED else -1)
    # the root and one transpose per transposed input: no other call
    ok = ok and len(template.view.calls) == 1 + sum(r >= 0 for r in ranks)
    found = tuple(ranks) if ok else None
    template.matching["lone"] = found
    return found


LONE_SEARCH, LONE_FAILS, LONE_ALONE = range(3)  # what lone_answer tells


def lone_answer(ranks: tuple, view: View, gi: int, claimed) -> int:
    """What the search of the template of `lone_root` (`ranks`) finds at graph call `gi`
    (of the root's op), where it can be told at once: LONE_FAILS where an input is
    missing or the arity differs, or a transposed input is of another rank, or neither a
    constant nor the single-use result of a reshape or transpose not claimed (what the
    search absorbs into the input); LONE_ALONE where each transposed input is a constant
    of its rank (the match is the call alone); else LONE_SEARCH."""
    call = view.calls[gi]
    ins = call.inputs
    if len(ins) != len(ranks) or len(call.outputs) != 1:
        return LONE_FAILS
    answer = LONE_ALONE
    for v, rank in zip(ins, ranks):
        if v is None:
            return LONE_FAILS
        if rank < 0:
            continue
        if v.rank != rank:
            return LONE_FAILS
        if isinstance(v, Const):
            continue
        j = view.producer.get(id(v))
        if j is None or j in claimed or view.calls[j].op not in ("reshape", "permute_dims") \
                or not view.single_use(v):
            return LONE_FAILS
        answer = LONE_SEARCH
    return answer


def _index(outputs, value) -> int:
    for i, out in enumerate(outputs):
        if out is value:
            return i
    return -1
