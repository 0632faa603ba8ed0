"""A graph's nodes with their fields read out of protobuf once per import.

Every read of a node's field builds new Python objects (its repeated fields a container
and one object per element: about a microsecond per field and node). The text check, the
op coverage check, the schema checks and the conversion each walk every node, and read
most fields more than once, so the importer reads them once into NodeFields and hands
the list to each. Only the main graph's nodes are read so; control-flow bodies are read
where they are walked.
"""
from __future__ import annotations

# AttributeProto types (onnx.AttributeProto.TENSOR, ...; read off an instance, each is a
# lookup in the message's descriptor)
TENSOR, GRAPH, GRAPHS = 4, 5, 10


class NodeFields:
    """One NodeProto's fields as plain values: `inputs`, `outputs` (tuples of names) and
    `attributes` (a tuple of the AttributeProtos); `proto` is the node itself."""

    __slots__ = ("proto", "op_type", "domain", "name", "inputs", "outputs", "attributes")

    def __init__(self, proto):
        self.proto = proto
        self.op_type, self.domain, self.name = proto.op_type, proto.domain, proto.name
        self.inputs, self.outputs = tuple(proto.input), tuple(proto.output)
        self.attributes = tuple(proto.attribute)


def node_fields(graph) -> list[NodeFields]:
    """NodeFields of each node of `graph`, in order (its bodies' nodes are not read)."""
    return [NodeFields(node) for node in graph.node]
