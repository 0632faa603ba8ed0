"""A quick look along a template's paths before the full match (legato.passes.matching).

Each call of a template lies on a path from its root: input i of a call, or some leaf of
a sum's or product's operand tree. Where the template matches at a graph call, the graph
has a call of the same op and arity at the end of every such path (some leaf for a tree,
either input of a swappable call), so a graph call that lacks one cannot match: the look
skips the search. Paths are shared objects, one per prefix, op and arity, across the
templates of a registry: the 36 attention templates start with the same softmax, so at
each matmul the graph calls along the softmax's paths are found once, and each template
adds only the steps where it differs (the scaling, the mask), which is where most of
them fail. A path ends at an input of the op, a transposed input or a constant: those
match any graph value.
"""
from __future__ import annotations

from .matching import CALL, SWAP, TREE, _steps
from .operands import _tree, tree_at
from .patterns import Template, View

ROOT, INPUT, EITHER, LEAF = range(4)  # how a path steps from its parent's call
MAX_STEPS = 32  # the paths a template is looked at along (the first, nearest the root)
# a search of a template smaller than this fails about as fast as the look (it has no
# paths to look along: 27 relu6 clips of mobilenet_v1 each paid for a look that passed;
# the 6-7 call RMS norms of t5 and gemma paid for one at every norm they recovered; at 10
# gpt_neo's 9-call gelu, which fails at 10 products of 12, lost its quick refusals)
MIN_CALLS = 8
MAX_PATHS = 65536  # the shared paths a registry keeps (past it they are made anew)


class Path:
    """A path from a template's root to one of its calls: the parent path, how it steps
    from the parent's call (`how`, `at`: the input index), and the call at its end (op,
    and arity: input count, or leaf count for a sum's or product's operand tree)."""

    __slots__ = ("parent", "how", "at", "op", "arity", "tree")

    def __init__(self, parent, how: int, at: int, op: str, arity: int, tree: bool):
        self.parent, self.how, self.at = parent, how, at
        self.op, self.arity, self.tree = op, arity, tree


def paths_of(registry, template: Template) -> tuple:
    """The paths of the template's calls, each after its parent (worked out once per
    template: one path per call, the first a breadth-first walk reaches); none for a
    template of fewer than MIN_CALLS calls."""
    found = template.matching.get("paths")
    if found is None:
        found = template.matching["paths"] = \
            _build(registry, template) if template.size >= MIN_CALLS else ()
    return found


def _build(registry, template: Template) -> tuple:
    table = registry.derived("recompose.paths")
    if len(table) >= MAX_PATHS:
        table.clear()
    view = template.view
    steps = template.matching.get("steps")
    if steps is None:
        steps = template.matching["steps"] = _steps(template)

    def path(parent, how, at, value):
        """The shared path to the call making `value`, or None (nothing to look for)."""
        step = steps.get(id(value)) if value is not None else None
        if step is None or step[0] not in (CALL, TREE):
            return None
        pc = step[2]
        if step[0] == TREE:
            leaves: list = []
            _tree(view, pc, leaves, [], None)
            key = (parent, how, at, pc.op, len(leaves), True)
        else:
            leaves = None
            key = (parent, how, at, pc.op, len(pc.inputs), False)
        found = table.get(key)
        if found is None:
            found = table[key] = Path(*key)
        return found, pc, leaves

    out, seen = [], set()
    first = path(None, ROOT, 0, template.result)
    queue = [first] if first is not None else []
    while queue and len(out) < MAX_STEPS:
        p, pc, leaves = queue.pop(0)
        if id(pc) in seen:
            continue
        seen.add(id(pc))
        out.append(p)
        if leaves is not None:
            kids = [path(p, LEAF, 0, v) for v in leaves]
        elif pc.op in SWAP:
            kids = [path(p, EITHER, 0, v) for v in pc.inputs]
        else:
            kids = [path(p, INPUT, i, v) for i, v in enumerate(pc.inputs)]
        queue.extend(k for k in kids if k is not None)
    return tuple(out)


class Look:
    """The graph calls at the end of each path from a graph call, remembered per path and
    call while the claimed calls stay as they are (a claimed call matches nothing, and a
    sum's leaves stop at it)."""

    def __init__(self, view: View, claimed: set):
        self.view, self.claimed = view, claimed
        self._ends: dict = {}
        self._claimed_then = len(claimed)

    def may_match(self, paths: tuple, gi: int, hint: dict | None = None) -> bool:
        """False where some path of the template ends at no graph call from `gi`. With
        `hint` (the template's), the path that refused last is looked along first: the
        layers of a model fail a template at the same place, past the paths it shares
        with the templates like it (the answer does not depend on the order)."""
        if len(self.claimed) != self._claimed_then:  # claimed only grows
            self._ends.clear()
            self._claimed_then = len(self.claimed)
        ends = self._ends
        if hint is not None:
            last = hint.get("refused")
            if last is not None and not self._at(ends, paths[last], gi):
                return False
        for k, p in enumerate(paths):
            if not self._at(ends, p, gi):
                if hint is not None:
                    hint["refused"] = k
                return False
        return True

    def _at(self, ends: dict, p: "Path", gi: int) -> tuple:
        """The ends of path `p` from `gi`, worked out once while `claimed` stands."""
        found = ends.get((p, gi))
        if found is None:
            found = ends[(p, gi)] = self._ends_of(p, gi)
        return found

    def _ends_of(self, p: Path, gi: int) -> tuple:
        """The graph calls from `gi` at the end of path `p` that have its op and arity."""
        view = self.view
        if p.how == ROOT:
            return (gi,) if self._fits(p, gi) else ()
        parents = self._at(self._ends, p.parent, gi)
        out = []
        calls, producer, how, op = view.calls, view.producer, p.how, p.op
        for j in parents:
            call = calls[j]
            if how == INPUT:
                values = (call.inputs[p.at],)
            elif how == EITHER:
                values = call.inputs
            else:
                values = tree_at(view, j, self.claimed)[0]
            for v in values:
                k = producer.get(id(v))  # (None's id is no result's)
                # most calls along a path are of another op: told before _fits
                if k is not None and calls[k].op == op and k not in out and self._fits(p, k):
                    out.append(k)
        return tuple(out)

    def _fits(self, p: Path, j: int) -> bool:
        if j in self.claimed:
            return False
        call = self.view.calls[j]
        if call.op != p.op:
            return False
        if not p.tree:
            return len(call.inputs) == p.arity
        if len(call.inputs) != 2:
            return False
        return len(tree_at(self.view, j, self.claimed)[0]) == p.arity
