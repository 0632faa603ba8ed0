"""Large ONNX weights read without copies.

Parsing a .onnx file with protobuf copies every weight into the message, reading a bytes
field copies it again, and decoding it into numpy a third time: a 440 MB BERT cost seconds
and three times its size in memory. Instead the file is memory-mapped, the protobuf wire
format of the main graph's initializers is scanned for their raw data, and the message is
parsed from the file's bytes with each large initializer's data cut out and replaced by an
external-data reference to its place in the file (under a location name no file can have).
The importer then reads each such tensor from the file once, straight into its array.

Anything the scan does not recognise falls back to protobuf's own parse of the whole file,
so a malformed model still gets protobuf's error.
"""
from __future__ import annotations

import math
import mmap
import os
import secrets
import sys

import numpy as np

from ...ir.errors import LegatoError

MIN_MAPPED_BYTES = 16 * 1024   # smaller tensors stay in the message (shape inference reads them)
# TensorProto element types whose raw data is a plain little-endian numpy array
_PLAIN = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
          7: "int64", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
_GRAPH, _INITIALIZER = 7, 5                    # ModelProto.graph, GraphProto.initializer
_DIMS, _DATA_TYPE, _RAW_DATA = 1, 2, 9         # TensorProto fields
_EXTERNAL_DATA, _DATA_LOCATION = 13, 14


class Malformed(Exception):
    """The bytes are not the protobuf wire format the scan expects."""


def _varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise Malformed
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _packed_varints(buf, pos: int, end: int) -> list[int]:
    values = []
    while pos < end:
        value, pos = _varint(buf, pos)
        values.append(value)
    return values


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, field start, payload start, payload end) of each field."""
    pos = start
    while pos < end:
        key = buf[pos]   # one byte for fields 1-15 (a graph's nodes and initializers)
        key, body = (key, pos + 1) if key < 0x80 else _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length = buf[body] if body < end else 0x80   # (a short one: one byte)
            length, body = (length, body + 1) if length < 0x80 else _varint(buf, body)
            stop = body + length
        elif wire == 0:
            _, stop = _varint(buf, body)
        elif wire == 1:
            stop = body + 8
        elif wire == 5:
            stop = body + 4
        else:
            raise Malformed
        if stop > end:
            raise Malformed
        yield number, wire, pos, body, stop
        pos = stop


def _field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


class MappedWeights:
    """The initializers cut out of a model file: their places in it, read on demand."""

    def __init__(self, handle):
        self.handle = handle
        self.location = f"legato-mapped-weights:{secrets.token_hex(8)}"

    def owns(self, tensor) -> bool:
        return any(e.key == "location" and e.value == self.location for e in tensor.external_data)

    def array(self, tensor, where: str) -> np.ndarray:
        """A tensor's data, read from the file straight into a new (aligned, read-only)
        array: one copy, and no view of the mapping outlives the import."""
        entries = {e.key: e.value for e in tensor.external_data}
        data = np.empty(tuple(tensor.dims), np.dtype(_PLAIN[tensor.data_type]))
        offset = int(entries["offset"])
        if os.preadv(self.handle.fileno(), [memoryview(data).cast("B")], offset) != data.nbytes:
            raise LegatoError(f"{where}: the model file ended before the tensor's data (was "
                              "it changed while being read?)")
        data.setflags(write=False)
        return data

    def close(self) -> None:
        self.handle.close()

    def _tensor(self, buf, start: int, end: int) -> bytes | None:
        """The tensor's fields with its raw data replaced by a reference into the mapping,
        or None to keep it as it is."""
        raw = data_type = None
        dims: list[int] = []
        for number, wire, _, body, stop in _fields(buf, start, end):
            if number in (_EXTERNAL_DATA, _DATA_LOCATION):
                return None
            if number == _RAW_DATA and wire == 2:
                raw = (body, stop)
            elif number == _DATA_TYPE and wire == 0:
                data_type = _varint(buf, body)[0]
            elif number == _DIMS:
                dims += _packed_varints(buf, body, stop) if wire == 2 else [_varint(buf, body)[0]]
        if raw is None or data_type not in _PLAIN or raw[1] - raw[0] < MIN_MAPPED_BYTES:
            return None
        if raw[1] - raw[0] != math.prod(dims) * np.dtype(_PLAIN[data_type]).itemsize:
            return None  # left to the tensor checks, which name the sizes that disagree
        kept = b"".join(bytes(buf[f_start:stop]) for number, _, f_start, _, stop
                        in _fields(buf, start, end) if number != _RAW_DATA)
        entries = (("location", self.location), ("offset", str(raw[0])),
                   ("length", str(raw[1] - raw[0])))
        refs = b"".join(_field(_EXTERNAL_DATA, _field(1, k.encode()) + _field(2, v.encode()))
                        for k, v in entries)
        return kept + refs + _encode_varint(_DATA_LOCATION << 3) + b"\x01"

    def _graph(self, buf, start: int, end: int) -> bytes:
        pieces, pos = [], start
        for number, wire, f_start, body, stop in _fields(buf, start, end):
            if number == _INITIALIZER and wire == 2:
                tensor = self._tensor(buf, body, stop)
                if tensor is not None:
                    pieces += [bytes(buf[pos:f_start]), _field(_INITIALIZER, tensor)]
                    pos = stop
        pieces.append(bytes(buf[pos:end]))
        return b"".join(pieces)

    def stripped(self) -> bytes:
        """The model's bytes with the large initializers' data cut out."""
        mapping = mmap.mmap(self.handle.fileno(), 0, access=mmap.ACCESS_READ)
        buf = memoryview(mapping)
        try:
            pieces, pos = [], 0
            for number, wire, f_start, body, stop in _fields(buf, 0, len(buf)):
                if number == _GRAPH and wire == 2:
                    pieces += [bytes(buf[pos:f_start]), _field(_GRAPH, self._graph(buf, body, stop))]
                    pos = stop
            pieces.append(bytes(buf[pos:]))
            return b"".join(pieces)
        finally:
            buf.release()
            mapping.close()


def load_mapped(path, onnx):
    """(ModelProto, MappedWeights or None) of the file at `path`; None when the file is
    small, big-endian data would need swapping, or the scan does not recognise it."""
    if sys.byteorder != "little":
        return onnx.load(str(path), load_external_data=False), None
    handle = open(path, "rb")
    if handle.seek(0, 2) < MIN_MAPPED_BYTES:
        handle.seek(0)
        with handle:
            return onnx.load(handle, load_external_data=False), None
    weights = MappedWeights(handle)
    try:
        return onnx.ModelProto.FromString(weights.stripped()), weights
    except Exception:  # noqa: BLE001 - a scan or parse problem: protobuf's own error instead
        weights.close()
        return onnx.load(str(path), load_external_data=False), None
