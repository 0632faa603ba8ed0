"""The text form of a module: `print_module` and `parse`, which round-trip.

    func @main(%x: float32[4, 8]) -> (float32[4, 8]) {
      %c0 = const float32[8] [1.0, 1.0, ...]
      %0 = nn.layer_norm(%x, %c0, None) {"axes": [-1], "epsilon": 1e-05} : float32[4, 8]
      return %0
    }

Attributes and origins are JSON. Constants of more than 64 elements are base64 of their
little-endian bytes, so weights round-trip exactly.
"""
from __future__ import annotations

import base64
import json
import re

import numpy as np

from .errors import ParseError
from .ir import Attrs, Call, Const, Function, Module, Origin, TensorType, Value

INLINE_LIMIT = 64
_NAME_OK = re.compile(r"^[A-Za-z_][\w.]*$")


def print_module(module: Module) -> str:
    return "\n\n".join(print_function(name, fn) for name, fn in module.functions.items()) + "\n"


def print_function(name: str, fn: Function) -> str:
    names: dict[int, str] = {}
    params = []
    for i, p in enumerate(fn.params):
        pname = p.name if p.name and _NAME_OK.match(p.name) and \
            p.name not in names.values() else f"arg{i}"
        names[id(p)] = "%" + pname
        params.append(f"%{pname}: {p.type}")
    header = f"func @{name}({', '.join(params)}) -> ({', '.join(map(str, fn.result_types))})"
    if fn.kind != "default":
        header += f" kind={fn.kind}"
    if fn.attrs:
        header += f" attrs {json.dumps(fn.attrs.to_json())}"
    lines = [header + " {"]
    counter = 0

    def ref(value):
        if value is None:
            return "None"
        if id(value) not in names:
            if not isinstance(value, Const):
                raise ParseError(f"function @{name}: value {value!r} is used before definition")
            names[id(value)] = f"%c{len(lines) - 1}"
            lines.append(f"  {names[id(value)]} = const {value.type} {_encode(value.data)}")
        return names[id(value)]

    for call in fn.calls:
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


def _encode(data: np.ndarray) -> str:
    if data.size <= INLINE_LIMIT:
        return json.dumps(data.ravel().tolist())
    raw = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes()
    return 'b64"' + base64.b64encode(raw).decode("ascii") + '"'


def _decode(text: str, ttype: TensorType, where: str) -> np.ndarray:
    dtype = np.dtype(ttype.dtype)
    try:
        if text.startswith('b64"') and text.endswith('"'):
            raw = base64.b64decode(text[4:-1], validate=True)
            if len(raw) != ttype.size * dtype.itemsize:
                raise ValueError(f"{len(raw)} bytes for {ttype} which needs "
                                 f"{ttype.size * dtype.itemsize}")
            flat = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)
        else:
            flat = np.array(json.loads(text), dtype=dtype).ravel()
            if flat.size != ttype.size:
                raise ValueError(f"{flat.size} values for {ttype}")
    except ValueError as err:
        raise ParseError(f"{where}: bad constant data: {err}") from None
    return flat.reshape(ttype.shape)


# --- parsing ------------------------------------------------------------------------------

_TYPE = r"[a-z0-9]+\[[\d,\s]*\]"
_HEADER = re.compile(r"^func @(?P<name>[\w.]+)\((?P<params>.*?)\)\s*->\s*\((?P<results>.*?)\)"
                     r"(?:\s+kind=(?P<kind>\w+))?(?:\s+attrs\s+(?P<attrs>\{.*\}))?\s*\{$")
_CONST = re.compile(rf"^(?P<name>%[\w.]+)\s*=\s*const\s+(?P<type>{_TYPE})\s+(?P<data>.+)$")
_CALL = re.compile(r"^(?P<outs>%[\w.]+(?:\s*,\s*%[\w.]+)*)\s*=\s*(?P<op>[\w.]+)"
                   r"\((?P<args>[^)]*)\)\s*(?P<rest>.*)$")
_TYPE_PARTS = re.compile(r"^([a-z0-9]+)\[([\d,\s]*)\]$")


def parse_type(text: str, where: str = "type") -> TensorType:
    match = _TYPE_PARTS.match(text.strip())
    if not match:
        raise ParseError(f"{where}: {text.strip()!r} is not a type like float32[4, 8]")
    dims = [d for d in match.group(2).replace(" ", "").split(",") if d]
    try:
        return TensorType(tuple(int(d) for d in dims), match.group(1))
    except Exception as err:
        raise ParseError(f"{where}: {err}") from None


