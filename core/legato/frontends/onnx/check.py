"""Structural checks of an ONNX model, done in Python before any of onnx's C++ code sees it.

onnx's version converter and shape inference trust their input: a mistyped attribute, a
missing required input or a dangling name can crash the process instead of raising. So
every node is held against its operator schema (attribute names and types, required
attributes, input and output counts, required inputs present), the graph must be in SSA
form and topological order, and every declared size must be a non-negative, bounded
integer. Tensor data is checked by `tensors`.
"""
from __future__ import annotations

from ...ir.errors import LegatoError
from .isolate import worker_schemas
from .nodes import GRAPH, GRAPHS, TENSOR, NodeFields, node_fields
from .tensors import MAX_RANK, check_size, check_tensor, external_tensors, onnx_dtype, quote
from .worker import lookup_schemas, schema_fields


def check_opset_range(opset) -> None:
    if opset is None or opset < 1:
        raise LegatoError(f"the model imports ONNX opset {opset}: expected a version >= 1 "
                          "for the default domain")


def check_text(model, nodes: list[NodeFields] | None = None, external=None) -> None:
    """Every name legato reads is text: protobuf hands back string fields that are not
    valid UTF-8 as bytes. `nodes`: the graph's node_fields, `external`: its
    external_tensors, where the caller has them."""
    def check(values, where):
        if bytes in map(type, values):   # (nearly always text: one pass in C)
            value = next(v for v in values if isinstance(v, bytes))
            raise LegatoError(f"{where}: {quote(value)} is not valid UTF-8")
    check([o.domain for o in model.opset_import], "opset_import domain")
    graph = model.graph
    _check_node_text(node_fields(graph) if nodes is None else nodes, check, "")
    for kind in ("input", "output", "value_info"):
        for value in getattr(graph, kind):
            dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") \
                else ()
            check([value.name, *(d.dim_param for d in dims)],
                  Label(_value_label, kind, value))
    check([tensor.name for tensor in graph.initializer], "initializer name")
    for tensor in external_tensors(model, nodes) if external is None else external:
        check([e.key for e in tensor.external_data] + [e.value for e in tensor.external_data],
              f"tensor {quote(tensor.name)} external data")


def _check_node_text(nodes: list[NodeFields], check, where: str, depth: int = 0) -> None:
    if depth > 32:
        raise LegatoError(f"{where}: control-flow bodies nest deeper than 32 levels")
    texts, bodies = [], False
    for node in nodes:   # every name in one list, checked in one pass
        texts += (node.op_type, node.domain, node.name, *node.inputs, *node.outputs)
        for attr in node.attributes:
            texts.append(attr.name)
            bodies = bodies or attr.type == GRAPH
    if not bodies and bytes not in map(type, texts):
        return
    for index, node in enumerate(nodes):   # node by node, bodies in turn: the first at fault
        label = f"{where}node #{index}"
        check([node.op_type, node.domain, node.name, *node.inputs, *node.outputs,
               *(a.name for a in node.attributes)], label)
        for attr in node.attributes:
            if attr.type == GRAPH:
                check([*(v.name for v in attr.g.input), *(v.name for v in attr.g.output),
                       *(t.name for t in attr.g.initializer)], f"{label} body")
                _check_node_text(node_fields(attr.g), check, f"{label} body ", depth + 1)


def check_graph(graph, opset: int, nodes: list[NodeFields] | None = None) -> None:
    """Every node against its schema, the graph's names in SSA and topological order,
    declared shapes bounded and tensor metadata consistent. `nodes`: the graph's
    node_fields, where the caller has them."""
    if len(graph.sparse_initializer):
        raise LegatoError("the model has sparse initializers: legato imports dense ones only")
    nodes = node_fields(graph) if nodes is None else nodes
    prefetch_schemas(graph, opset, nodes)
    defined = _check_graph_inputs(graph)
    passed: set[bytes] = set()   # small attribute tensors that check_tensor passed
    for index, node in enumerate(nodes):
        where = Label(_node_label, node, index)
        if check_node(node, opset, where, passed):
            check_bodies(node, opset, where)
        inputs, outputs = node.inputs, node.outputs
        if not defined.issuperset(inputs):   # (an empty name is an absent optional input)
            for i, name in enumerate(inputs):
                if name and name not in defined:
                    raise LegatoError(f"{where}: input {i} {quote(name)} is not defined by "
                                      "an earlier node, a graph input or an initializer (the "
                                      "graph must be in topological order)")
        for name in outputs:
            if name and name in defined:
                raise LegatoError(f"{where}: output {quote(name)} is already defined "
                                  "(names must be assigned once)")
            if name:
                defined.add(name)
    for value in graph.output:
        if value.name not in defined:
            raise LegatoError(f"graph output {quote(value.name)} is not defined by any node, "
                              "input or initializer")
    for kind, values in (("graph output", graph.output), ("value_info", graph.value_info)):
        for value in values:
            check_value_info(value, f"{kind} {quote(value.name)}", typed=False)


