"""One registry of operator definitions.

An `OpDef` holds everything about an op: its inputs, attribute schema with defaults,
type inference, pattern kind, composite level and decomposition. Registration refuses
duplicates and checks that a decomposition only uses ops of lower level (by tracing it
on the op's examples), which makes legalization terminate by construction.
"""
from __future__ import annotations

import contextlib
import difflib
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..ir import DTYPES, AttrList, Attrs, TensorType, attr_key, freeze_attr
from ..ir.calls import trace_decomposition
from ..ir.errors import OpError, RegistrationError, ShapeError, quote
from ..ir.symbols import Expr

PATTERN_KINDS = ("elemwise", "broadcast", "injective", "reduce", "out_elemwise_fusable", "opaque")
REQUIRED = object()
OP_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True, slots=True)
class InputSpec:
    name: str
    optional: bool = False
    variadic: bool = False


def parse_inputs(spec: str) -> tuple[InputSpec, ...]:
    """'data, gamma?, beta?' -> InputSpecs; '*data' is variadic (one or more tensors)."""
    specs = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        variadic, optional = part.startswith("*"), part.endswith("?")
        specs.append(InputSpec(part.strip("*?"), optional, variadic))
    if any(s.variadic for s in specs[:-1]):
        raise RegistrationError(f"inputs {spec!r}: only the last input may be variadic")
    return tuple(specs)


_TYPE_CHECKS = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "dtype": lambda v: v in DTYPES,
    "ints": lambda v: isinstance(v, tuple) and all(_TYPE_CHECKS["int"](x) for x in v),
    # sizes that may be symbolic (a reshape's target in a model with symbolic shapes)
    "dims": lambda v: isinstance(v, tuple) and all(_TYPE_CHECKS["int"](x) or
                                                   isinstance(x, Expr) for x in v),
    "floats": lambda v: isinstance(v, tuple) and all(_TYPE_CHECKS["float"](x) for x in v),
    "any": lambda v: True,
}


@dataclass(frozen=True, slots=True)
class AttrSpec:
    """An attribute: a type ('int', 'ints?', 'int|ints', 'str:none|tanh', ...) and a default.

    A trailing '?' admits None; 'str:a|b' restricts a string to the listed choices.
    """

    name: str
    type: str
    default: Any = REQUIRED

    def check(self, value: Any, op: str) -> Any:
        spec = self.type
        if spec.endswith("?"):
            if value is None:
                return None
            spec = spec[:-1]
        if spec.startswith("str:"):
            choices = spec[4:].split("|")
            if value not in choices:
                raise OpError(f"{op}: attribute {self.name}={_show(value)} must be one of "
                              f"{choices}")
            return value
        if spec.startswith("float") and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if spec == "floats" and isinstance(value, tuple) and \
                all(_TYPE_CHECKS["float"](v) for v in value):
            value = AttrList(float(v) for v in value)
        if not any(_TYPE_CHECKS[t](value) for t in spec.split("|")):
            raise OpError(f"{op}: attribute {self.name}={_show(value)} must be of type {self.type}")
        return value


