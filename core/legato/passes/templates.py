"""Which templates a recomposition looks for (legato.passes.recompose): each composite
op's templates (legato.passes.patterns), the ops recomposed unless told, and the setup of
a list of ops (templates largest first, the primitives they use, the ops kept whole), all
kept on the registry, which empties them when a definition changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .patterns import Form, Template, derive, trace

MAX_SETUPS = 64  # op lists a registry keeps the templates of


def _per_op(registry, kind: str, opdef, compute):
    """What `compute(registry, opdef)` gives, cached on the registry per definition (an
    entry of a definition since replaced is computed again)."""
    cache = registry.derived(kind)
    entry = cache.get(opdef.name)
    if entry is None or entry[0] is not opdef:
        entry = cache[opdef.name] = (opdef, compute(registry, opdef))
    return entry[1]


def _primitives(registry, opdef) -> set[str]:
    if opdef.decompose is None or not opdef.examples:
        return {"?"}  # no decomposition: never expanded
    types, attrs = opdef.examples[0]
    try:
        return trace(registry, Form(opdef.name, opdef.decompose, "decomposition"),
                     types, attrs).ops
    except Exception:  # noqa: BLE001 - e.g. several results: never expanded
        return {"?"}


def primitives_of(registry, opdef) -> set[str]:
    """The primitive ops of an op's decomposition on its first example (cached)."""
    return _per_op(registry, "recompose.primitives", opdef, _primitives)


def templates_of(registry, opdef) -> tuple[list[Template], list[str]]:
    """The derived templates of an op (cached per definition)."""
    return _per_op(registry, "recompose.templates", opdef, derive)


def default_ops(registry, among=None) -> list[str]:
    """The composite ops recomposition looks for unless told: every op with a
    decomposition, except pure reshapes (squeeze, flatten, ...) and ops whose only form
    is a single call (nothing to gain). `among`: only ops of these names are looked at,
    and only their templates derived (a backend's ops: deriving all 73 composites took
    1-3 s, grid_sample's alone most of it)."""
    cache = registry.derived("recompose.default_ops")  # emptied when a definition changes
    if among is None and "*" in cache:
        return list(cache["*"])
    out = []
    for opdef in registry.ops():
        if among is not None and opdef.name not in among:
            continue
        fits = cache.get(opdef.name)
        if fits is None:
            fits = cache[opdef.name] = _recomposable(registry, opdef)
        if fits:
            out.append(opdef.name)
    if among is None:
        cache["*"] = out
    return list(out)


def _recomposable(registry, opdef) -> bool:
    if opdef.decompose is None or opdef.kind == "injective":
        return False
    templates, _ = templates_of(registry, opdef)
    return any(t.size >= 2 for t in templates)


@dataclass
class _Setup:
    """What a recomposition looks for, from the ops it was asked for: the templates,
    largest first, the primitives they use, the ops kept whole, and per op the number of
    templates (or why there is none)."""

    templates: list
    prims: set
    whole: set
    derived: dict
    missing: dict
    plans: dict = field(default_factory=dict)  # ops present -> templates to try (recompose)


def _setup(registry, names: tuple, explicit: bool) -> _Setup:
    templates, derived, missing = [], {}, {}
    for name in names:
        opdef = registry.get(name)
        found, problems = templates_of(registry, opdef)
        found = [t for t in found if explicit or t.size >= 2]
        derived[name] = len(found)
        if not found:
            missing[name] = "no pattern: " + ("; ".join(problems[:2]) or
                                              "the op has no decomposition")
        templates.extend(found)
    # larger patterns first: an attention block before the softmax inside it
    templates.sort(key=lambda t: -t.size)
    # an input call of an op looked for stays whole, unless another op's form uses it
    whole = set(names) - {op for t in templates for op in t.uses if op != t.form.op}
    return _Setup(templates, set().union(*(t.ops for t in templates)), whole, derived,
                  missing)
