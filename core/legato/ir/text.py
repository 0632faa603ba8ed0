"""The text form of a module: `print_module` (from legato.ir.graph) and `parse`, which round-trip.

    func @main(%x: float32[4, 8]) -> (float32[4, 8]) {
      %c0 = const float32[8] [1.0, 1.0, ...]
      %0 = nn.layer_norm(%x, %c0, None) {"axes": [-1], "epsilon": 1e-05} : float32[4, 8]
      return %0
    }

Attributes and origins are JSON. Constants of more than 64 elements are base64 of their
little-endian bytes, so weights round-trip exactly. Unnamed values print as numbers
(`%0`); a name that is not an identifier prints as a JSON string (`%"input:0"`).

The parser reads each line with a forward-only scanner (`_Line`), so its time is linear
in the size of the text however long a line is.
"""
from __future__ import annotations

import base64
import json
import re

import numpy as np

from ..plugins.context import context
from .errors import IRError, LegatoError, ParseError, ShapeError, quote
from .graph import (DIM_KEY, MAX_ATTR_DEPTH, MAX_RANK, Attrs, Call, Const, Function, Module, Origin, TensorType, Value,
                    print_function, print_module, symbol as _symbol)
from .symbols import parse_dim
from .verify import verify

# printing lives with the IR (str(module) needs it); this module reads the text back
__all__ = ["parse", "parse_type", "print_function", "print_module"]

_SYMBOL_OK = re.compile(r"[\w.]+\Z")


# --- constant data ------------------------------------------------------------------------

def _numpy_dtype(name: str, where: str) -> np.dtype:
    if name == "bfloat16":  # numpy knows bfloat16 only once ml_dtypes is imported
        try:
            import ml_dtypes
        except ImportError:
            raise ParseError(f"{where}: bfloat16 constants need the ml_dtypes package") \
                from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _decode(text: str, ttype: TensorType, where: str) -> np.ndarray:
    dtype = _numpy_dtype(ttype.dtype, where)
    try:
        if text.startswith('b64"'):
            flat = _decode_base64(text, ttype, dtype)
        else:
            flat = _decode_json(_json(text, where, "constant data"), ttype, dtype)
    except _BadData as err:
        raise ParseError(f"{where}: bad constant data: {err}") from None
    return flat.reshape(ttype.shape)


class _BadData(ValueError):
    """Constant data that does not fit its type (the caller names the line)."""


def _decode_base64(text, ttype, dtype) -> np.ndarray:
    if not text.endswith('"') or len(text) < 5:
        raise _BadData("base64 data must end with '\"'")
    try:
        raw = base64.b64decode(text[4:-1], validate=True)
    except ValueError as err:
        raise _BadData(f"bad base64: {err}") from None
    if len(raw) != ttype.size * dtype.itemsize:
        raise _BadData(f"{len(raw)} bytes for {ttype}, which needs "
                       f"{ttype.size * dtype.itemsize}")
    flat = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)
    if dtype == np.bool_ and flat.size and flat.view(np.uint8).max() > 1:
        raise _BadData("bool data holds bytes other than 0 and 1")
    return flat


def _decode_json(items, ttype, dtype) -> np.ndarray:
    if not isinstance(items, list):
        raise _BadData(f"expected a JSON list or b64\"...\", got {quote(items)}")
    if len(items) != ttype.size:
        raise _BadData(f"{len(items)} values for {ttype}, which needs {ttype.size}")
    # exact types: numpy would silently truncate 1.5 or 2 into an int or bool
    allowed = {bool} if dtype.kind == "b" else {int} if dtype.kind in "iu" else {int, float}
    if not set(map(type, items)) <= allowed:
        wrong = next(v for v in items if type(v) not in allowed)
        raise _BadData(f"value {quote(wrong)} is not a {ttype.dtype}")
    if dtype.kind in "iu":
        return _exact_ints(items, dtype, ttype)
    if dtype.kind == "f" or ttype.dtype == "bfloat16":
        return _floats(items, dtype, ttype)
    return np.array(items, dtype=dtype)


def _exact_ints(items, dtype, ttype) -> np.ndarray:
    info = np.iinfo(dtype)
    if items and (min(items) < info.min or max(items) > info.max):
        wrong = next(v for v in items if not info.min <= v <= info.max)
        raise _BadData(f"value {quote(wrong)} is out of range for {ttype.dtype} "
                       f"[{info.min}, {info.max}]")
    return np.array(items, dtype=dtype)