def _first_line(doc: str) -> str:
    """The summary of a docstring: its first paragraph, on one line."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def _names(names, op: str, what: str) -> tuple[str, ...]:
    names = (names,) if isinstance(names, str) else tuple(names)
    if not all(isinstance(n, str) and n for n in names):
        raise RegistrationError(f"op {op}: {what} must be a list of op names, got "
                                f"{quote(list(names))}")
    return names


def _check_args(name, inputs, attrs, infer, kind, level, decompose, examples, doc,
                samples, layout_rule, const_check, generator) -> None:
    """The types of OpDef's arguments, so a slip (in a plugin or the core) is a
    RegistrationError naming the op rather than a crash deep in the registry."""
    if not isinstance(name, str) or not OP_NAME.fullmatch(name):
        raise RegistrationError(f"op name {quote(name)} is not a dotted identifier")
    function = "a function or None"
    checks = [
        ("inputs", inputs, isinstance(inputs, str), "a string such as 'data, gamma?'"),
        ("infer", infer, callable(infer), "a function (input types, attrs) -> output types"),
        ("kind", kind, isinstance(kind, str), "a pattern kind"),
        ("level", level, isinstance(level, int) and not isinstance(level, bool)
         and level >= 0, "an int >= 0"),
        ("decompose", decompose, decompose is None or callable(decompose), function),
        ("examples", examples, isinstance(examples, (list, tuple)),
         "a list of (input types, attrs)"),
        ("attrs", attrs, attrs is None or isinstance(attrs, Mapping), "a mapping"),
        ("doc", doc, isinstance(doc, str), "a string (one line)"),
        ("samples", samples, samples is None or callable(samples),
         "a function rng -> samples, or None"),
        ("layout_rule", layout_rule, layout_rule is None or callable(layout_rule), function),
        ("const_check", const_check, const_check is None or callable(const_check), function),
        ("generator", generator, generator is None or callable(generator), function),
    ]
    for arg, value, ok, wanted in checks:
        if not ok:
            raise RegistrationError(f"op {name}: {arg} must be {wanted}, got {quote(value)}")


def _show(value):
    return quote(list(value) if isinstance(value, tuple) else value)


class OpDef:
    """The definition of one operator: everything the core, the frontends, the docs and
    the test kit know about it. A plugin adds an op with `register(OpDef(...))` from its
    `legato_register_ops` hook; the checks below are the whole contract.

    Besides its signature, inference and decomposition, an op may name the ONNX op types
    (`onnx`) and ATen op packets (`aten`) that map onto it one to one (same inputs in the
    same order, attributes by name), from which the importers derive their converters; a
    `tolerance` (the largest error of a float32 result relative to max(|reference|, 1),
    None for the default); a `layout_rule` (legato.passes.layout); a `samples(rng)` hook for
    ops whose inputs need values the test kit cannot guess (legato.testing), or a
    `generator(ctx, op)` drawing one call on the test kit's context, which fuzz programs
    chain too (legato.testing.generators); and
    `patterns`, other forms of the op that exporters write (legato.recompose); and
    `const_check(inputs, attrs)`, a check of the values of constant inputs that raises
    ShapeError where a value makes the op undefined (a NaN quantization scale).
    """

    def __init__(self, name: str, inputs: str, attrs: Mapping | None, infer: Callable, kind: str,
                 level: int = 0, decompose: Callable | None = None,
                 examples: Sequence = (), doc: str = "", *, onnx: Sequence[str] = (),
                 aten: Sequence[str] = (), tolerance: float | None = None,
                 layout_rule: Callable | None = None, samples: Callable | None = None,
                 patterns: Sequence[Callable] = (), const_check: Callable | None = None,
                 generator: Callable | None = None):
        _check_args(name, inputs, attrs, infer, kind, level, decompose, examples, doc,
                    samples, layout_rule, const_check, generator)
        if kind not in PATTERN_KINDS:
            raise RegistrationError(f"op {name}: pattern kind {kind!r} is not one of "
                                    f"{', '.join(PATTERN_KINDS)}")
        if level > 0 and decompose is None:
            raise RegistrationError(f"op {name} has level {level} but no decomposition")
        if level == 0 and decompose is not None:
            raise RegistrationError(f"op {name} is level 0 (primitive) but has a decomposition")
        self.name, self.kind, self.level = name, kind, level
        self.inputs = parse_inputs(inputs)
        self.attr_specs = {k: AttrSpec(k, *v) if isinstance(v, tuple) else AttrSpec(k, v)
                           for k, v in (attrs or {}).items()}
        self.infer = infer
        self.decompose = decompose
        self.layout_rule, self.samples, self.generator = layout_rule, samples, generator
        self.const_check = const_check
        # other ways exporters write the op, used only to find it again (legato.recompose);
        # each has the decomposition's signature (b, *inputs, **attrs)
        self.patterns = tuple(patterns)
        if not all(callable(p) for p in self.patterns):
            raise RegistrationError(f"op {name}: patterns must be functions "
                                    "(b, *inputs, **attrs) like a decomposition")
        self.plugin: str | None = None  # the plugin that registered it (None: the core)
        self.examples = tuple(examples)
        self.doc = _first_line(doc or (inspect.getdoc(decompose) or "" if decompose else ""))
        self.onnx, self.aten = _names(onnx, name, "onnx"), _names(aten, name, "aten")
        if tolerance is not None and not (isinstance(tolerance, (int, float))
                                          and 0 <= tolerance < 1):
            raise RegistrationError(f"op {name}: tolerance must be a number in [0, 1), "
                                    f"got {quote(tolerance)}")
        self.tolerance = None if tolerance is None else float(tolerance)
        self._attr_cache: dict = {}
        self._defaults = {k: freeze_attr(s.default) for k, s in self.attr_specs.items()
                          if s.default is not REQUIRED}

    def __repr__(self):
        return f"OpDef({self.name}, level={self.level}, kind={self.kind})"

    @property
    def elementwise(self) -> bool:
        """Each result element depends only on the same-index elements of the
        (broadcast) inputs, so a result may reuse the buffer of a dying input."""
        return self.kind in ("elemwise", "broadcast")

    @property
    def variadic(self) -> bool:
        return bool(self.inputs) and self.inputs[-1].variadic

    def signature(self) -> str:
        ins = [("*" if s.variadic else "") + s.name + ("?" if s.optional else "")
               for s in self.inputs]
        attrs = [f"{k}={_show(freeze_attr(s.default))}" if s.default is not REQUIRED else k
                 for k, s in self.attr_specs.items()]
        return f"{self.name}({', '.join(ins + attrs)})"

    def normalize_attrs(self, attrs: dict) -> Attrs:
        """Validate attributes, fill defaults, freeze; errors name the op and attribute."""
        try:  # decompositions emit the same few attribute sets over and over
            # keyed by type too: True, 1 and 1.0 are equal in Python but not as attributes
            key = attrs.key() if isinstance(attrs, Attrs) else \
                tuple((k, attr_key(v)) for k, v in attrs.items())
            cached = self._attr_cache.get(key)
        except TypeError:  # unhashable or nested too deep: validate without caching
            key, cached = None, None
        if cached is None:
            cached = self._normalize(attrs)
            if key is not None:
                if len(self._attr_cache) >= 1024:
                    self._attr_cache.clear()
                self._attr_cache[key] = cached
        return cached

    def _normalize(self, attrs: dict) -> Attrs:
        unknown = [k for k in attrs if k not in self.attr_specs]
        if unknown:
            hint = _suggest(unknown[0], self.attr_specs)
            raise OpError(f"{self.name}: unknown attribute {quote(unknown[0])}{hint}; "
                          f"signature is {self.signature()}")
        out = {}
        for key, spec in self.attr_specs.items():
            if key in attrs:
                out[key] = spec.check(freeze_attr(attrs[key], f"{self.name}.{key}"), self.name)
            elif key in self._defaults:
                out[key] = self._defaults[key]
            else:
                raise OpError(f"{self.name}: missing required attribute {key!r}; "
                              f"signature is {self.signature()}")
        return Attrs(out, _frozen=True)

    def check_arity(self, n_inputs: int) -> None:
        fixed = len(self.inputs) - (1 if self.variadic else 0)
        ok = n_inputs >= fixed + 1 if self.variadic else n_inputs == fixed
        if not ok:
            want = f"at least {fixed + 1}" if self.variadic else str(fixed)
            raise OpError(f"{self.name} takes {want} inputs, got {n_inputs}; "
                          f"signature is {self.signature()}")

    def input_spec(self, index: int) -> InputSpec:
        return self.inputs[min(index, len(self.inputs) - 1)]

    def infer_types(self, input_types: Sequence[TensorType | None], attrs: Attrs
                    ) -> tuple[TensorType, ...]:
        try:
            result = self.infer(input_types, attrs)
        except ShapeError as err:
            types = ", ".join(str(t) if t is not None else "None" for t in input_types)
            types = types if len(types) <= 200 else types[:196] + " ..."
            raise ShapeError(f"{self.name}({types}) "
                             f"{quote(attrs.to_json(), 200)}: {err}") from None
        return result if isinstance(result, tuple) else (result,)

    def check_consts(self, inputs: Sequence, attrs: Attrs) -> None:
        """Run `const_check` on a call's input values (Const where constant), naming the op."""
        if self.const_check is None:
            return
        try:
            self.const_check(inputs, attrs)
        except ShapeError as err:
            raise ShapeError(f"{self.name}: {err}") from None


