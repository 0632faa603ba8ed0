"""The IR: tensor types, values, constants, calls, functions and modules.

Every IR object is immutable. Values have identity (SSA): two values are the same value
only if they are the same object; `structural_equal` compares modules up to renaming.
"""
from __future__ import annotations

import base64
import json
import math
import re
import operator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import IRError, clip, quote
from .symbols import Expr

DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16",
          "int8", "uint8", "bool")
FUNCTION_KINDS = ("default", "primitive", "external")
# the op of a call of a module-level function (attrs {"callee": name}); no registry defines it
CALL_OP = "call"
# the op that carries a call a backend keeps but cannot lower (legato.legalization.custom_ops codes it)
CUSTOM_OP = "custom"
# numpy cannot make arrays of higher rank (32 before numpy 2)
MAX_RANK = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
# far beyond any real tensor (256 TiB of 8-byte values), and small enough that element
# counts, byte sizes and offsets never overflow int64
MAX_ELEMENTS = 2 ** 45
# attribute lists nest this deep at most, so no walk over them can exhaust the stack
MAX_ATTR_DEPTH = 32


@dataclass(frozen=True, slots=True)
class TensorType:
    """A static shape and a dtype name."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        if type(self.shape) is not tuple or any(type(d) is not int for d in self.shape):
            object.__setattr__(self, "shape", _dims(self.shape))
            if any(isinstance(d, Expr) for d in self.shape):
                self._check_symbolic()
                return
        if self.dtype not in DTYPES:
            raise IRError(f"unknown dtype {quote(self.dtype)}; "
                          f"expected one of {', '.join(DTYPES)}")
        if len(self.shape) > MAX_RANK:
            raise IRError(f"rank {len(self.shape)} is above the limit of {MAX_RANK}")
        if not self.shape:
            return
        if min(self.shape) < 0:
            raise IRError(f"negative dimension in shape {quote(list(self.shape))}")
        # zero dims do not count: numpy cannot make even an empty array whose other
        # dims overflow
        elements = math.prod(self.shape)
        if elements > MAX_ELEMENTS or (elements == 0 and
                                       math.prod(d for d in self.shape if d) > MAX_ELEMENTS):
            raise IRError(f"shape {quote(list(self.shape))} is too large: a tensor holds "
                          f"at most 2**45 elements")

    def _check_symbolic(self) -> None:
        """A shape holding symbolic dims: its concrete dims checked as a static shape's."""
        concrete = tuple(d for d in self.shape if not isinstance(d, Expr))
        TensorType(concrete, self.dtype)
        if len(self.shape) > MAX_RANK:
            raise IRError(f"rank {len(self.shape)} is above the limit of {MAX_RANK}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """The element count: an int, or an expression of the shape's symbols."""
        return math.prod(self.shape)

    @property
    def symbolic(self) -> bool:
        return any(type(d) is not int for d in self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


def _dims(shape) -> tuple[int, ...]:
    try:
        dims = tuple(shape)
        if len(dims) > MAX_RANK:
            raise IRError(f"rank {len(dims)} is above the limit of {MAX_RANK}")
        return tuple(d if isinstance(d, Expr) else operator.index(d) for d in dims)
    except TypeError:
        raise IRError(f"shape {quote(shape)} is not a sequence of integers") from None


class AttrList(tuple):
    """An immutable list attribute; equal to a list or tuple with the same items."""

    __slots__ = ()

    def __eq__(self, other):
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = tuple.__hash__

    def __repr__(self):
        return repr(list(self))


def freeze_attr(value: Any, where: str = "attribute", depth: int = 0) -> Any:
    """Turn a JSON-like value into its immutable form (lists become AttrList); symbolic
    dims (reshape targets of a model with symbolic shapes) are kept as they are."""
    if value is None or isinstance(value, (bool, str, Expr)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        if depth >= MAX_ATTR_DEPTH:
            raise IRError(f"{where}: lists nested more than {MAX_ATTR_DEPTH} deep")
        return AttrList(freeze_attr(v, where, depth + 1) for v in value)
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    raise IRError(f"{where}: {quote(value)} is not JSON-like "
                  "(int, float, bool, str, None or a list)")


def attr_key(value: Any, depth: int = 0) -> Any:
    """A hashable key for an attribute value that tells apart what == conflates: True, 1
    and 1.0 get different keys, and NaN equals itself. Lists and tuples share keys.
    Raises TypeError for values that cannot be keys (unhashable or nested too deep)."""
    kind = type(value)
    if kind is int or kind is str or kind is bool or value is None:
        return (kind, value)
    if kind is list or kind is tuple or kind is AttrList:
        if depth >= MAX_ATTR_DEPTH:
            raise TypeError("attribute lists nested too deep")
        return (list, tuple(attr_key(v, depth + 1) for v in value))
    if kind is float:
        return (float, repr(value))
    hash(value)
    return (kind, value)


DIM_KEY = "$dim"  # a symbolic dim in an attribute's JSON form: {"$dim": "2*batch"}


def thaw_attr(value: Any) -> Any:
    """The JSON form of an attribute value (AttrList becomes list)."""
    if isinstance(value, tuple):
        return [thaw_attr(v) for v in value]
    if isinstance(value, Expr):
        return {DIM_KEY: str(value)}
    return value


class Attrs(Mapping):
    """An immutable, hashable mapping of attribute names to JSON-like values."""

    __slots__ = ("_items", "_key")

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), *,
                 _frozen: bool = False):
        pairs = items.items() if isinstance(items, Mapping) else items
        if _frozen:
            self._items = dict(pairs)
        else:
            self._items = {str(k): freeze_attr(v, f"attribute {quote(k)}")
                           for k, v in pairs}
        self._key = None

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def key(self) -> frozenset:
        """The attributes as a hashable key that tells True, 1 and 1.0 apart (key order
        does not matter, as for dicts)."""
        if self._key is None:
            self._key = frozenset((k, attr_key(v)) for k, v in self._items.items())
        return self._key

    def __hash__(self):
        return hash(self.key())

    def __eq__(self, other):
        if isinstance(other, Attrs):
            return self is other or self.key() == other.key()
        if isinstance(other, Mapping):
            try:
                return self.key() == Attrs(other).key()
            except IRError:
                return False
        return NotImplemented

    def __repr__(self):
        return f"Attrs({self.to_json()!r})"

    def to_json(self) -> dict:
        return {k: thaw_attr(v) for k, v in self._items.items()}


EMPTY_ATTRS = Attrs()


@dataclass(frozen=True, eq=False, slots=True)
class Value:
    """An SSA value: a function parameter or a call result. Identity is the value."""

    type: TensorType
    name: str | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return len(self.type.shape)

    def __repr__(self):
        return f"Value({clip(self.name or hex(id(self)), 60)}: {self.type})"


def _learn_bfloat16() -> None:
    """numpy knows the name 'bfloat16' once ml_dtypes is imported (when it is installed):
    a bfloat16 model's scalars must not depend on who imported it first."""
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        pass


_DTYPE_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    """`dtype.name`, remembered for legato's dtypes: numpy computes it in Python on every
    access, a cost paid per constant of a model."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = dtype.name
        if name in DTYPES:
            _DTYPE_NAMES[dtype] = name
    return name


@dataclass(frozen=True, eq=False, slots=True)
class Const(Value):
    """A value that carries its data (a read-only numpy array)."""

    data: np.ndarray = field(default=None, repr=False)

    @staticmethod
    def of(array, name: str | None = None, dtype: str | None = None, *,
           copy: bool = True) -> "Const":
        """A constant holding a copy of `array`. `copy=False` adopts a read-only array as it
        is: only for one that nothing can write through (a view of bytes or of a read-only
        file mapping), since constants never change."""
        if dtype == "bfloat16":
            _learn_bfloat16()
        try:
            adopt = (not copy and isinstance(array, np.ndarray) and not array.flags.writeable
                     and dtype in (None, _dtype_name(array.dtype)))
            data = array if adopt else np.array(array, dtype=dtype, copy=True)
        except (TypeError, ValueError, OverflowError) as err:  # e.g. bfloat16 without ml_dtypes
            raise IRError(f"cannot make a constant of dtype {quote(dtype)}: "
                          f"{clip(str(err))}") from None
        dtype_name = _dtype_name(data.dtype)
        if dtype_name not in DTYPES:
            raise IRError(f"constant of unsupported dtype {dtype_name}")
        if data.flags.writeable:
            data.setflags(write=False)
        return Const(TensorType(data.shape, dtype_name), name, data)

    def __repr__(self):
        return f"Const({clip(self.name or hex(id(self)), 60)}: {self.type})"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a call came from: the high-level op it is part of and the rules that made it.

    `source` names the source call (its first result in the input module), so calls produced
    from one op instance can be grouped; `rules` is the chain of rewrites, outermost first.
    """

    op: str
    attrs: Attrs
    source: str
    rules: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"op": self.op, "attrs": self.attrs.to_json(), "source": self.source,
                "rules": list(self.rules)}

    @staticmethod
    def from_json(obj: Any) -> "Origin":
        """The inverse of to_json; IRError names what is missing or mistyped."""
        if not isinstance(obj, dict):
            raise IRError(f"an origin must be a JSON object, not {quote(obj)}")
        unknown = sorted(set(obj) - {"op", "attrs", "source", "rules"})
        if unknown:
            raise IRError(f"origin: unknown key {quote(unknown[0])}")
        for key in ("op", "source"):
            if not isinstance(obj.get(key), str):
                raise IRError(f"origin: {key!r} must be a string, got {quote(obj.get(key))}")
        attrs, rules = obj.get("attrs", {}), obj.get("rules", [])
        if not isinstance(attrs, dict):
            raise IRError(f"origin: 'attrs' must be a JSON object, got {quote(attrs)}")
        if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
            raise IRError(f"origin: 'rules' must be a list of strings, got {quote(rules)}")
        return Origin(obj["op"], Attrs(attrs), obj["source"], tuple(rules))


