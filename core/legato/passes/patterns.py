"""The patterns recomposition looks for, derived from the op definitions.

A composite op's decomposition (and each alternative form in `OpDef.patterns`) is traced
on the op's examples, flattened to primitives and put in a canonical form; the input
module gets the same treatment (a `View`), so one matcher compares like with like. The
canonical form removes differences that exporters introduce without changing the maths:
division or subtraction by a constant becomes multiplication or addition, `x ** 2` and
`x ** 3` become products, `1 / sqrt(v)` and `a / sqrt(v)` become `rsqrt(v)`, and a
composite call of the input (a `mean` from ReduceMean, a `nn.softmax`) is expanded like
the decomposition that wrote it.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..ir import Call, Const, TensorType, Value
from ..ir.calls import Emitter, Recipes, make_call, run_decomposition
from ..ir.errors import ShapeError
from ..ir.shapes import broadcast_shapes
from ..ops.registry import REQUIRED

# attributes whose values a template enumerates (the structure may depend on them)
ENUMERABLE = ("bool", "str:")
MAX_VARIANTS = 16


class View:
    """Calls in canonical primitive form, each knowing which input calls it stands for
    (`owners`), with producers and users by value."""

    def __init__(self, calls, owners, params=(), results=()):
        self.calls: list[Call] = calls
        self.owners: list[tuple[int, ...]] = owners
        self.params = {id(p) for p in params if p is not None}
        self.results = {id(r) for r in results}
        producer: dict[int, int] = {}
        users: dict[int, list[int]] = {}
        by_op: dict[str, list[int]] = {}
        for index, call in enumerate(calls):
            for out in call.outputs:
                producer[id(out)] = index
            for value in call.inputs:
                if value is not None:
                    found = users.get(id(value))
                    if found is None:
                        users[id(value)] = [index]
                    else:
                        found.append(index)
            found = by_op.get(call.op)
            if found is None:
                by_op[call.op] = [index]
            else:
                found.append(index)
        self.producer, self.users, self.by_op = producer, users, by_op

    def owner_counts(self) -> dict[int, int]:
        """How many view calls stand for each input call."""
        counts = getattr(self, "_owner_counts", None)
        if counts is None:
            counts = self._owner_counts = {}
            for owners in self.owners:
                for o in owners:
                    counts[o] = counts.get(o, 0) + 1
        return counts

    def single_use(self, value: Value) -> bool:
        return len(self.users.get(id(value), ())) == 1 and id(value) not in self.results


# --- expansion and canonical form ---------------------------------------------------------

def expand(registry, call: Call, expandable: Callable[[str], bool],
           recipes: Recipes | None = None) -> list[Call]:
    """`call` as primitive calls (composites that `expandable` accepts are decomposed,
    recursively, replaying `recipes` where given); the results are the call's own output
    values."""
    opdef = registry.find(call.op)
    if opdef is None or opdef.decompose is None or not expandable(call.op):
        return [call]
    emitter = Emitter(registry, call.origin)
    try:
        results = run_decomposition(emitter, opdef, call.inputs, call.attrs, recipes)
    except Exception:  # noqa: BLE001 - a decomposition that cannot run here stays opaque
        return [call]
    made = {id(out) for c in emitter.calls for out in c.outputs}
    rename = {id(new): old for new, old in zip(results, call.outputs) if id(new) in made}
    if len(rename) != len(call.outputs):  # a result is an input or a constant: keep the call
        return [call]
    out = []
    renamed = rename.keys()
    find = registry.find
    for inner in emitter.calls:
        inner_def = find(inner.op)
        # a primitive (most of them) is itself; a composite is expanded in turn
        flats = (inner,) if inner_def is None or inner_def.decompose is None else \
            expand(registry, inner, _always, recipes)
        for flat in flats:
            out.append(flat if renamed.isdisjoint(map(id, flat.outputs)) and
                       renamed.isdisjoint(map(id, flat.inputs)) else _renamed(flat, rename))
    return out


def _always(op: str) -> bool:
    return True


def _renamed(call: Call, rename: dict) -> Call:
    if not any(id(v) in rename for v in call.inputs if v is not None) and \
            not any(id(v) in rename for v in call.outputs):
        return call
    ins = tuple(rename.get(id(v), v) if v is not None else None for v in call.inputs)
    outs = tuple(rename.get(id(v), v) for v in call.outputs)
    return Call(call.op, ins, call.attrs, outs, call.origin)


SCALAR_LIMIT = 4096  # a larger constant is a weight, not a broadcast scalar


def scalar_value(value) -> float | None:
    """The value of a constant whose elements are all equal, else None."""
    if not isinstance(value, Const) or value.dtype == "bool":
        return None
    data = value.data
    if data.size == 1:
        return float(data.ravel()[0])
    if data.size == 0 or data.size > SCALAR_LIMIT:
        return None
    flat = data.ravel()
    if flat[0] != flat[-1]:  # the common case (a weight or a bias) decided at once
        return None
    return float(flat[0]) if bool((flat == flat[0]).all()) else None


def _is_float(value) -> bool:
    return value is not None and value.dtype.startswith(("float", "bfloat"))


def _const_like(number: float, like: Const) -> Const:
    data = np.full(like.data.shape, number, dtype=like.data.dtype)
    data.setflags(write=False)  # made here and read-only: the constant adopts it
    return Const.of(data, copy=False)


MAX_CONSTS = 4096  # the constants `canonical` made that a registry keeps


def _consts_like(registry) -> Callable[[float, Const], Const]:
    """`_const_like`, keeping what it made on the registry by number (and its sign: 0.0
    and -0.0 differ), shape and dtype: every layer divides by the same count or scale,
    and constants never change, so the views of all of them can share one."""
    made = registry.derived("recompose.consts")

    def const_like(number: float, like: Const) -> Const:
        key = (number, math.copysign(1.0, number), like.data.shape, like.data.dtype)
        found = made.get(key)
        if found is None:
            if len(made) >= MAX_CONSTS:
                made.clear()
            found = made[key] = _const_like(number, like)
        return found
    return const_like


def canonical(registry, calls: list[Call], owners: list[tuple[int, ...]], results=(),
              identities: set | None = None):
    """Rewrite `calls` (with their owners) into the canonical form; returns both lists.
    The owners of calls dropped as identities (x * 1, x + 0) are added to `identities`:
    they stand for no view call, and a rewrite may leave them unused."""
    identities = set() if identities is None else identities
    dropped: set[int] = set()
    out_calls, out_owners = [], []
    found: dict = {}  # "made", "uses" of the sqrt results: worked out when a division asks

    no_attrs: dict = {}  # op -> its attributes when given none (every call emit writes)
    const_like = _consts_like(registry)
    fresh_types = registry.derived("recompose.fresh_types")

    def emit(op, inputs, attrs, outputs, owner):
        normal = no_attrs.get(op) if not attrs else None
        if normal is None:
            normal = registry.get(op).normalize_attrs(attrs)
            if not attrs:
                no_attrs[op] = normal
        out_calls.append(Call(op, tuple(inputs), normal, tuple(outputs)))
        out_owners.append(owner)

    def fresh(op, inputs):
        """A new result of `op` on `inputs` (its type inferred once per op and input types:
        a value the view names, not a call of its own)."""
        key = (op, tuple([v.type for v in inputs]))
        type_ = fresh_types.get(key)
        if type_ is None:
            type_ = make_call(registry, op, inputs, {}).outputs[0].type
            if registry.get(op).const_check is None:
                if len(fresh_types) >= MAX_CONSTS:
                    fresh_types.clear()
                fresh_types[key] = type_
        return Value(type_)

    def sqrts():
        """The sqrt calls by result (index into `calls`), and how often each result is read
        (by `calls` and `results`): worked out when a division first asks."""
        if not found:
            made = found["made"] = {id(call.outputs[0]): i for i, call in enumerate(calls)
                                    if call.op == "sqrt" and call.outputs}
            uses = found["uses"] = dict.fromkeys(made, 0)
            for call in calls:
                for v in call.inputs:
                    if id(v) in uses:
                        uses[id(v)] += 1
            for r in results:
                if id(r) in uses:
                    uses[id(r)] += 1
        return found["made"], found["uses"]

    def sqrt_input(value):
        """If `value` is a single-use sqrt, its input (and the sqrt is dropped)."""
        made, uses = sqrts()
        j = made.get(id(value))
        if j is None or uses[id(value)] != 1:
            return None
        dropped.add(j)
        return calls[j].inputs[0]

    values: dict = {}  # id of a constant read here -> scalar_value (layers share constants)

    def scalar(v):
        if not isinstance(v, Const):
            return None
        found_value = values.get(id(v), values)
        if found_value is values:
            found_value = values[id(v)] = scalar_value(v)
        return found_value

    shapes_kept: dict = {}  # (shape of a, shape of b) -> broadcasting keeps a's

    def keeps_shape(a, b):
        key = (a.shape, b.shape)
        kept = shapes_kept.get(key)
        if kept is None:
            kept = shapes_kept[key] = _keeps_shape(a, b)
        return kept

    result_ids = {id(r) for r in results}
    rename: dict[int, Value] = {}  # results of dropped calls -> the value they equal
    keep = out_calls.append, out_owners.append
    for i, call in enumerate(calls):
        owner = owners[i]
        if rename and not rename.keys().isdisjoint(map(id, call.inputs)):
            call = Call(call.op, tuple(rename.get(id(v), v) if v is not None else None
                                       for v in call.inputs), call.attrs, call.outputs,
                        call.origin)
        op, ins = call.op, call.inputs
        # most calls are kept as they are: any op but these five, a sum or product of two
        # computed values, a call whose result is not a float (nothing below applies)
        if op not in CANONICAL_OPS:
            keep[0](call)
            keep[1](owner)
            continue
        n = len(ins)
        a = ins[0] if n else None
        b = ins[1] if n > 1 else None
        out = call.outputs[0] if call.outputs else None
        if op in _SUM_PRODUCT:
            same = None
            if (isinstance(a, Const) or isinstance(b, Const) or n != 2) and \
                    id(out) not in result_ids:
                same = _identity_operand(op, a, b, out, scalar)
            if same is None:
                keep[0](call)
                keep[1](owner)
            else:  # x * 1, x + 0: the call is its other operand
                rename[id(out)] = rename.get(id(same), same)
                identities.update(owner)
            continue
        if not _is_float(out):
            keep[0](call)
            keep[1](owner)
            continue
        c = scalar(b)
        if op == "divide":
            if scalar(a) == 1.0 and (root := sqrt_input(b)) is not None:
                emit("rsqrt", [root], {}, [out], owner + _owner_of(sqrts()[0], owners, b))
            elif c not in (None, 0.0):
                emit("multiply", [a, const_like(1.0 / c, b)], {}, [out], owner)
            elif (root := sqrt_input(b)) is not None:
                inv = fresh("rsqrt", [root])
                emit("rsqrt", [root], {}, [inv], owner + _owner_of(sqrts()[0], owners, b))
                emit("multiply", [a, inv], {}, [out], owner)
            else:
                keep[0](call)
                keep[1](owner)
        elif op == "subtract" and c is not None:
            emit("add", [a, const_like(-c, b)], {}, [out], owner)
        elif op == "power" and c in (2.0, 3.0) and keeps_shape(a, b):
            if c == 2.0:
                emit("multiply", [a, a], {}, [out], owner)
            else:
                square = fresh("multiply", [a, a])
                emit("multiply", [a, a], {}, [square], owner)
                emit("multiply", [square, a], {}, [out], owner)
        elif op == "power" and c in (0.5, -0.5) and keeps_shape(a, b):
            emit("sqrt" if c == 0.5 else "rsqrt", [a], {}, [out], owner)
        else:
            keep[0](call)
            keep[1](owner)
    if not dropped:
        return out_calls, out_owners
    gone = {id(calls[j]) for j in dropped}
    keep = [k for k, call in enumerate(out_calls) if id(call) not in gone]
    return [out_calls[k] for k in keep], [out_owners[k] for k in keep]


# the ops `canonical` may rewrite or drop; any other call is kept as it is
CANONICAL_OPS = frozenset({"divide", "subtract", "power", "multiply", "add"})
_SUM_PRODUCT = frozenset({"add", "multiply"})


def _identity_operand(op, a, b, out, scalar=scalar_value):
    """The operand a `multiply` by ones or an `add` of zeros returns unchanged, or None."""
    if op not in ("multiply", "add") or not _is_float(out):
        return None
    neutral = 1.0 if op == "multiply" else 0.0
    for x, y in ((a, b), (b, a)):
        if isinstance(y, Const) and x is not None and y.data.size and \
                y.data.item(0) == neutral and x.type == out.type and scalar(y) == neutral:
            return x
    return None


def _keeps_shape(a, b) -> bool:
    try:
        return broadcast_shapes(a.shape, b.shape) == tuple(a.shape)
    except ShapeError:  # symbolic dims that do not broadcast, or not known to
        return False


def _owner_of(made, owners, value) -> tuple[int, ...]:
    j = made.get(id(value))
    return () if j is None else owners[j]


def build_view(registry, calls, params, results, expandable) -> View:
    """The canonical view of a function's calls; owners are indices into `calls`."""
    flat, owners = [], []
    recipes = Recipes(registry)  # layers expand the same composites alike
    expands: dict[str, bool] = {}  # per op: whether `expand` may decompose it
    for index, call in enumerate(calls):
        op = call.op
        may = expands.get(op)
        if may is None:
            opdef = registry.find(op)
            may = expands[op] = opdef is not None and opdef.decompose is not None and \
                expandable(op)
        if not may:  # a primitive (most calls): itself
            flat.append(call)
            owners.append((index,))
            continue
        for inner in expand(registry, call, expandable, recipes):
            flat.append(inner)
            owners.append((index,))
    identities: set[int] = set()
    flat, owners = canonical(registry, flat, owners, results, identities)
    view = View(flat, owners, params, results)
    view.identities = identities
    return view


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