class Registry:
    """Op definitions by name. Refuses duplicates; checks levels at registration."""

    def __init__(self):
        self._ops: dict[str, OpDef] = {}
        self._unchecked: list[str] = []
        self._deferring = False
        self._derived: dict[str, dict] = {}

    def derived(self, kind: str) -> dict:
        """The cache of what `kind` (a pass) computes from these definitions (recompose's
        templates, recorded decompositions). The registry owns it and empties it whenever a
        definition is added or removed, so no entry outlives what it was computed from;
        each user bounds its own entries."""
        found = self._derived.get(kind)
        if found is None:
            found = self._derived[kind] = {}
        return found

    def __contains__(self, name: str) -> bool:
        return name in self._ops

    def names(self) -> list[str]:
        return sorted(self._ops)

    def find(self, name: str) -> OpDef | None:
        """The definition of `name`, or None."""
        return self._ops.get(name)

    def get(self, name: str) -> OpDef:
        try:
            return self._ops[name]
        except KeyError:
            raise OpError(f"unknown op {quote(name)}{_suggest(name, self._ops)}") from None

    def ops(self) -> list[OpDef]:
        """Every definition, by name."""
        return [self._ops[name] for name in sorted(self._ops)]

    def register(self, opdef: OpDef) -> OpDef:
        """Add a definition. Its decomposition is traced on its examples now, or, inside
        `with registry.deferred():`, once the block ends."""
        if opdef.name in self._ops:
            raise RegistrationError(f"op {opdef.name!r} is already registered")
        self._ops[opdef.name] = opdef
        self._derived.clear()
        if opdef.decompose is not None:
            self._unchecked.append(opdef.name)
            if not self._deferring:
                self.validate()
        return opdef

    @contextlib.contextmanager
    def deferred(self):
        """Register a set of definitions that use each other in any order: their
        decompositions are checked when the block ends."""
        self._deferring = True
        try:
            yield self
        finally:
            self._deferring = False
        self.validate()

    def validate(self) -> None:
        """Check every decomposition registered since the last validation: it runs on the
        op's examples, emits only ops of lower level and gives the inferred types. An op
        that fails is removed again, and the error names it."""
        while self._unchecked:
            name = self._unchecked[0]
            try:
                self._check_decomposition(self._ops[name])
            except Exception:
                self._unchecked.pop(0)
                self._ops.pop(name, None)
                self._derived.clear()
                raise
            self._unchecked.pop(0)

    def unregister(self, name: str) -> None:
        self._ops.pop(name, None)
        self._derived.clear()
        if name in self._unchecked:
            self._unchecked.remove(name)

    def _check_decomposition(self, opdef: OpDef) -> None:
        """Trace the decomposition on each example; every op it emits must be lower level."""
        if not opdef.examples:
            raise RegistrationError(f"op {opdef.name} has a decomposition but no examples "
                                    "to check it on (examples=[(input_types, attrs), ...])")
        for input_types, attrs in opdef.examples:
            try:
                norm = opdef.normalize_attrs(attrs)
                out_types = opdef.infer_types(input_types, norm)
                calls, results = trace_decomposition(self, opdef, input_types, norm)
            except RegistrationError:
                raise
            except Exception as err:
                raise RegistrationError(f"op {opdef.name}: decomposition failed on example "
                                        f"{_example_str(input_types, attrs)}: {err}") from err
            for call in calls:
                used = self.get(call.op)
                if used.level >= opdef.level:
                    raise RegistrationError(
                        f"op {opdef.name} (level {opdef.level}) decomposes into {call.op} "
                        f"(level {used.level}); a decomposition may only use ops of lower level")
            got = tuple(r.type for r in results)
            if got != out_types:
                raise RegistrationError(
                    f"op {opdef.name}: decomposition on {_example_str(input_types, attrs)} "
                    f"gives {[str(t) for t in got]}, inference says {[str(t) for t in out_types]}")


def _example_str(input_types, attrs) -> str:
    return f"({', '.join(str(t) for t in input_types)}) {attrs}"


def _suggest(name: str, known) -> str:
    if not isinstance(name, str) or len(name) > 100:  # difflib's time grows with both lengths
        return ""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


suggest = _suggest