@dataclass(frozen=True, eq=False, slots=True)
class Call:
    """One op applied to inputs (None for an absent optional input), with attributes."""

    op: str
    inputs: tuple[Value | None, ...]
    attrs: Attrs
    outputs: tuple[Value, ...]
    origin: Origin | None = None

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise IRError(f"call {self.op} has {len(self.outputs)} results, not one")
        return self.outputs[0]

    def __repr__(self):
        return f"Call({self.op}, {len(self.inputs)} inputs, {self.attrs.to_json()})"


@dataclass(frozen=True, eq=False, slots=True)
class Function:
    """An SSA function: parameters, calls in order, results, a kind and attributes."""

    params: tuple[Value, ...]
    calls: tuple[Call, ...]
    results: tuple[Value, ...]
    kind: str = "default"
    attrs: Attrs = EMPTY_ATTRS

    def __post_init__(self):
        if self.kind not in FUNCTION_KINDS:
            raise IRError(f"function kind {quote(self.kind)} is not one of "
                          f"{', '.join(FUNCTION_KINDS)}")
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))
        for name in ("params", "calls", "results"):
            if type(getattr(self, name)) is not tuple:
                object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def param_types(self) -> tuple[TensorType, ...]:
        return tuple(p.type for p in self.params)

    @property
    def result_types(self) -> tuple[TensorType, ...]:
        return tuple(r.type for r in self.results)

    def with_calls(self, calls, results=None) -> "Function":
        return Function(self.params, tuple(calls), self.results if results is None else
                        tuple(results), self.kind, self.attrs)