def _types(text: str, where: str) -> list[TensorType]:
    return [parse_type(t, where) for t in re.findall(_TYPE, text)] if text.strip() else []


def parse(text: str, registry=None) -> Module:
    """Read the text form back into a Module (verified)."""
    from .verify import verify
    functions: dict[str, Function] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        if not line.startswith("func "):
            raise ParseError(f"line {i + 1}: expected 'func @name(...)', got {line[:60]!r}")
        name, fn, i = _parse_function(lines, i, registry)
        if name in functions:
            raise ParseError(f"line {i}: function @{name} is defined twice")
        functions[name] = fn
    if "main" not in functions:
        raise ParseError("no function @main in the text")
    module = Module(functions)
    verify(module, registry)
    return module


def _parse_function(lines, start, registry):
    head = _HEADER.match(lines[start].strip())
    where = f"line {start + 1}"
    if not head:
        raise ParseError(f"{where}: malformed function header {lines[start].strip()[:80]!r}")
    env: dict[str, Value] = {}
    params = []
    for part in filter(None, (p.strip() for p in _split_params(head["params"]))):
        pname, _, ptype = part.partition(":")
        value = Value(parse_type(ptype, where), pname.strip().lstrip("%"))
        env[pname.strip()] = value
        params.append(value)
    calls, results = [], None
    i = start + 1
    while i < len(lines):
        line, where = lines[i].strip(), f"line {i + 1}"
        i += 1
        if not line or line.startswith("#"):
            continue
        if line == "}":
            break
        if line.startswith("return"):
            results = tuple(_lookup(env, r.strip(), where) for r in line[6:].split(",")
                            if r.strip())
        elif m := _CONST.match(line):
            ttype = parse_type(m["type"], where)
            env[m["name"]] = Const.of(_decode(m["data"].strip(), ttype, where))
        elif m := _CALL.match(line):
            calls.append(_parse_call(m, env, where))
        else:
            raise ParseError(f"{where}: cannot read {line[:80]!r}")
    else:
        raise ParseError(f"line {start + 1}: function @{head['name']} has no closing '}}'")
    if results is None:
        raise ParseError(f"line {start + 1}: function @{head['name']} has no return")
    attrs = Attrs(_json(head["attrs"], f"line {start + 1}")) if head["attrs"] else Attrs()
    try:
        fn = Function(tuple(params), tuple(calls), results, head["kind"] or "default", attrs)
    except Exception as err:
        raise ParseError(f"line {start + 1}: {err}") from None
    return head["name"], fn, i


def _split_params(text: str):
    # commas inside type brackets are not separators
    return re.split(r",(?![^\[]*\])", text)


def _parse_call(match, env, where) -> Call:
    args = [a.strip() for a in match["args"].split(",") if a.strip()]
    inputs = tuple(None if a == "None" else _lookup(env, a, where) for a in args)
    rest = match["rest"]
    attrs, origin = {}, None
    if rest.startswith("{"):
        attrs, end = _raw_json(rest, where)
        rest = rest[end:].strip()
    if not rest.startswith(":"):
        raise ParseError(f"{where}: expected ': <result types>' after the call")
    types_text, _, origin_text = rest[1:].partition(" origin ")
    if origin_text:
        origin = Origin.from_json(_json(origin_text, where))
    outs = [o.strip() for o in match["outs"].split(",")]
    types = _types(types_text, where)
    if len(types) != len(outs):
        raise ParseError(f"{where}: {len(outs)} results but {len(types)} types")
    values = tuple(Value(t) for t in types)
    for name, value in zip(outs, values):
        if name in env:
            raise ParseError(f"{where}: {name} is defined twice")
        env[name] = value
    return Call(match["op"], inputs, Attrs(attrs), values, origin)


def _lookup(env, name, where):
    try:
        return env[name]
    except KeyError:
        raise ParseError(f"{where}: {name} is not defined") from None


def _raw_json(text, where):
    try:
        return json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as err:
        raise ParseError(f"{where}: bad JSON: {err}") from None


def _json(text, where):
    return _raw_json(text.strip(), where)[0]
