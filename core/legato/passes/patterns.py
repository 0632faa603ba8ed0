"""The patterns recomposition looks for, derived from the op definitions.

A composite op's decomposition (and each alternative form in `OpDef.patterns`) is traced
on the op's examples, flattened to primitives and put in a canonical form; the input
module gets the same treatment (a `View`), so one matcher compares like with like. The
canonical form (legato.passes.canonical) removes differences that exporters introduce
without changing the maths, and a composite call of the input (a `mean` from ReduceMean,
a `nn.softmax`) is expanded like the decomposition that wrote it (legato.passes.flatten).
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Callable

from ..ir import Call, Const, TensorType, Value
from ..ir.calls import Emitter
from ..ops.registry import REQUIRED
from .canonical import canonical
from .flatten import View, build_view, expand  # noqa: F401 - View, build_view: re-exported

# attributes whose values a template enumerates (the structure may depend on them)
ENUMERABLE = ("bool", "str:")
MAX_VARIANTS = 16


# --- forms and templates ------------------------------------------------------------------

@dataclass(eq=False)
class Form:
    """One way of writing an op: its decomposition or one of its `patterns`."""

    op: str
    fn: Callable
    label: str


@dataclass(eq=False)
class Template:
    """A traced form: its canonical view, the parameters (op inputs, None where an optional
    input was left out) and the attribute sets that traced to this structure."""

    form: Form
    view: View
    params: list
    result: Value
    variants: list = field(default_factory=list)
    uses: set = field(default_factory=set)  # the ops the form calls (before expansion)
    # what matching derives from the pattern alone (operand trees, operand kinds)
    matching: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.root: Call = self.view.calls[self.view.producer[id(self.result)]]

    @property
    def size(self) -> int:
        return len(self.view.calls)

    @functools.cached_property
    def param_ids(self) -> set[int]:
        return {id(p) for p in self.params if p is not None}

    @functools.cached_property  # a traced template does not change; every pass asks
    def ops(self) -> set[str]:
        """The ops a graph must have for the template to match (a transpose of an input
        may be folded into a constant or another transpose)."""
        params = {id(p) for p in self.params if p is not None}
        return {c.op for c in self.view.calls
                if not (c.op == "permute_dims" and id(c.inputs[0]) in params)}


def forms(opdef) -> list[Form]:
    found = [Form(opdef.name, opdef.decompose, "decomposition")]
    for fn in getattr(opdef, "patterns", ()):
        found.append(Form(opdef.name, fn, f"pattern {getattr(fn, '__name__', '?')}"))
    return found


def trace(registry, form: Form, input_types, attrs) -> Template:
    """The canonical view of `form` on fresh parameters of `input_types`."""
    opdef = registry.get(form.op)
    attrs = opdef.normalize_attrs(attrs)
    params = [None if t is None else Value(t) for t in input_types]
    emitter = Emitter(registry)
    result = form.fn(emitter, *params, **attrs)
    if isinstance(result, tuple):
        raise ValueError("several results")
    uses = {call.op for call in emitter.calls}
    calls = []
    for call in emitter.calls:
        calls.extend(expand(registry, call, lambda op: True))
    calls, owners = canonical(registry, calls, [(i,) for i in range(len(calls))], [result])
    view = View(calls, owners, params, [result])
    if id(result) not in view.producer:
        raise ValueError("the result is not computed by a call")
    return Template(form, view, params, result, [attrs], uses)


def signature(template: Template) -> tuple:
    """The structure of a template (ops and edges), without constants, attributes, shapes."""
    view = template.view
    slot = {id(p): ("param", i) for i, p in enumerate(template.params) if p is not None}
    out = []
    for call in view.calls:
        ins = []
        for v in call.inputs:
            if v is None:
                ins.append(None)
            elif id(v) in slot:
                ins.append(slot[id(v)])
            elif isinstance(v, Const):
                ins.append("const")
            else:
                ins.append(view.producer.get(id(v)))
        out.append((call.op, tuple(ins)))
    return tuple(out)


def variants(opdef, attrs: dict) -> list[dict]:
    """`attrs` with each enumerable attribute (bool, string choice) set to every value,
    and each float attribute also set to 1 (a scale of 1 writes no multiplication). The
    given values come first, so `attrs` itself is never past MAX_VARIANTS (grid_sample's
    18 combinations lost bicubic with reflection padding, its own example's)."""
    choices = []
    for key, spec in opdef.attr_specs.items():
        kind = spec.type.rstrip("?")
        own = attrs.get(key, spec.default)
        if kind == "bool":
            choices.append([(key, v) for v in sorted((False, True), key=lambda v: v != own)])
        elif kind.startswith("str:"):
            values = kind[4:].split("|")
            choices.append([(key, v) for v in sorted(values, key=lambda v: v != own)])
        elif kind == "float" and (key in attrs or spec.default is not REQUIRED):
            choices.append([(key, attrs.get(key, spec.default)), (key, 1.0)])
    out = []
    for combo in itertools.islice(itertools.product(*choices), MAX_VARIANTS):
        out.append({**attrs, **dict(combo)})
    return out


def _doubled(t):
    return None if t is None else TensorType(tuple(2 * d for d in t.shape), t.dtype)


def shape_dependent(registry, opdef) -> bool:
    """Whether the decomposition writes other calls when every input dimension doubles
    (a convolution unrolled per kernel tap does; a norm or an attention does not)."""
    form = Form(opdef.name, opdef.decompose, "decomposition")
    for input_types, attrs in opdef.examples:
        try:
            small = trace(registry, form, input_types, attrs)
            large = trace(registry, form, [_doubled(t) for t in input_types], attrs)
        except Exception:  # noqa: BLE001 - doubled shapes the op refuses: try the next
            continue
        return signature(small) != signature(large)
    return False


def derive(registry, opdef) -> tuple[list[Template], list[str]]:
    """Every distinct template of an op, and why the rest could not be traced."""
    found: dict[tuple, Template] = {}
    problems = []
    if opdef.variadic:
        return [], [f"{opdef.name}: variadic inputs are not recomposed"]
    if shape_dependent(registry, opdef):
        return [], [f"{opdef.name}: its decomposition's structure depends on the input "
                    "shapes (e.g. unrolled over a window), so no one pattern finds it"]
    for form in forms(opdef):
        for input_types, attrs in opdef.examples:
            for attrs_variant in variants(opdef, dict(attrs)):
                try:
                    template = trace(registry, form, input_types, attrs_variant)
                except Exception as err:  # noqa: BLE001 - an attribute set the op refuses
                    problems.append(f"{form.label} on {attrs_variant}: {err}")
                    continue
                key = signature(template)
                if key in found:
                    found[key].variants.extend(template.variants)
                else:
                    found[key] = template
    return list(found.values()), problems