class Module:
    """Module-level functions by name; `main` is the entry. Immutable."""

    __slots__ = ("_functions",)

    def __init__(self, functions: Mapping[str, Function]):
        if "main" not in functions:
            raise IRError("a module needs a function named 'main'")
        object.__setattr__(self, "_functions", MappingProxyType(dict(functions)))

    def __setattr__(self, name, value):
        raise AttributeError("Module is immutable; passes return a new module")

    @property
    def functions(self) -> Mapping[str, Function]:
        return self._functions

    @property
    def main(self) -> Function:
        return self._functions["main"]

    def replace(self, **functions: Function) -> "Module":
        merged = dict(self._functions)
        merged.update(functions)
        return Module(merged)

    def __str__(self) -> str:
        return print_module(self)

    def __repr__(self):
        counts = ", ".join(f"{n}: {len(f.calls)} calls" for n, f in self._functions.items())
        return f"Module({counts})"


def attrs_json(attrs: Attrs) -> str:
    return json.dumps(attrs.to_json(), sort_keys=False)


# --- the text form, printing half (legato.ir.text parses it back) -------------------------

INLINE_LIMIT = 64
_NAME_OK = re.compile(r"[A-Za-z_][\w.]*\Z")


def print_module(module: Module) -> str:
    return "\n\n".join(print_function(name, fn) for name, fn in module.functions.items()) + "\n"


