"""Operands as matching sees them (legato.passes.matching): the leaves of a sum's or
product's operand tree, and the quick look one level down before a full match (what makes
a template root's operands must be there).
"""
from __future__ import annotations

from ..ir import Call, Const
from .patterns import Template, View

# associative and commutative: operand trees are compared as multisets of leaves
ASSOC = frozenset({"add", "multiply", "maximum", "minimum", "logical_and", "logical_or"})


def _operands(view: View, gi: int, claimed):
    """The operands of graph call `gi`, the leaves of its operand tree for a sum,
    product, ... (`claimed`: the graph calls taken); not to be changed."""
    call = view.calls[gi]
    if call.op in ASSOC and len(call.inputs) == 2:
        return tree_at(view, gi, claimed)[0]
    return call.inputs


def tree_at(view: View, gi: int, claimed, taken=()) -> tuple[list, list]:
    """The leaves and inner calls of graph call `gi`'s operand tree, as `_tree` finds them
    (not to be changed: shared). The tree with nothing claimed is worked out once per
    view; it stands while none of its inner calls is claimed or taken (each step of
    `_tree` only refuses those), else the tree is walked again."""
    trees = view.trees
    found = trees.get(gi)
    if found is None:
        leaves, inner = [], []
        _tree(view, view.calls[gi], leaves, inner, None)
        found = trees[gi] = (leaves, inner)
    for j in found[1]:
        if j in claimed or j in taken:
            leaves, inner = [], []
            _tree(view, view.calls[gi], leaves, inner, claimed, taken)
            return leaves, inner
    return found


def _tree(view: View, call: Call, leaves, inner, claimed, taken=()):
    """The leaves of the operand tree of `call`: nested single-use calls of its op and
    dtype are inner calls; on the graph side not those `claimed` or `taken` (on the
    pattern side `claimed` is None)."""
    for v in call.inputs:
        j = view.producer.get(id(v))
        sub = view.calls[j] if j is not None else None
        if sub is not None and sub.op == call.op and view.single_use(v) and \
                v.dtype == call.outputs[0].dtype and \
                (claimed is None or (j not in claimed and j not in taken)):
            inner.append(j)
            _tree(view, sub, leaves, inner, claimed, taken)
        else:
            leaves.append(v)


def _pattern_operands(view: View, call: Call) -> list:
    if call.op in ASSOC and len(call.inputs) == 2:
        leaves: list = []
        _tree(view, call, leaves, [], None)
        return leaves
    return list(call.inputs)


def _kind(view: View, value, params) -> str:
    if value is None:
        return "none"
    if id(value) in params:
        return "any"
    j = view.producer.get(id(value))
    if j is None:
        return "const" if isinstance(value, Const) else "value"
    call = view.calls[j]
    if call.op == "permute_dims" and id(call.inputs[0]) in params:
        return "any"
    return call.op


def root_need(template: Template) -> tuple:
    """What the operands of the template's root must be made by: (their number, the ops
    and kinds other than "any", sorted); worked out once per template."""
    need = template.matching.get("need")
    if need is None:
        params = template.param_ids
        kinds = [_kind(template.view, v, params)
                 for v in _pattern_operands(template.view, template.root)]
        need = template.matching["need"] = (len(kinds),
                                            tuple(sorted(k for k in kinds if k != "any")))
    return need


def operand_kinds(graph: View, gi: int, claimed) -> tuple:
    """What makes each operand of graph call `gi` (the op, "const" or "value"; `_kind`
    with no parameters, written out: every root call of every template asks)."""
    producer, calls = graph.producer, graph.calls
    kinds = []
    for v in _operands(graph, gi, claimed):
        j = producer.get(id(v))  # (None's id is no result's)
        kinds.append(calls[j].op if j is not None else "none" if v is None else
                     "const" if isinstance(v, Const) else "value")
    return tuple(kinds)


def plausible(need: tuple, have: list) -> bool:
    """A quick look one level down before the full match: the ops that make the root's
    operands (all leaves of an operand tree) must be there."""
    count, needed = need
    if count != len(have):
        return False
    have = list(have)
    for kind in needed:
        if kind not in have:
            return False
        have.remove(kind)
    return True