class Label:
    """A message's subject (`where`), made only when a message is: quoting the names of a
    model's thousand nodes and attributes cost more than checking them."""

    __slots__ = ("_make", "_args", "_text")

    def __init__(self, make, *args):
        self._make, self._args, self._text = make, args, None

    def __str__(self) -> str:
        if self._text is None:
            self._text = self._make(*self._args)
        return self._text

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _value_label(kind: str, value) -> str:
    return f"graph {kind} {quote(value.name)}"


def _node_label(node, index: int) -> str:
    return f"{node.op_type} node {quote(node.name or f'#{index}')}"


def _attribute_label(where, attr) -> str:
    return f"{where}: attribute {quote(attr.name)}"


def _check_graph_inputs(graph) -> set:
    defined = set()
    for tensor in graph.initializer:
        where = f"initializer {quote(tensor.name)}"
        if not tensor.name or tensor.name in defined:
            raise LegatoError(f"{where}: initializer names must be unique and not empty")
        check_tensor(tensor, where)
        defined.add(tensor.name)
    inputs = set()
    for value in graph.input:
        where = f"input {quote(value.name)}"
        if not value.name or value.name in inputs:
            raise LegatoError(f"{where}: input names must be unique and not empty")
        inputs.add(value.name)
        check_value_info(value, where)
    return defined | inputs


def check_value_info(value, where: str, typed: bool = True) -> None:
    """A declared type: a tensor with bounded, non-negative dims, of a known element type
    (`typed`), or for outputs and intermediate values perhaps of none at all."""
    if not typed and value.type.WhichOneof("value") is None:
        return
    if not value.type.HasField("tensor_type"):
        raise LegatoError(f"{where} is not a tensor: legato imports tensors only")
    tensor_type = value.type.tensor_type
    if typed or tensor_type.elem_type:
        onnx_dtype(tensor_type.elem_type, where)
    if tensor_type.HasField("shape"):
        dims = tensor_type.shape.dim
        if len(dims) > MAX_RANK:
            raise LegatoError(f"{where}: rank {len(dims)} exceeds the limit of {MAX_RANK}")
        for i, dim in enumerate(dims):
            if dim.HasField("dim_value"):
                check_size(dim.dim_value, f"{where} dimension {i}")


def check_bodies(node: NodeFields, opset: int, where: str, depth: int = 0) -> None:
    """The nodes of control-flow bodies (If's branches, Loop's and Scan's body) against
    their schemas too; their tensors as the graph's are."""
    if depth > 32:
        raise LegatoError(f"{where}: control-flow bodies nest deeper than 32 levels")
    for attr in node.attributes:
        bodies = [attr.g] if attr.type == GRAPH else \
            list(attr.graphs) if attr.type == GRAPHS else []
        for body in bodies:
            for tensor in body.initializer:
                check_tensor(tensor, f"{where} body initializer {quote(tensor.name)}")
            for index, inner in enumerate(node_fields(body)):
                inner_where = f"{where} body {inner.op_type} node " \
                              f"{quote(inner.name or f'#{index}')}"
                check_node(inner, opset, inner_where)
                check_bodies(inner, opset, inner_where, depth + 1)


def check_node(node: NodeFields, opset: int, where: str, passed: set | None = None) -> bool:
    """Check `node` against its schema; whether it holds bodies (GRAPH or GRAPHS
    attributes), for check_bodies. `passed`: see _check_tensor_once."""
    schema = node_schema(node, opset)
    if schema is None:
        raise LegatoError(f"{where}: ONNX opset {opset} has no operator "
                          f"{quote(node.op_type)}")
    bodies = _check_attributes(node, schema, where, passed)
    _check_arity(node.inputs, schema.inputs, schema.min_input, schema.max_input, where,
                 "input")
    _check_arity(node.outputs, schema.outputs, schema.min_output, schema.max_output, where,
                 "output")
    if node.op_type in VALUE_CHECKS:
        VALUE_CHECKS[node.op_type](node, where)
    return bodies


