"""Import ONNX models (opset 13 up to the newest the installed onnx knows) into legato.

    mod = legato.frontends.onnx.load("model.onnx", input_shapes={"batch": 1})

Before anything is converted the model is checked whole: every op without a converter is
reported in one error (with node names), then tensors whose data does not match their
declared size and models whose shapes do not infer are refused. Initializers become
constants; inputs that feed shape-like operands (Reshape's shape, Slice's starts, ...) must
be constants, and nodes whose inputs are all constants and whose results are integer shape
arithmetic are folded at import time.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np

from ..builder import GraphBuilder
from ..errors import LegatoError
from ..ir import Const, Module, Value
# importing the converter modules registers their converters
from . import onnx_attention, onnx_nn, onnx_ops  # noqa: F401
from .onnx_convert import CONVERTERS, Node, onnx_dtype

MIN_OPSET = 13
DEFAULT_DOMAINS = ("", "ai.onnx")
FOLD_DTYPES = ("int64", "int32", "bool")
FOLD_MAX_ELEMENTS = 4096


def _onnx():
    try:
        import onnx
    except ImportError:
        raise LegatoError("the ONNX importer needs the onnx package: "
                          "pip install 'legato[onnx]'") from None
    return onnx


def load(model, input_shapes: Mapping | None = None) -> Module:
    """A legato Module from an .onnx path or a ModelProto.

    `input_shapes` binds what the model leaves symbolic: `{input_name: shape}` for a whole
    input, or `{dim_param: size}` for a named dimension such as "batch"."""
    return load_with_nodes(model, input_shapes)[0]


def load_with_nodes(model, input_shapes: Mapping | None = None):
    """(module, nodes): `nodes` lists (ONNX op type, node name, legato ops it became)."""
    proto = read_model(model)
    check_supported(proto)
    proto, opset = check_opset(proto)
    check_tensors(proto.graph)
    check_shapes(proto, input_shapes or {})
    importer = _Importer(proto.graph, opset, input_shapes or {})
    return importer.run(), importer.nodes


COVERAGE = ("native", "decomposed", "custom", "fallback", "folded")


def coverage(nodes, report) -> str:
    """Per ONNX op type, how its nodes end up on the backend: run natively, decomposed,
    tunnelled as custom ops, run on the fallback, or folded away at import."""
    actions: dict[str, set] = {}
    for row in report.entries:
        if row["source"]:
            actions.setdefault(row["op"], set()).add(row["action"])
    table: dict[str, dict[str, int]] = {}
    for op_type, _, ops in nodes:
        seen = set().union(*(actions.get(op, {"legal"}) for op in ops)) if ops else {"folded"}
        kind = next((k for k in ("fallback", "custom", "decomposed", "folded") if k in seen),
                    "native")
        counts = table.setdefault(op_type, dict.fromkeys(COVERAGE, 0))
        counts[kind] += 1
    lines = [f"ONNX op coverage for {report.backend}:",
             f"  {'op':<24}" + "".join(f"{k:>11}" for k in COVERAGE)]
    lines += [f"  {op:<24}" + "".join(f"{c[k]:>11}" for k in COVERAGE)
              for op, c in sorted(table.items())]
    return "\n".join(lines)


def read_model(model):
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    try:
        return onnx.load(str(path))
    except OSError as err:
        raise LegatoError(f"cannot read ONNX model {path}: {err.strerror or err}") from None
    except Exception as err:  # noqa: BLE001 - protobuf decode and external-data errors
        raise LegatoError(f"{path} is not a readable ONNX model: {err}") from None


def unsupported_ops(proto) -> dict[str, list[str]]:
    """ONNX op type -> names of the nodes that legato cannot import."""
    missing: dict[str, list[str]] = {}
    for index, node in enumerate(proto.graph.node):
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in CONVERTERS:
            label = node.op_type if node.domain in DEFAULT_DOMAINS else \
                f"{node.domain}.{node.op_type}"
            missing.setdefault(label, []).append(node.name or f"#{index}")
    return missing


def check_supported(proto) -> None:
    missing = unsupported_ops(proto)
    if missing:
        lines = [f"  {op}: {', '.join(names[:8])}" + (f" (+{len(names) - 8} more)"
                                                      if len(names) > 8 else "")
                 for op, names in sorted(missing.items())]
        raise LegatoError(f"the model uses {len(missing)} ONNX op type(s) legato cannot "
                          "import:\n" + "\n".join(lines))


def check_opset(proto):
    """(model, opset): opsets below 13 are upgraded with onnx's version converter."""
    onnx = _onnx()
    newest = onnx.defs.onnx_opset_version()
    versions = {o.domain: o.version for o in proto.opset_import}
    opset = next((versions[d] for d in DEFAULT_DOMAINS if d in versions), None)
    if opset is not None and opset < MIN_OPSET:
        try:
            upgraded = onnx.version_converter.convert_version(proto, MIN_OPSET)
        except Exception as err:  # noqa: BLE001 - the converter raises RuntimeError and others
            raise LegatoError(f"ONNX opset {opset} is older than {MIN_OPSET} and could not be "
                              f"upgraded: {' '.join(str(err).split())[:200]}") from None
        return upgraded, MIN_OPSET
    if opset is None or opset > newest:
        raise LegatoError(f"ONNX opset {opset} is not supported: legato imports opsets "
                          f"{MIN_OPSET} to {newest} (the newest the installed onnx "
                          f"{onnx.__version__} knows)")
    return proto, opset