def _floats(items, dtype, ttype) -> np.ndarray:
    """Floats narrowed to `dtype`; a finite value that would become inf is refused."""
    try:
        wide = np.array(items, dtype=np.float64)
    except OverflowError:  # an integer beyond float64
        wide = None
    if wide is not None:
        with np.errstate(over="ignore"):
            narrow = wide.astype(dtype)
        if not (np.isinf(narrow) & np.isfinite(wide)).any():
            return narrow
    wrong = next(v for v in items if _overflows(v, dtype))
    raise _BadData(f"value {quote(wrong)} is out of range for {ttype.dtype}")


def _overflows(value, dtype) -> bool:
    try:
        wide = float(value)
    except OverflowError:
        return True
    with np.errstate(over="ignore"):
        return bool(np.isinf(np.array(wide).astype(dtype))) and not np.isinf(wide)


# --- parsing ------------------------------------------------------------------------------

_WORD = re.compile(r"[\w.]+")
_DTYPE = re.compile(r"[a-z0-9]+")
_DIGITS = re.compile(r"[0-9]+")
_SPACE = re.compile(r"[ \t]*")
_MAX_DIGITS = 19  # dims beyond int64 are refused before int() reads them
# one attempt at one position: no backtracking over the line, however long it is
_TYPE = re.compile(r"([a-z0-9]+)\[([0-9A-Za-z_.+\-*/%(), \t]*)\]")
_TYPE_CACHE: dict[str, TensorType] = {}


class _Line:
    """A forward-only cursor over one line; its errors name the line and column."""

    def __init__(self, text: str, number: int):
        self.text, self.pos, self.number = text, 0, number
        self.where = f"line {number}"

    def error(self, message: str) -> ParseError:
        return ParseError(f"line {self.number}, column {self.pos + 1}: {message}")

    def skip(self) -> None:
        text, pos = self.text, self.pos
        if pos < len(text) and text[pos] in " \t":
            self.pos = _SPACE.match(text, pos).end()

    def at(self, literal: str) -> bool:
        self.skip()
        return self.text.startswith(literal, self.pos)

    def take(self, literal: str) -> bool:
        if self.text.startswith(literal, self.pos) or self.at(literal):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str) -> None:
        if not self.take(literal):
            raise self.error(f"expected {literal!r}, got {self.rest()}")

    def rest(self) -> str:
        tail = self.text[self.pos:self.pos + 40]
        return repr(tail + ("..." if self.pos + 40 < len(self.text) else "")) if tail \
            else "the end of the line"

    def match(self, pattern: re.Pattern, what: str) -> str:
        self.skip()
        found = pattern.match(self.text, self.pos)
        if not found:
            raise self.error(f"expected {what}, got {self.rest()}")
        self.pos = found.end()
        return found.group()

    def symbol(self, sigil: str) -> tuple[str, str | None]:
        """`%name`, `@name` or a sigil and a JSON string: (key, name). Plain digits (`%0`)
        name nothing (name None); a quoted `%"0"` is the name "0" under another key."""
        self.expect(sigil)
        if not self.text.startswith('"', self.pos):
            key = self.match(_WORD, f"a name after {sigil!r}")
            return key, None if key.isdigit() else key
        start = self.pos
        name = self.json(f"a {sigil} name")
        if not isinstance(name, str):
            raise self.error(f"a {sigil} name must be a string")
        return (self.text[start:self.pos] if name.isdigit() else name), name

    def json(self, what: str):
        self.skip()
        value, self.pos = _raw_json(self.text, self.pos, self.where, what)
        return value

    def type(self) -> TensorType:
        self.skip()
        found = _TYPE.match(self.text, self.pos)
        if found is None:
            self._type_by_parts()  # raises, naming the part at fault
        self.pos = found.end()
        ttype = _TYPE_CACHE.get(found.group())
        if ttype is None:
            ttype = self._make_type(found.group(1), found.group(2))
            if len(_TYPE_CACHE) >= 4096:
                _TYPE_CACHE.clear()
            _TYPE_CACHE[found.group()] = ttype
        return ttype

    def _make_type(self, dtype: str, dims_text: str) -> TensorType:
        parts = dims_text.split(",") if dims_text.strip() else []
        if len(parts) > MAX_RANK:  # before reading a million dims
            raise self.error(f"rank {len(parts)} is above the limit of {MAX_RANK}")
        dims = []
        for part in parts:
            digits = part.strip(" \t")
            if not digits.isdigit():
                dims.append(self._symbolic_dim(digits))
                continue
            if len(digits) > _MAX_DIGITS:
                raise self.error(f"dimension of {len(digits)} digits is too large")
            dims.append(int(digits))
        try:
            return TensorType(tuple(dims), dtype)
        except IRError as err:
            raise self.error(str(err)) from None

    def _symbolic_dim(self, text: str):
        """A dimension written as an expression of symbols (`seq`, `2*seq+1`)."""
        try:
            return parse_dim(text)
        except ShapeError as err:
            raise self.error(f"bad dimension {quote(text)} in a type: {err}") from None

    def _type_by_parts(self) -> None:
        self.match(_DTYPE, "a type like float32[4, 8]")
        self.expect("[")
        for _ in range(MAX_RANK + 1):
            if self.take("]"):
                raise self.error("malformed type")
            self.match(_DIGITS, "a dimension")
            self.take(",")
        raise self.error(f"expected ']' to close the type, got {self.rest()}")

    def types(self) -> list[TensorType]:
        """A comma-separated list of types, possibly empty."""
        if not _DTYPE.match(self.text, _SPACE.match(self.text, self.pos).end()):
            return []
        found = [self.type()]
        while self.take(","):
            found.append(self.type())
        return found

    def end(self) -> None:
        self.skip()
        if self.pos != len(self.text):
            raise self.error(f"unexpected {self.rest()}")