class Schema:
    """What the checks read of an onnx OpSchema (worker.schema_fields), read once: onnx
    rebuilds the attribute table and parameter lists on every access, which cost more than
    the checks themselves. `attributes` maps each name to (AttributeProto type code,
    required); `inputs` and `outputs` list each formal parameter as (name, optional)."""

    def __init__(self, fields: dict):
        self.since_version = fields["since_version"]
        self.attributes = {name: (code, required)
                           for name, (code, required) in fields["attributes"].items()}
        self.inputs = [(name, optional) for name, optional in fields["inputs"]]
        self.outputs = [(name, optional) for name, optional in fields["outputs"]]
        self.min_input, self.max_input = fields["min_input"], fields["max_input"]
        self.min_output, self.max_output = fields["min_output"], fields["max_output"]
        self.required = [name for name, (_, required) in self.attributes.items() if required]


def node_schema(node, opset: int) -> Schema | None:
    """onnx's schema of a default-domain op at `opset`, else the one its converter brings
    (onnxruntime's ops, in its domain or in the default one before ONNX defined them)."""
    if node.domain in ("", "ai.onnx"):
        schema = _onnx_schema(node.op_type, opset)
        if schema is not None:
            return schema
    from .convert import converter_of
    known = converter_of(node.domain, node.op_type)
    return None if known is None or known.schema is None else \
        Schema(schema_fields(known.schema()))


# (op type, opset) -> Schema or None, of onnx's default domain; at most MAX_CACHED
_SCHEMAS: dict[tuple[str, int], Schema | None] = {}
MAX_CACHED = 4096
_BODIES = ("If", "Loop", "Scan")   # the ops whose attributes hold graphs


def prefetch_schemas(graph, opset: int, nodes: list[NodeFields] | None = None) -> None:
    """Have the worker read the schemas of the graph's default-domain ops in one request,
    so this process never builds onnx's schema table (30-50 ms and 7 MB). Where it
    cannot answer, `_onnx_schema` reads them here. `nodes`: the graph's node_fields."""
    wanted = sorted(op for op in _default_ops(graph, 0, nodes) if (op, opset) not in _SCHEMAS)
    if not wanted:
        return
    found = worker_schemas([[op, opset] for op in wanted])
    if found is None:
        return
    if len(_SCHEMAS) + len(wanted) > MAX_CACHED:
        _SCHEMAS.clear()
    for op, fields in zip(wanted, found):
        _SCHEMAS[op, opset] = None if fields is None else Schema(fields)


def _default_ops(graph, depth: int = 0, nodes: list[NodeFields] | None = None) -> set[str]:
    """The default-domain op types of `graph` (`nodes`: its node_fields) and of its
    control-flow bodies (those nested too deep are left to the checks, which refuse them)."""
    ops = {n.op_type for n in (graph.node if nodes is None else nodes)
           if n.domain in ("", "ai.onnx")}
    if depth < 32 and not ops.isdisjoint(_BODIES):
        for node in graph.node:
            if node.op_type in _BODIES:
                for attr in node.attribute:
                    for body in [attr.g] if attr.type == attr.GRAPH else attr.graphs:
                        ops |= _default_ops(body, depth + 1)
    return ops


def _onnx_schema(op_type: str, opset: int) -> Schema | None:
    key = (op_type, opset)
    if key not in _SCHEMAS:
        if len(_SCHEMAS) >= MAX_CACHED:
            _SCHEMAS.clear()
        _SCHEMAS[key] = _local_schema(op_type, opset)
    return _SCHEMAS[key]


def _local_schema(op_type: str, opset: int) -> Schema | None:
    """The schema as this process's onnx reads it (building its schema table)."""
    from onnx import defs
    found = lookup_schemas([(op_type, opset)], defs)[0]
    return None if found is None else Schema(found)


