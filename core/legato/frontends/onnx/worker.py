"""The process that runs onnx's C++ passes for the importer (see isolate.py).

Run as a script (it imports nothing of legato), with the path of onnx's C++ extension
module as its argument: it loads that module alone, since importing the onnx package (and
numpy with it) would take most of a small model's import time, and falls back to the
package where the module will not load by itself. It reads requests from stdin and answers
on stdout until stdin closes. A request is a one-byte command, an 8-byte little-endian length
and a serialized ModelProto:

    b"I": strict shape inference (check_type, no data propagation); answers an empty payload
    b"C": the version converter to opset 13; answers the converted model
    b"S": operator schemas; the payload is a JSON list of [op type, opset] pairs of the
          default domain, the answer a JSON list of `schema_fields` (null where the op
          does not exist at that opset)

The worker builds onnx's schema table (30-50 ms, 7 MB) once, as it starts, so that the
importer's process never builds its own: it asks for the schemas a model uses.

An answer is a status byte (0 done, 1 failed), an 8-byte length and the payload (for a
failure, the last line of onnx's message). If onnx's C++ code crashes, this process dies
and the importer reports it.
"""
from __future__ import annotations

import json
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


def extension(path: str):
    """onnx's C++ extension module, loaded from its file without the onnx package, or None
    where it will not load so."""
    if not path:
        return None
    try:
        import importlib.machinery
        import importlib.util
        name = "onnx.onnx_cpp2py_export"
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        module = importlib.util.module_from_spec(
            importlib.util.spec_from_file_location(name, path, loader=loader))
        loader.exec_module(module)
        module.shape_inference.infer_shapes  # noqa: B018  (both passes are there)
        module.version_converter.convert_version  # noqa: B018
        return module
    except Exception:  # noqa: BLE001 - any failure: the onnx package instead
        return None


def package_passes():
    """onnx's C++ module as the onnx package loads it (the wrappers the package puts around
    its passes only parse and serialize the models they are handed)."""
    import onnx.onnx_cpp2py_export
    return onnx.onnx_cpp2py_export


def schema_fields(schema) -> dict:
    """What the importer's checks read of an OpSchema, as plain values: onnx rebuilds the
    attribute table and parameter lists on every access. `attributes` maps each name to
    [AttributeProto type code, required]; `inputs` and `outputs` list each formal
    parameter as [name, optional]."""
    def params(formal):
        return [[p.name, p.option.name == "Optional"] for p in formal]
    return {"since_version": schema.since_version,
            "attributes": {name: [int(spec.type.value), bool(spec.required)]
                           for name, spec in schema.attributes.items()},
            "inputs": params(schema.inputs), "outputs": params(schema.outputs),
            "min_input": schema.min_input, "max_input": schema.max_input,
            "min_output": schema.min_output, "max_output": schema.max_output}


def lookup_schemas(pairs, defs) -> list:
    """schema_fields of each [op type, opset] of the default domain, None where onnx has
    no such op at that opset."""
    found = []
    for op_type, opset in pairs:
        try:
            found.append(schema_fields(defs.get_schema(str(op_type), int(opset), "")))
        except Exception:  # noqa: BLE001 - SchemaError: no such op at this opset
            found.append(None)
    return found


def build_schemas(passes) -> None:
    """onnx's whole schema table is built on the first lookup: done before any request."""
    try:
        passes.defs.get_schema("Relu", 14, "")
    except Exception:  # noqa: BLE001 - the requests report what is wrong
        pass


def handle(command: bytes, payload: bytes, passes) -> bytes:
    if command == b"I":
        # no data propagation: it materializes 1-D shape data of a declared length, so a
        # large declared dimension would take time and memory in proportion to it
        passes.shape_inference.infer_shapes(payload, True, True, False)
        return b""
    if command == b"C":
        return passes.version_converter.convert_version(payload, TARGET_OPSET)
    if command == b"S":
        return json.dumps(lookup_schemas(json.loads(payload), passes.defs)).encode()
    raise ValueError(f"unknown command {command!r}")


def last_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[-1] if text else type(err).__name__)[:300]


def serve(requests, answers, passes) -> None:
    while True:
        try:
            command, size = HEADER.unpack(read_exactly(requests, HEADER.size))
            payload = read_exactly(requests, size)
        except EOFError:
            return
        try:
            status, result = 0, handle(command, payload, passes)
        except Exception as err:  # noqa: BLE001 - every failure is answered, not raised
            status, result = 1, last_line(err).encode()
        answers.write(ANSWER.pack(status, len(result)) + result)
        answers.flush()


if __name__ == "__main__":
    PASSES = extension(sys.argv[2] if len(sys.argv) > 2 else "") or package_passes()
    build_schemas(PASSES)
    serve(sys.stdin.buffer, sys.stdout.buffer, PASSES)