def parse_type(text: str, where: str = "type") -> TensorType:
    line = _Line(text, 0)
    try:
        found = line.type()
        line.end()
    except ParseError as err:
        raise ParseError(f"{where}: {quote(text.strip())} is not a type like "
                         f"float32[4, 8] ({str(err).split(': ', 1)[-1]})") from None
    return found


def parse(text: str, registry=None) -> Module:
    """Read the text form back into a Module (verified). `registry`: the context's (core
    and plugin ops) when not given."""
    if registry is None:
        registry = context().registry
    functions: dict[str, Function] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        start = i + 1
        name, parsed, i = _parse_function(lines, i, registry)
        if name in functions:
            raise ParseError(f"line {start}: function {_shown_function(name)} is defined twice")
        functions[name] = parsed
    if "main" not in functions:
        raise ParseError("no function @main in the text")
    module = Module({name: fn for name, (fn, _, _) in functions.items()})
    verify(module, registry)  # first: a wrongly typed call explains a wrong result type
    for name, (fn, declared, line) in functions.items():
        _check_declared_results(name, fn, declared, line)
    return module


def _parse_function(lines, start, registry):
    head = _Line(lines[start].strip(), start + 1)
    if not head.at("func"):
        raise head.error(f"expected 'func @name(...)', got {head.rest()}")
    name, env, params, result_types, kind, attrs = _parse_header(head)
    calls, results = [], None
    i = start + 1
    while i < len(lines):
        line = _Line(lines[i].strip(), i + 1)
        i += 1
        if not line.text or line.text.startswith("#"):
            continue
        if line.text == "}":
            break
        if results is not None:
            raise line.error("nothing may follow 'return' but '}'")
        if line.take("return"):
            results = _parse_return(line, env)
        else:
            call = _parse_statement(line, env, registry)
            if call is not None:
                calls.append(call)
    else:
        raise ParseError(f"line {start + 1}: function {_shown_function(name)} has no closing '}}'")
    if results is None:
        raise ParseError(f"line {start + 1}: function {_shown_function(name)} has no return")
    try:
        fn = Function(tuple(params), tuple(calls), results, kind, attrs)
    except IRError as err:
        raise ParseError(f"line {start + 1}: {err}") from None
    return name, (fn, result_types, start + 1), i


def _check_declared_results(name: str, fn: Function, declared, line: int) -> None:
    if list(fn.result_types) != declared:
        raise ParseError(f"line {line}: function {_shown_function(name)} declares results "
                         f"{quote([str(t) for t in declared])} but returns "
                         f"{quote([str(t) for t in fn.result_types])}")


def _parse_header(head: _Line):
    head.expect("func")
    name = head.symbol("@")[1]
    if name is None:
        raise head.error("a function name cannot be a plain number")
    head.expect("(")
    env: dict[str, Value] = {}
    params = []
    while not head.take(")"):
        if params:
            head.expect(",")
        key, pname = head.symbol("%")
        head.expect(":")
        value = Value(head.type(), pname)
        _define(env, key, value, head)
        params.append(value)
    head.expect("->")
    head.expect("(")
    result_types = head.types()
    head.expect(")")
    kind, attrs = "default", Attrs()
    if head.take("kind="):
        kind = head.match(_WORD, "a function kind")
    if head.take("attrs"):
        found = head.json("function attributes")
        if not isinstance(found, dict):
            raise head.error(f"function attributes must be a JSON object, got {quote(found)}")
        attrs = _attrs(found, head)
    head.expect("{")
    head.end()
    return name, env, params, result_types, kind, attrs