def check_tensors(graph) -> None:
    """Refuse tensors whose stored data does not match their declared shape and type."""
    for tensor in graph.initializer:
        tensor_array(tensor, f"initializer {tensor.name!r}")
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == attr.TENSOR:
                tensor_array(attr.t, f"{node.op_type} node {node.name!r} attribute "
                                     f"{attr.name!r}")


def tensor_array(tensor, where: str) -> np.ndarray:
    from onnx import numpy_helper
    dtype = onnx_dtype(tensor.data_type, where)
    declared = math.prod(tensor.dims)
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as err:  # noqa: BLE001 - numpy/protobuf errors on malformed data
        raise LegatoError(f"{where}: data does not match the declared shape "
                          f"{list(tensor.dims)} of {dtype}: {err}") from None
    if array.size != declared:
        raise LegatoError(f"{where}: holds {array.size} elements but declares shape "
                          f"{list(tensor.dims)} ({declared} elements)")
    return array


def check_shapes(proto, input_shapes: Mapping) -> None:
    """Run ONNX's strict shape inference with the bound input shapes; refuse on failure."""
    onnx = _onnx()
    bound = onnx.ModelProto()
    bound.CopyFrom(proto)
    initializers = {t.name for t in bound.graph.initializer}
    for value in bound.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        for dim, size in zip(dims, input_shape(value, input_shapes)):
            dim.Clear()
            dim.dim_value = size
    try:
        onnx.shape_inference.infer_shapes(bound, check_type=True, strict_mode=True,
                                          data_prop=True)
    except Exception as err:  # noqa: BLE001 - onnx raises InferenceError and others
        message = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise LegatoError(f"the model's shapes do not infer: {message}") from None