def print_function(name: str, fn: Function) -> str:
    names: dict[int, str] = {}
    taken: set[str] = set()
    params = []
    for i, p in enumerate(fn.params):
        pname = symbol("%", p.name) if _printable_name(p.name, taken) else f"%{i}"
        taken.add(pname)
        names[id(p)] = pname
        params.append(f"{pname}: {p.type}")
    header = f"func {symbol('@', name)}({', '.join(params)}) -> " \
             f"({', '.join(map(str, fn.result_types))})"
    if fn.kind != "default":
        header += f" kind={fn.kind}"
    if fn.attrs:
        header += f" attrs {json.dumps(fn.attrs.to_json())}"
    lines = [header + " {"]
    counter = len(fn.params)  # unnamed parameters use the numbers below this

    def ref(value):
        if value is None:
            return "None"
        if id(value) not in names:
            if not isinstance(value, Const):
                raise IRError(f"function @{name}: value {value!r} is used before definition")
            names[id(value)] = _fresh("%c", len(lines) - 1, taken)
            lines.append(f"  {names[id(value)]} = const {value.type} {_encode(value.data)}")
        return names[id(value)]

    for call in fn.calls:
        if not call.outputs:
            raise IRError(f"function @{name}: call of {call.op} has no results")
        args = ", ".join(ref(v) for v in call.inputs)
        outs = []
        for out in call.outputs:
            names[id(out)] = f"%{counter}"
            outs.append(names[id(out)])
            counter += 1
        text = f"  {', '.join(outs)} = {call.op}({args})"
        if call.attrs:
            text += " " + json.dumps(call.attrs.to_json())
        text += " : " + ", ".join(str(o.type) for o in call.outputs)
        if call.origin is not None:
            text += " origin " + json.dumps(call.origin.to_json())
        lines.append(text)
    lines.append(f"  return {', '.join(ref(r) for r in fn.results)}")
    lines.append("}")
    return "\n".join(lines)


def _printable_name(pname, taken) -> bool:
    return isinstance(pname, str) and symbol("%", pname) not in taken


def symbol(sigil: str, name: str) -> str:
    return sigil + (name if _NAME_OK.match(name) else json.dumps(name))


def _fresh(prefix: str, number: int, taken: set[str]) -> str:
    while f"{prefix}{number}" in taken:
        number += 1
    taken.add(f"{prefix}{number}")
    return f"{prefix}{number}"


def _encode(data: np.ndarray) -> str:
    if data.size <= INLINE_LIMIT:
        return json.dumps(data.ravel().tolist())
    raw = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes()
    return 'b64"' + base64.b64encode(raw).decode("ascii") + '"'