def _check_split(node: NodeFields, where: str) -> None:
    for attr in node.attributes:
        if attr.name == "num_outputs" and attr.i != len(node.outputs):
            raise LegatoError(f"{where}: attribute 'num_outputs' = {attr.i} differs from the "
                              f"{len(node.outputs)} outputs")


# attribute values that onnx's shape inference trusts (and crashes on when they are wrong)
VALUE_CHECKS = {"Split": _check_split}


# AttributeProto fields that hold the value of each single-valued attribute type
SCALAR_FIELDS = {1: "f", 2: "i", 3: "s", 4: "t", 5: "g"}
# GRAPH: the bodies of If, Loop and Scan, converted inline where their control is static
SUPPORTED_ATTRIBUTE_TYPES = {1: "FLOAT", 2: "INT", 3: "STRING", 4: "TENSOR", 5: "GRAPH",
                             6: "FLOATS", 7: "INTS", 8: "STRINGS"}


def _check_attributes(node: NodeFields, schema, where: str, passed: set | None) -> bool:
    """The node's attributes against the schema's; whether one holds a body (GRAPH,
    GRAPHS)."""
    seen, specs, bodies = set(), schema.attributes, False
    for attr in node.attributes:
        name, kind = attr.name, attr.type
        label = Label(_attribute_label, where, attr)   # (formatted only in a message)
        if name in seen:
            raise LegatoError(f"{label} is given twice")
        seen.add(name)
        spec = specs.get(name)
        if spec is None:
            known = ", ".join(sorted(specs)) or "none"
            raise LegatoError(f"{label} is not an attribute of {node.op_type} (its "
                              f"attributes since opset {schema.since_version}: {known})")
        expected = spec[0]
        if attr.ref_attr_name:
            raise LegatoError(f"{label} refers to a function attribute outside a function")
        if kind != expected:
            raise LegatoError(f"{label} must be {_type_name(expected)}, got "
                              f"{_type_name(kind)}")
        if expected not in SUPPORTED_ATTRIBUTE_TYPES:
            raise LegatoError(f"{label} of type {_type_name(expected)} is not supported: "
                              "legato imports flat graphs with plain attributes")
        field = SCALAR_FIELDS.get(kind)
        if field and not attr.HasField(field):
            raise LegatoError(f"{label} of type {_type_name(expected)} holds no value")
        if kind == TENSOR:
            _check_tensor_once(attr.t, label, passed)
        elif kind in (3, 8):
            _check_utf8([attr.s] if kind == 3 else attr.strings, label)
        elif kind in (GRAPH, GRAPHS):
            bodies = True
    for name in schema.required:
        if name not in seen:
            raise LegatoError(f"{where}: required attribute {quote(name)} is missing")
    return bodies


SMALL_TENSOR = 1024   # bytes serialized: tensors checked once per distinct content


def _check_tensor_once(tensor, where, passed: set | None) -> None:
    """check_tensor, skipped for a small tensor whose serialized bytes are in `passed`
    (which it joins when it passes): the check reads nothing but the tensor, and exports
    repeat a few small Constant tensors hundreds of times (MobileNetV2: 10 in 538)."""
    if passed is None or tensor.ByteSize() > SMALL_TENSOR:
        check_tensor(tensor, where)
        return
    key = tensor.SerializeToString()
    if key not in passed:
        check_tensor(tensor, where)
        passed.add(key)


def _type_name(code: int) -> str:
    from onnx import AttributeProto
    if code in AttributeProto.AttributeType.values():
        return AttributeProto.AttributeType.Name(code)
    return f"attribute type {code}"


def _check_utf8(strings, label: str) -> None:
    for value in strings:
        try:
            value.decode()
        except UnicodeDecodeError:
            raise LegatoError(f"{label} is not valid UTF-8") from None


def _check_arity(names, params, least: int, most: int, where, kind: str) -> None:
    """Counts within the schema's bounds; names only left empty for optional parameters."""
    if not least <= len(names) <= most:
        bound = f"{least}" if least == most else f"{least} to {most}"
        raise LegatoError(f"{where}: {kind}s: {len(names)} given, the schema takes {bound}")
    if "" not in names:
        return
    for i, name in enumerate(names):
        param, optional = params[min(i, len(params) - 1)]
        if not name and not optional:
            raise LegatoError(f"{where}: {kind} {i} ({param}) is required but missing")