def input_shape(value, input_shapes: Mapping) -> tuple[int, ...]:
    """The static shape of a graph input, with symbolic dimensions bound."""
    if value.name in input_shapes:
        return tuple(int(d) for d in input_shapes[value.name])
    if not value.type.HasField("tensor_type"):
        raise LegatoError(f"input {value.name!r} is not a tensor: legato imports tensors only")
    shape = []
    for i, dim in enumerate(value.type.tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            shape.append(dim.dim_value)
        elif dim.dim_param and dim.dim_param in input_shapes:
            shape.append(int(input_shapes[dim.dim_param]))
        else:
            label = dim.dim_param or "?"
            raise LegatoError(f"input {value.name!r}: dimension {i} ({label}) is symbolic; "
                              f"bind it with input_shapes={{{(dim.dim_param or value.name)!r}: "
                              "...}}")
    return tuple(shape)


def attribute_value(attr):
    """An ONNX attribute as a Python value (strings decoded, tensors as numpy arrays)."""
    from onnx import helper
    if attr.type == attr.TENSOR:
        return tensor_array(attr.t, f"attribute {attr.name!r}")
    if attr.type == attr.GRAPH or attr.type == attr.GRAPHS:
        raise LegatoError(f"attribute {attr.name!r} holds a subgraph: legato imports "
                          "flat graphs only")
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


class _Importer:
    """Walks the graph in order, converting each node with its converter."""

    def __init__(self, graph, opset: int, input_shapes: Mapping):
        self.graph, self.opset, self.input_shapes = graph, opset, input_shapes
        self.b = GraphBuilder()
        self.env: dict[str, Value] = {}
        self.nodes: list[tuple[str, str, list[str]]] = []

    def run(self) -> Module:
        for tensor in self.graph.initializer:
            self.env[tensor.name] = Const.of(tensor_array(tensor, f"initializer "
                                                                  f"{tensor.name!r}"))
        for value in self.graph.input:
            if value.name not in self.env:
                dtype = onnx_dtype(value.type.tensor_type.elem_type, f"input {value.name!r}")
                self.env[value.name] = self.b.input(value.name,
                                                    input_shape(value, self.input_shapes), dtype)
        for node in self.graph.node:
            self.convert(node)
        results = [self.lookup(out.name, "graph output") for out in self.graph.output]
        return self.b.build(*results)

    def lookup(self, name: str, where: str) -> Value:
        if name not in self.env:
            raise LegatoError(f"{where} {name!r} is not defined by any node, input or "
                              "initializer")
        return self.env[name]

    def convert(self, proto) -> None:
        inputs = [self.lookup(n, f"{proto.op_type} node {proto.name!r} input") if n else None
                  for n in proto.input]
        node = Node(self.b, proto, inputs, {}, self.opset)
        start = len(self.b.calls)
        try:
            node.attrs = {a.name: attribute_value(a) for a in proto.attribute}
            result = CONVERTERS[proto.op_type].fn(node)
        except LegatoError as err:
            text = str(err)
            prefix = f"{proto.op_type} node {node.name!r}"
            raise type(err)(text if text.startswith(prefix) else f"{prefix}: {text}") from None
        results = result if isinstance(result, (tuple, list)) else (result,)
        if all(isinstance(v, Const) or v is None for v in inputs) and inputs:
            results = self.fold(start, results)
        self.nodes.append((proto.op_type, node.name, [c.op for c in self.b.calls[start:]]))
        for name, value in zip(proto.output, results):
            if name and value is None:
                node.fail(f"output {name!r} is not produced by legato's converter")
            if name:
                self.env[name] = value

    def fold(self, start: int, results) -> tuple:
        """Evaluate shape arithmetic on constants now, so later shape operands are known."""
        values = [v for v in results if v is not None]
        if not values or any(v.dtype not in FOLD_DTYPES or v.type.size > FOLD_MAX_ELEMENTS
                             for v in values) or all(isinstance(v, Const) for v in values):
            return tuple(results)
        from .. import api
        if "cpu_ref" not in api.list_backends():
            return tuple(results)
        calls = self.b.calls[start:]
        folding = GraphBuilder()
        folding.calls = list(calls)
        arrays = api.reference(Module({"main": folding.function(*values)}))()
        arrays = arrays if isinstance(arrays, tuple) else (arrays,)
        del self.b.calls[start:]
        consts = iter(Const.of(a) for a in arrays)
        return tuple(None if v is None else next(consts) for v in results)