def _parse_return(line: _Line, env) -> tuple[Value, ...]:
    results = []
    if line.at("%"):
        results.append(_lookup(env, line.symbol("%")[0], line))
        while line.take(","):
            results.append(_lookup(env, line.symbol("%")[0], line))
    line.end()
    return tuple(results)


def _parse_statement(line: _Line, env, registry) -> Call | None:
    """A constant definition (returns None) or a call."""
    outs = [line.symbol("%")[0]]
    while line.take(","):
        outs.append(line.symbol("%")[0])
    line.expect("=")
    op = line.match(_WORD, "an op name or 'const'")
    if op == "const" and len(outs) == 1 and not line.at("("):
        ttype = line.type()
        line.skip()
        const = Const.of(_decode(line.text[line.pos:], ttype, line.where))
        _define(env, outs[0], const, line)
        return None
    return _parse_call(line, op, outs, env, registry)


def _parse_call(line: _Line, op: str, outs: list[str], env, registry) -> Call:
    line.expect("(")
    inputs = []
    while not line.take(")"):
        if inputs:
            line.expect(",")
        inputs.append(None if line.take("None") else _lookup(env, line.symbol("%")[0], line))
    attrs = {}
    if line.at("{"):
        attrs = _revive_dims(line.json("attributes"), line)
    line.expect(":")
    types = line.types()
    origin = None
    if line.take("origin"):
        try:
            origin = Origin.from_json(_revive_dims(line.json("origin"), line))
        except IRError as err:
            raise line.error(str(err)) from None
    line.end()
    if len(types) != len(outs):
        raise line.error(f"{len(outs)} results but {len(types)} types")
    values = tuple(Value(t) for t in types)
    for out, value in zip(outs, values):
        _define(env, out, value, line)
    return Call(op, tuple(inputs), _call_attrs(op, attrs, line, registry), values, origin)


def _revive_dims(value, line: _Line, depth: int = 0):
    """Attributes as parsed, with each {"$dim": "2*batch"} back as a symbolic dim."""
    if isinstance(value, dict):
        if depth and set(value) == {DIM_KEY} and isinstance(value[DIM_KEY], str):
            try:
                return parse_dim(value[DIM_KEY])
            except ShapeError as err:
                raise line.error(f"bad symbolic dim in the attributes: {err}") from None
        return {k: _revive_dims(v, line, depth + 1) for k, v in value.items()}
    if isinstance(value, list) and depth < MAX_ATTR_DEPTH:
        return [_revive_dims(v, line, depth + 1) for v in value]
    return value


def _call_attrs(op: str, attrs: dict, line: _Line, registry) -> Attrs:
    # the registry's normal form: defaults filled, ints where a float is expected widened
    try:
        return registry.get(op).normalize_attrs(attrs) if op in registry else Attrs(attrs)
    except LegatoError as err:
        raise line.error(str(err)) from None


def _attrs(found: dict, line: _Line) -> Attrs:
    try:
        return Attrs(found)
    except IRError as err:
        raise line.error(str(err)) from None


def _define(env, name: str, value: Value, line: _Line) -> None:
    if name in env:
        raise line.error(f"{_shown(name)} is defined twice")
    env[name] = value


def _lookup(env, name, line: _Line):
    try:
        return env[name]
    except KeyError:
        raise ParseError(f"{line.where}: {_shown(name)} is not defined") from None


def _shown_function(name: str) -> str:
    text = _symbol("@", name)
    return text if len(text) <= 60 else text[:56] + " ..."


def _shown(key: str) -> str:
    text = "%" + key if _SYMBOL_OK.match(key) else _symbol("%", key)
    return text if len(text) <= 60 else text[:56] + " ..."


def _raw_json(text: str, pos: int, where: str, what: str):
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except json.JSONDecodeError as err:
        raise ParseError(f"{where}: bad JSON in {what}: {err.msg} at column {err.colno}") \
            from None
    except RecursionError:
        raise ParseError(f"{where}: {what} nests too deep") from None
    except ValueError as err:  # e.g. an integer of more digits than Python reads
        raise ParseError(f"{where}: bad JSON in {what}: {quote(str(err))}") from None


def _json(text, where, what):
    value, end = _raw_json(text, 0, where, what)
    if text[end:].strip():
        raise ParseError(f"{where}: unexpected text after the {what}: "
                         f"{quote(text[end:].strip())}")
    return value
