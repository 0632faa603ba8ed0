"""Creating calls: `make_call` validates arity and attributes and infers the result types
at once, so a mistake is reported where it is made; `Emitter` records the calls a
decomposition or a rewrite writes; `Recipes` replays a decomposition recorded on inputs
alike (repeated layers). All take the registry explicitly: this module sits
below the registries, the plugin host and the context, and imports none of them.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Any, Sequence

import numpy as np

from .errors import OpError
from .graph import Attrs, Call, Const, Origin, Value


def make_call(registry, op: str, inputs: Sequence[Value | None], attrs,
              origin: Origin | None = None) -> Call:
    """Create a call: check arity and optional inputs, normalize attributes, infer types."""
    opdef = registry.get(op)
    if len(inputs) < len(opdef.inputs) and all(s.optional for s in opdef.inputs[len(inputs):]):
        inputs = tuple(inputs) + (None,) * (len(opdef.inputs) - len(inputs))  # omitted optionals
    opdef.check_arity(len(inputs))
    for index, value in enumerate(inputs):
        if value is None:
            if not opdef.input_spec(index).optional:
                raise OpError(f"{op}: input {index} ({opdef.input_spec(index).name}) "
                              f"is required but got None; signature is {opdef.signature()}")
        elif not isinstance(value, Value):
            raise OpError(f"{op}: input {index} is a {type(value).__name__}, not a Value")
    if not isinstance(attrs, Attrs):
        attrs = opdef.normalize_attrs(attrs)
    types = opdef.infer_types([None if v is None else v.type for v in inputs], attrs)
    opdef.check_consts(inputs, attrs)
    return Call(op, tuple(inputs), attrs, tuple(Value(t) for t in types), origin)


# Call(...) and Value(...) set each field of a frozen dataclass through object.__setattr__:
# half the cost of making one. A replay makes one of each per call it writes, from parts
# checked when it was recorded, so it sets the slots directly (neither class has a
# __post_init__ to skip; a test holds the fields to these)
_new = object.__new__
_SET_OP, _SET_INPUTS, _SET_ATTRS, _SET_OUTPUTS, _SET_ORIGIN = (
    Call.__dict__[name].__set__ for name in ("op", "inputs", "attrs", "outputs", "origin"))
_SET_TYPE, _SET_NAME = (Value.__dict__[name].__set__ for name in ("type", "name"))


def new_value(type_) -> Value:
    """Value(type_), made faster."""
    value = _new(Value)
    _SET_TYPE(value, type_)
    _SET_NAME(value, None)
    return value


def new_call(op: str, inputs: tuple, attrs: Attrs, outputs: tuple, origin) -> Call:
    """Call(op, inputs, attrs, outputs, origin), made faster: all parts as Call holds them."""
    call = _new(Call)
    _SET_OP(call, op)
    _SET_INPUTS(call, inputs)
    _SET_ATTRS(call, attrs)
    _SET_OUTPUTS(call, outputs)
    _SET_ORIGIN(call, origin)
    return call


_SCALARS: dict = {}


def scalar_const(value, dtype: str) -> Const:
    """A rank-0 constant; shared between uses, as constants are immutable."""
    key = (type(value), value, dtype)
    const = _SCALARS.get(key)
    if const is None:
        if len(_SCALARS) >= 4096:
            _SCALARS.clear()
        const = _SCALARS[key] = Const.of(value, dtype=dtype)
    return const


class Recorder:
    """Shared core of GraphBuilder and Emitter: records calls, turns literals into consts."""

    def __init__(self, registry):
        self.registry = registry
        self.calls: list[Call] = []

    def const(self, array, dtype: str | None = None, name: str | None = None) -> Const:
        return Const.of(array, name, dtype)

    def scalar(self, value, dtype: str) -> Const:
        """A rank-0 constant of the given dtype (or of a value's dtype)."""
        if isinstance(dtype, Value):
            dtype = dtype.dtype
        return scalar_const(value, dtype)

    def _with_literals(self, inputs) -> list:
        # a literal takes the dtype of the data it meets: where(cond, x, 0.0) is x's dtype
        tensors = [v for v in inputs if isinstance(v, Value)]
        dtype = next((v.dtype for v in tensors if v.dtype != "bool"),
                     tensors[0].dtype if tensors else "float32")
        return [self._as_value(v, dtype) for v in inputs]

    def _as_value(self, item, dtype: str | None):
        if item is None or isinstance(item, Value):
            return item
        if isinstance(item, (bool, int, float)):
            return scalar_const(item, dtype)
        if isinstance(item, (np.ndarray, np.generic, list)):
            return Const.of(item, dtype=dtype if not isinstance(item, np.ndarray) else None)
        raise OpError(f"cannot use {type(item).__name__} as an op input")

    def call(self, op: str, *inputs, **attrs):
        """Append a call of `op`; returns its result (a tuple for several results)."""
        values = inputs
        for item in inputs:  # decompositions mostly pass values: no literals to convert
            if item is not None and not isinstance(item, Value):
                values = self._with_literals(inputs)
                break
        call = make_call(self.registry, op, values, attrs, self._origin())
        self.calls.append(call)
        return call.outputs[0] if len(call.outputs) == 1 else call.outputs

    def _origin(self):
        return None

    def __getattr__(self, name: str):
        # b.add(x, y), b.nn_softmax(x, axis=-1): sugar for b.call("add"/"nn.softmax", ...)
        if name.startswith("_"):
            raise AttributeError(name)
        op = name.replace("nn_", "nn.", 1).replace("qnn_", "qnn.", 1) \
            if name.startswith(("nn_", "qnn_")) else name
        if op not in self.registry:
            raise AttributeError(f"{type(self).__name__} has no attribute or op {name!r}")
        return lambda *inputs, **attrs: self.call(op, *inputs, **attrs)


class Emitter(Recorder):
    """What a decomposition writes into; stamps every call with its origin."""

    def __init__(self, registry, origin: Origin | None = None):
        self.registry, self.calls, self.origin = registry, [], origin  # Recorder's, inline

    def _origin(self):
        return self.origin


def run_decomposition(emitter: Emitter, opdef, inputs, attrs: Attrs,
                      recipes: "Recipes | None" = None) -> tuple[Value, ...]:
    """Run `opdef`'s decomposition on `inputs`, recording into `emitter`; with `recipes`,
    a decomposition already run on inputs alike is replayed instead (see Recipes)."""
    if recipes is not None:
        return recipes.run(emitter, opdef, inputs, attrs)[0]
    result = opdef.decompose(emitter, *inputs, **attrs)
    results = result if isinstance(result, tuple) else (result,)
    for r in results:
        if not isinstance(r, Value):
            raise OpError(f"decomposition of {opdef.name} returned {type(r).__name__}, "
                          "not a Value")
    return results


SMALL_CONST = 4096  # elements: a constant input up to this size is keyed by its contents


class Recipe:
    """A decomposition's calls with their inputs as positions in a list of values that a
    replay fills: None, the op's inputs, the constants the calls read, then each call's
    outputs as it is made."""

    __slots__ = ("consts", "steps", "results")

    def __init__(self, consts: tuple, steps: tuple, results: tuple):
        # steps: (op, getter of its inputs from the values, whether that gives a tuple,
        # attributes, output types, the output type when there is one)
        self.consts, self.steps, self.results = consts, steps, results

    @staticmethod
    def record(inputs, calls, results) -> "Recipe | None":
        """The recipe of `calls` on `inputs`, or None where a call reads a value that is
        neither an input, a result of an earlier call nor a constant."""
        where: dict = {}  # value -> ("in", i) | ("out", k, j) | ("const", c)
        for i, v in enumerate(inputs):
            if v is not None and v not in where:
                where[v] = ("in", i)
        refs_of = []
        for k, call in enumerate(calls):
            refs = []
            for v in call.inputs:
                ref = None if v is None else where.get(v)
                if ref is None and v is not None:
                    if not isinstance(v, Const):
                        return None
                    ref = ("const", v)
                refs.append(ref)
            refs_of.append(refs)
            for j, out in enumerate(call.outputs):
                where[out] = ("out", k, j)
        refs = []
        for r in results:
            ref = where.get(r, ("const", r) if isinstance(r, Const) else None)
            if ref is None:
                return None
            refs.append(ref)
        return Recipe._compiled(len(inputs), calls, refs_of, refs)

    @staticmethod
    def _compiled(arity: int, calls, refs_of: list, result_refs: list) -> "Recipe":
        """References turned into positions: [None, *inputs, *consts, *outputs...]."""
        consts = {id(r[1]): r[1] for refs in (*refs_of, result_refs) for r in refs
                  if r is not None and r[0] == "const"}
        const_at = {key: 1 + arity + n for n, key in enumerate(consts)}
        starts, first = [], 1 + arity + len(consts)
        for call in calls:
            starts.append(first)
            first += len(call.outputs)

        def position(ref) -> int:
            if ref is None:
                return 0
            kind = ref[0]
            return 1 + ref[1] if kind == "in" else const_at[id(ref[1])] if kind == "const" \
                else starts[ref[1]] + ref[2]

        steps = []
        for call, refs in zip(calls, refs_of):
            at = [position(r) for r in refs]
            types = tuple(o.type for o in call.outputs)
            steps.append((call.op, itemgetter(*at) if at else _NO_INPUTS, len(at) != 1,
                          call.attrs, types, types[0] if len(types) == 1 else None))
        return Recipe(tuple(consts.values()), tuple(steps),
                      tuple(position(r) for r in result_refs))

    def replay(self, emitter: Emitter, inputs) -> tuple[Value, ...]:
        """The recorded calls made again on `inputs` (fresh results, the emitter's origin)."""
        origin = emitter._origin()
        append = emitter.calls.append
        values = [None, *inputs, *self.consts]
        for op, get, many, attrs, types, one in self.steps:
            # new_value and new_call, inline: this loop makes most of a legalized model
            if one is not None:
                value = _new(Value)
                _SET_TYPE(value, one)
                _SET_NAME(value, None)
                outputs = (value,)
            else:
                outputs = tuple([new_value(t) for t in types])
            call = _new(Call)
            _SET_OP(call, op)
            _SET_INPUTS(call, get(values) if many else (get(values),))
            _SET_ATTRS(call, attrs)
            _SET_OUTPUTS(call, outputs)
            _SET_ORIGIN(call, origin)
            append(call)
            values += outputs
        return tuple([values[i] for i in self.results])


def _NO_INPUTS(values) -> tuple:
    return ()


class Recipes:
    """Decompositions recorded once and replayed: the layers of a model decompose the same
    op, attributes and input types over and over, and a decomposition is a function of
    those (and of its constant inputs' contents, and of which inputs are one value). A
    replay makes the recorded calls on the new inputs without running the decomposition
    again: their arity, attributes and types were checked when recorded, on the same
    types and attributes. Kept in `registry.derived`, so a change of the definitions
    forgets them; a constant input larger than SMALL_CONST elements is keyed by itself,
    and such recipes stay in this object (they would keep the constant alive)."""

    LIMIT = 4096

    def __init__(self, registry):
        self.shared = registry.derived("decompositions")
        self.local: dict = {}

    @staticmethod
    def key(opdef, inputs, attrs: Attrs) -> tuple[tuple, bool]:
        """The op, the attributes, and per input: its shape, dtype and the first input
        that is the same value (constants: their contents, or themselves when large);
        and whether a large constant is part of it."""
        parts, large = [], False
        for v in inputs:
            if v is None:
                parts.append(None)
            elif isinstance(v, Const):
                small = v.data.size <= SMALL_CONST
                large = large or not small
                parts.append((v.type.shape, v.type.dtype, v.data.tobytes() if small else v))
            else:  # values compare by identity: index finds the first that is v
                parts.append((v.type.shape, v.type.dtype, inputs.index(v)))
        return (opdef.name, attrs.key(), tuple(parts)), large

    def run(self, emitter: Emitter, opdef, inputs, attrs: Attrs):
        """(results, recipe) of the decomposition on `inputs`: replayed when recorded
        before, else run and recorded (recipe None: it cannot be recorded)."""
        key, large = self.key(opdef, inputs, attrs)
        table = self.local if large else self.shared
        entry = table.get(key)
        if entry is not None and entry[0] is opdef:
            return entry[1].replay(emitter, inputs), entry[1]
        first = len(emitter.calls)
        results = run_decomposition(emitter, opdef, inputs, attrs)
        recipe = Recipe.record(inputs, emitter.calls[first:], results)
        if recipe is not None:
            if len(table) >= self.LIMIT:
                table.clear()
            table[key] = (opdef, recipe)
        return results, recipe


def trace_decomposition(registry, opdef, input_types, attrs: Attrs):
    """Run a decomposition on fresh parameters; returns (calls, results)."""
    params = [None if t is None else Value(t) for t in input_types]
    emitter = Emitter(registry)
    results = run_decomposition(emitter, opdef, params, attrs)
    return emitter.calls, results


def literal(value: Any, dtype: str) -> Const:
    return Const.of(value, dtype=dtype)
