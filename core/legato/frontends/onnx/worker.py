"""The process that runs onnx's C++ passes for the importer (see isolate.py).

Run as a script (it imports nothing of legato): reads requests from stdin and answers on
stdout until stdin closes. A request is a one-byte command, an 8-byte little-endian length
and a serialized ModelProto:

    b"I": strict shape inference (check_type, no data propagation); answers an empty payload
    b"C": the version converter to opset 13; answers the converted model

An answer is a status byte (0 done, 1 failed), an 8-byte length and the payload (for a
failure, the last line of onnx's message). If onnx's C++ code crashes, this process dies
and the importer reports it.
"""
from __future__ import annotations

import struct
import sys

HEADER = struct.Struct("<cQ")
ANSWER = struct.Struct("<BQ")
TARGET_OPSET = 13


def read_exactly(stream, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError
    return data


def handle(command: bytes, payload: bytes) -> bytes:
    import onnx
    model = onnx.ModelProto.FromString(payload)
    if command == b"I":
        # no data propagation: it materializes 1-D shape data of a declared length, so a
        # large declared dimension would take time and memory in proportion to it
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        return b""
    if command == b"C":
        return onnx.version_converter.convert_version(model, TARGET_OPSET).SerializeToString()
    raise ValueError(f"unknown command {command!r}")


def last_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[-1] if text else type(err).__name__)[:300]


def serve(requests, answers) -> None:
    while True:
        try:
            command, size = HEADER.unpack(read_exactly(requests, HEADER.size))
            payload = read_exactly(requests, size)
        except EOFError:
            return
        try:
            status, result = 0, handle(command, payload)
        except Exception as err:  # noqa: BLE001 - every failure is answered, not raised
            status, result = 1, last_line(err).encode()
        answers.write(ANSWER.pack(status, len(result)) + result)
        answers.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
