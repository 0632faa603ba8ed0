"""MLIR text pieces: tensor types, dense constants, attributes and string escapes."""
from __future__ import annotations

import numpy as np
from legato.plugin_api import LegatoError, TensorType

ELEMENT_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                 "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8",
                 "uint8": "ui8", "bool": "i1"}
DTYPES = {v: k for k, v in ELEMENT_TYPES.items()}


def tensor_type(t: TensorType) -> str:
    dims = "".join(f"{d}x" for d in t.shape)
    return f"tensor<{dims}{ELEMENT_TYPES[t.dtype]}>"


def parse_tensor_type(text: str) -> TensorType:
    """'tensor<4x4xf32>' -> TensorType((4, 4), 'float32')."""
    text = text.strip()
    if not (text.startswith("tensor<") and text.endswith(">")):
        raise LegatoError(f"not a ranked tensor type: {text!r}")
    *dims, element = text[len("tensor<"):-1].split("x")
    if element not in DTYPES:
        raise LegatoError(f"unknown element type {element[:40]!r} in {text[:80]!r}")
    if not all(d.isdigit() for d in dims):  # ASCII digits only: a static shape
        raise LegatoError(f"not a static tensor shape: {text[:80]!r}")
    return TensorType(tuple(int(d) for d in dims), DTYPES[element])


def shape_type(rank: int) -> str:
    return f"!tosa.shape<{rank}>"


def dense(array: np.ndarray) -> str:
    """A dense elements attribute; floats and ints as raw little-endian hex (exact, and
    inf/nan need no spelling), bools as literals."""
    t = TensorType(array.shape, array.dtype.name)
    if array.dtype == np.bool_:
        body = _bool_literal(array)
    else:
        flat = np.ascontiguousarray(array).reshape(-1)
        if flat.size and (flat == flat[0]).all() and not np.isnan(flat[0]):
            flat = flat[:1]  # one element's bytes mean a splat
        body = '"0x' + flat.astype(flat.dtype.newbyteorder("<")).tobytes().hex().upper() + '"'
    return f"dense<{body}> : {tensor_type(t)}"


def _bool_literal(array: np.ndarray) -> str:
    if array.ndim == 0:
        return "true" if array else "false"
    return "[" + ", ".join(_bool_literal(a) for a in array) + "]"


def index_dense(values) -> str:
    values = [int(v) for v in values]
    return f"dense<[{', '.join(map(str, values))}]> : tensor<{len(values)}xindex>"


def float_attr(value: float, dtype: str) -> str:
    """A float attribute as its bit pattern, so +-inf and the exact value survive."""
    np_type = np.dtype(dtype)
    bits = np.array(value, dtype=np_type).view(f"uint{np_type.itemsize * 8}")
    return f"0x{int(bits):0{np_type.itemsize * 2}X} : {ELEMENT_TYPES[dtype]}"


def i64_array(values) -> str:
    return f"array<i64: {', '.join(str(int(v)) for v in values)}>"


def i32_array(values) -> str:
    return f"array<i32: {', '.join(str(int(v)) for v in values)}>"


def string(text: str) -> str:
    """An MLIR string literal: \\" and \\\\ for quote and backslash (readable JSON), other
    non-printable bytes as \\XX."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        else:
            out.append(char if 0x20 <= byte < 0x7F else f"\\{byte:02X}")
    return '"' + "".join(out) + '"'


def unescape(body: str) -> str:
    """The text of an MLIR string literal's body (between the quotes)."""
    out, i = bytearray(), 0
    simple = {"n": b"\n", "t": b"\t", '"': b'"', "\\": b"\\"}
    while i < len(body):
        if body[i] == "\\":
            nxt = body[i + 1:i + 2]
            if nxt in simple:
                out += simple[nxt]
                i += 2
            else:
                out.append(_hex_byte(body[i + 1:i + 3]))
                i += 3
        else:
            out += body[i].encode("utf-8")
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LegatoError(f"MLIR string escapes are not UTF-8: {err.reason}") from None


def _hex_byte(digits: str) -> int:
    if len(digits) != 2 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise LegatoError(f"bad escape in an MLIR string: \\{digits!r}")
    return int(digits, 16)
