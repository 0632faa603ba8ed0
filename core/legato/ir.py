"""The IR: tensor types, values, constants, calls, functions and modules.

Every IR object is immutable. Values have identity (SSA): two values are the same value
only if they are the same object; `structural_equal` compares modules up to renaming.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import IRError

DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16",
          "int8", "uint8", "bool")
FUNCTION_KINDS = ("default", "primitive", "external")


@dataclass(frozen=True, slots=True)
class TensorType:
    """A static shape and a dtype name."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        if type(self.shape) is not tuple:
            object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.dtype not in DTYPES:
            raise IRError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}")
        if any(d < 0 for d in self.shape):
            raise IRError(f"negative dimension in shape {list(self.shape)}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


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


def freeze_attr(value: Any, where: str = "attribute") -> Any:
    """Turn a JSON-like value into its immutable form (lists become AttrList)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return AttrList(freeze_attr(v, where) for v in value)
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    raise IRError(f"{where}: {value!r} is not JSON-like (int, float, bool, str, None or a list)")


def thaw_attr(value: Any) -> Any:
    """The JSON form of an attribute value (AttrList becomes list)."""
    if isinstance(value, tuple):
        return [thaw_attr(v) for v in value]
    return value


class Attrs(Mapping):
    """An immutable, hashable mapping of attribute names to JSON-like values."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), *,
                 _frozen: bool = False):
        pairs = items.items() if isinstance(items, Mapping) else items
        if _frozen:
            self._items = dict(pairs)
        else:
            self._items = {str(k): freeze_attr(v, f"attribute {k!r}") for k, v in pairs}
        self._hash = None

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash(tuple((k, _hashable(v)) for k, v in self._items.items()))
        return self._hash

    def __eq__(self, other):
        if isinstance(other, Attrs):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __repr__(self):
        return f"Attrs({self.to_json()!r})"

    def to_json(self) -> dict:
        return {k: thaw_attr(v) for k, v in self._items.items()}


def _hashable(value):
    # float('nan') != itself; hash by repr keeps cache keys stable for NaN attributes
    return repr(value) if isinstance(value, float) else value


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
        return f"Value({self.name or hex(id(self))}: {self.type})"


@dataclass(frozen=True, eq=False, slots=True)
class Const(Value):
    """A value that carries its data (a read-only numpy array)."""

    data: np.ndarray = field(default=None, repr=False)

    @staticmethod
    def of(array, name: str | None = None, dtype: str | None = None) -> "Const":
        data = np.array(array, dtype=dtype, copy=True)
        if data.dtype.name not in DTYPES:
            raise IRError(f"constant of unsupported dtype {data.dtype.name}")
        data.setflags(write=False)
        return Const(TensorType(data.shape, data.dtype.name), name, data)

    def __repr__(self):
        return f"Const({self.name or hex(id(self))}: {self.type})"


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
    def from_json(obj: dict) -> "Origin":
        return Origin(obj["op"], Attrs(obj.get("attrs", {})), obj["source"],
                      tuple(obj.get("rules", ())))


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
            raise IRError(f"function kind {self.kind!r} is not one of {', '.join(FUNCTION_KINDS)}")
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
        from .printer import print_module
        return print_module(self)

    def __repr__(self):
        counts = ", ".join(f"{n}: {len(f.calls)} calls" for n, f in self._functions.items())
        return f"Module({counts})"


def attrs_json(attrs: Attrs) -> str:
    return json.dumps(attrs.to_json(), sort_keys=False)
