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

import numbers
import os
import re
from pathlib import Path
from typing import Mapping

from ...ir.builder import GraphBuilder
from ...ir.errors import LegatoError
from ...ir import Call, Const, Module, Origin, Value
from ...ir.symbols import GUARDS, MAX_NAME, collecting_guards, symbol, symbolic_dims
from ...ir.verify import verify
from ..common.fold import (FOLD_MAX_ELEMENTS, fold_calls, foldable, is_symbolic_const,
                           shape_const)
from . import converters  # noqa: F401  (every converter registers)
from .check import check_graph, check_opset_range, check_text
from .convert import Node, Refused, converter_of, onnx_dtype
from .isolate import run_isolated, start_worker, without_large_data
from .nodes import GRAPH, GRAPHS, TENSOR, NodeFields, node_fields
from .sizes import with_sizes_computed
from .tensors import (check_shape, check_size, check_tensor, external_tensors,
                      load_external_data, quote, tensor_array)
from .weights import load_mapped

MIN_OPSET = 13
DEFAULT_DOMAINS = ("", "ai.onnx")
MAX_PROTO_BYTES = 2 ** 31   # protobuf's limit on one message
MAX_NESTING = 32   # If/Loop/Scan bodies within bodies
SMALL_CONSTANT = 1024   # bytes of a Constant node's tensor decoded once per import


def _onnx():
    try:
        import onnx
    except ImportError:
        raise LegatoError("the ONNX importer needs the onnx package: "
                          "pip install 'legato[onnx]'") from None
    return onnx


def load(model, input_shapes: Mapping | None = None, *, base_dir=None,
         registry=None) -> Module:
    """A legato Module from an .onnx path or a ModelProto.

    `input_shapes` binds what the model leaves symbolic: `{input_name: shape}` for a whole
    input, or `{dim_param: size}` for a named dimension such as "batch". Tensor data kept
    in external files is read from `base_dir` (default for a path: the file's directory)
    and must stay inside it. `registry`: the context's when not given."""
    return load_with_nodes(model, input_shapes, base_dir=base_dir, registry=registry)[0]


def load_with_nodes(model, input_shapes: Mapping | None = None, *, base_dir=None,
                    registry=None):
    """(module, nodes): `nodes` lists (ONNX op type, node name, legato ops it became)."""
    start_worker()  # it starts up (building onnx's schemas) while the model is read
    weights = None
    try:
        proto, base_dir, weights = read_model(model, base_dir)
        return _import(proto, base_dir, weights, input_shapes, registry)
    finally:
        if weights is not None:
            weights.close()


def _import(proto, base_dir, weights, input_shapes, registry):
    input_shapes = check_input_shapes(input_shapes)
    # the nodes' fields and the external tensors, read once for the checks and conversion
    nodes = node_fields(proto.graph)
    external = external_tensors(proto, nodes)
    # everything onnx's C++ code (version converter, shape inference) sees is checked first
    check_text(proto, nodes, external)
    check_supported(proto, nodes)
    opset = model_opset(proto)
    read = read_weights(proto.graph, weights)  # while the worker starts, before check_graph
    early = convert_early(proto, opset, input_shapes, registry, weights, read, nodes, external)
    check_graph(proto.graph, opset, nodes)
    # (a late conversion reads another model, upgraded or with its external data read in)
    del nodes   # freed before shape inference copies the graph
    proto = with_external_data(proto, base_dir, weights, external)
    proto, opset = upgrade(proto, opset)
    check_shapes(proto, input_shapes)
    if early is not None:
        importer, outcome = early
        if isinstance(outcome, Exception):
            raise _with_symbols_hint(outcome, importer)
        return outcome, importer.nodes
    importer = _Importer(proto.graph, opset, input_shapes, registry, weights, read)
    try:
        return importer.run(), importer.nodes
    except LegatoError as err:
        raise _with_symbols_hint(err, importer) from None


def convert_early(proto, opset, input_shapes, registry, weights, read, nodes=None,
                  external=None):
    """(importer, module or the exception its conversion raised) of a model converted
    before check_graph and onnx's shape inference, which wait for the worker while it
    starts, or None where the model is not yet in the form conversion reads (an opset that
    the version converter upgrades, external data still to load). The checks' verdict
    comes first all the same: `_import` raises what they refuse before anything of this
    conversion, which on a model they accept is the conversion they would have let run.
    `nodes`, `external`: the model's node_fields and external_tensors."""
    if opset < MIN_OPSET or any(weights is None or not weights.owns(t) for t in
                                (external_tensors(proto) if external is None else external)):
        return None
    importer = _Importer(proto.graph, opset, input_shapes, registry, weights, read, nodes)
    try:
        return importer, importer.run()
    except Exception as err:  # noqa: BLE001 - raised after the checks, as conversion would
        return importer, err


def _with_symbols_hint(err: Exception, importer) -> Exception:
    """A conversion error, with how to bind the model's symbolic dimensions if it has
    some (an error about them is the likely reason)."""
    symbols = symbolic_dims(importer.b.params) if isinstance(err, LegatoError) else None
    if not symbols:
        return err
    binding = ", ".join(f"{quote(s)}: ..." for s in symbols)
    return type(err)(f"{err}\n(the model's dimensions {', '.join(symbols)} are symbolic; "
                     f"importing at one size needs them bound: input_shapes={{{binding}}}, "
                     f"or --shape NAME=SIZE)")


def read_weights(graph, weights) -> dict:
    """The initializers `weights` maps out of the model file, read into constants now:
    check_graph waits for the worker's schemas, and the worker starts meanwhile, so the
    weights are read in that time. {_weight_key: Const}; a tensor its checks refuse ends
    the reading, for check_graph to report what is wrong in the model's order."""
    read: dict = {}
    if weights is None:
        return read
    for tensor in graph.initializer:
        if weights.owns(tensor):
            where = f"initializer {quote(tensor.name)}"
            try:
                check_tensor(tensor, where)
                read[_weight_key(tensor)] = Const.of(weights.array(tensor, where), copy=False)
            except LegatoError:
                break
    return read


def _weight_key(tensor) -> tuple:
    """A mapped tensor's name and place in the file."""
    return tensor.name, tuple((e.key, e.value) for e in tensor.external_data)


COVERAGE = ("native", "decomposed", "custom", "fallback", "folded")


def coverage(nodes, report) -> str:
    """Per ONNX op type, how its nodes end up on the backend: run natively, decomposed,
    tunnelled as custom ops, run on the fallback (a call made from the node runs off the
    first backend: the calls name their node), or folded away at import."""
    off = _off_first_backend(report)
    exact = report.placement is not None  # (then where each node's calls ran is known)
    actions: dict[str, set] = {}
    for row in report.entries:
        if row["source"] and not (exact and row["action"] == "fallback"):
            actions.setdefault(row["op"], set()).add(row["action"])
    table: dict[str, dict[str, int]] = {}
    for op_type, name, ops in nodes:
        seen = set().union(*(actions.get(op, {"legal"}) for op in ops)) if ops else {"folded"}
        if name in off:
            seen.add("fallback")
        kind = next((k for k in ("fallback", "custom", "decomposed", "folded") if k in seen),
                    "native")
        counts = table.setdefault(op_type, dict.fromkeys(COVERAGE, 0))
        counts[kind] += 1
    lines = [f"ONNX op coverage for {' + '.join(report.targets) or report.backend}:",
             f"  {'op':<24}" + "".join(f"{k:>11}" for k in COVERAGE)]
    lines += [f"  {op:<24}" + "".join(f"{c[k]:>11}" for k in COVERAGE)
              for op, c in sorted(table.items())]
    return "\n".join(lines)


def _off_first_backend(report) -> set[str]:
    """The nodes (by origin source) with a call that runs off the first backend."""
    placement = report.placement
    if placement is None:
        return set()
    first = placement.targets[0]
    return {p.call.origin.source for p in placement.calls
            if p.backend != first and p.call.origin is not None}


def read_model(model, base_dir=None):
    """(ModelProto, base directory of its external data, MappedWeights or None): a path is
    read without its external data, which `with_external_data` reads from inside the base
    directory, and with its large initializers left in the memory-mapped file."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model, base_dir, None
    if not isinstance(model, (str, os.PathLike)):
        raise LegatoError(f"an ONNX model is a path or an onnx.ModelProto, not "
                          f"{type(model).__name__}")
    path = Path(model)
    _check_model_file(path)
    try:
        proto, weights = load_mapped(path, onnx)
    except OSError as err:
        raise LegatoError(f"cannot read ONNX model {path}: {err.strerror or err}") from None
    except Exception as err:  # noqa: BLE001 - protobuf decode errors
        raise LegatoError(f"{path} is not a readable ONNX model: "
                          f"{quote(str(err))}") from None
    return proto, path.parent if base_dir is None else base_dir, weights


def _check_model_file(path: Path) -> None:
    """Refuse what cannot be read whole: a FIFO or device would block or never end."""
    try:
        if not path.exists():
            return  # onnx.load names the missing file
        regular, size = path.is_file(), path.stat().st_size
    except OSError as err:
        raise LegatoError(f"cannot read ONNX model {path}: {err.strerror or err}") from None
    if not regular:
        raise LegatoError(f"{path} is not a regular file")
    if size > MAX_PROTO_BYTES:
        raise LegatoError(f"{path} has {size} bytes: an ONNX file holds at most 2 GiB "
                          "(larger weights go to external data files)")


def with_external_data(proto, base_dir, weights=None, external=None):
    """The model with every external tensor's data read in (a copy; the caller's model is
    left as it is), but for those `weights` maps from the model file itself. `external`:
    the model's external_tensors, where the caller has them."""
    if external is None:
        external = external_tensors(proto)
    if not [t for t in external if weights is None or not weights.owns(t)]:
        return proto
    onnx = _onnx()
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    load_external_data(copy, base_dir, weights)
    return copy


def unsupported_ops(proto, nodes: list[NodeFields] | None = None) -> dict[str, list[str]]:
    """ONNX op type -> names of the nodes that legato cannot import (control-flow bodies
    included). `nodes`: the graph's node_fields, where the caller has them."""
    missing: dict[str, list[str]] = {}
    for index, node in all_nodes(proto.graph, nodes=nodes):
        if converter_of(node.domain, node.op_type) is None:
            label = node.op_type if node.domain in DEFAULT_DOMAINS else \
                f"{node.domain}.{node.op_type}"
            missing.setdefault(label[:80], []).append(node.name[:80] or f"#{index}")
    return missing


def all_nodes(graph, depth: int = 0, nodes: list[NodeFields] | None = None):
    """(index, node) of every node of `graph` and of the bodies its nodes hold. `nodes`:
    the graph's node_fields, yielded for its own nodes (they have a NodeProto's op_type,
    domain and name) while its bodies' nodes are NodeProtos."""
    if depth > MAX_NESTING:
        raise LegatoError(f"control-flow bodies nest deeper than {MAX_NESTING} levels")
    for index, node in enumerate(graph.node if nodes is None else nodes):
        yield index, node
        for attr in node.attribute if nodes is None else node.attributes:
            kind = attr.type
            for body in [attr.g] if kind == GRAPH else attr.graphs if kind == GRAPHS else ():
                yield from all_nodes(body, depth + 1)


# why the default-domain ops legato leaves unmapped on purpose are left out
_RANDOM = "samples random numbers (legato imports deterministic graphs)"
_DATA_SHAPED = "its output shape depends on the data (legato has static shapes)"
_NOT_TENSORS = "works on {} (legato has tensors only)"
REFUSED_BY_DESIGN = {
    **dict.fromkeys(("Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike",
                     "RandomUniform", "RandomUniformLike"), _RANDOM),
    **dict.fromkeys(("NonZero", "Unique", "NonMaxSuppression"), _DATA_SHAPED),
    **dict.fromkeys(("ConcatFromSequence", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
                     "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
                     "SplitToSequence"), _NOT_TENSORS.format("sequences")),
    **dict.fromkeys(("Optional", "OptionalGetElement", "OptionalHasElement"),
                    _NOT_TENSORS.format("optionals")),
    **dict.fromkeys(("StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch",
                     "TfIdfVectorizer"), _NOT_TENSORS.format("strings")),
    **dict.fromkeys(("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"),
                    "a training loss (legato imports inference graphs)"),
    "ImageDecoder": "decodes compressed image bytes, whose decoded size is in the data "
                    "(legato has static shapes)",
}


def check_supported(proto, nodes: list[NodeFields] | None = None) -> None:
    missing = unsupported_ops(proto, nodes)
    if missing:
        lines = [f"  {op}: {', '.join(names[:8])}" + (f" (+{len(names) - 8} more)"
                                                      if len(names) > 8 else "")
                 + (f": {REFUSED_BY_DESIGN[op]}" if op in REFUSED_BY_DESIGN else "")
                 for op, names in sorted(missing.items())]
        raise LegatoError(f"the model uses {len(missing)} ONNX op type(s) legato cannot "
                          "import:\n" + "\n".join(lines))


def model_opset(proto) -> int:
    """The default-domain opset the model imports, within what legato and onnx support."""
    onnx = _onnx()
    newest = onnx.defs.onnx_opset_version()
    versions = {o.domain: o.version for o in proto.opset_import}
    opset = next((versions[d] for d in DEFAULT_DOMAINS if d in versions), None)
    check_opset_range(opset)
    if opset > newest:
        raise LegatoError(f"ONNX opset {opset} is not supported: legato imports opsets "
                          f"{MIN_OPSET} to {newest} (the newest the installed onnx "
                          f"{onnx.__version__} knows; older ones are upgraded)")
    return opset


def upgrade(proto, opset: int):
    """(model, opset): opsets below 13 are upgraded with onnx's version converter, which
    is only handed models that `check_graph` accepted."""
    if opset >= MIN_OPSET:
        return proto, opset
    if opset < 9 and any(n.op_type == "Scan" for _, n in all_nodes(proto.graph)):
        # onnx's Scan 8 -> 9 adapter drops the batch axis from the graph's own inputs
        raise Refused(f"Scan of ONNX opset {opset} (batched, with sequence_lens) is not "
                      "imported: onnx's version converter changes the model's input shapes "
                      "when upgrading it; export the model at opset 9 or newer")
    proto = _flat_hardmax(proto)
    upgraded = run_isolated(b"C", proto, "onnx's version converter", f"ONNX opset {opset} "
                            f"is older than {MIN_OPSET} and could not be upgraded")
    check_graph(upgraded.graph, MIN_OPSET)
    return upgraded, MIN_OPSET


def _flat_hardmax(proto):
    """The model with each Hardmax of opset < 13 spelled as that opset defines it, which
    the version converter leaves to mean opset 13's per-axis Hardmax: one hardmax over the
    input flattened to 2-D at `axis` (default 1), reshaped back."""
    if not any(n.op_type == "Hardmax" and n.domain in DEFAULT_DOMAINS
               for _, n in all_nodes(proto.graph)):
        return proto
    import onnx
    proto = onnx.ModelProto.FromString(proto.SerializeToString())  # the caller's stays
    _flatten_hardmax_in(proto.graph, onnx.helper)
    return proto


def _flatten_hardmax_in(graph, helper) -> None:
    nodes = []
    for node in graph.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.type == attr.GRAPH else \
                    attr.graphs if attr.type == attr.GRAPHS else ():
                _flatten_hardmax_in(body, helper)
        if node.op_type != "Hardmax" or node.domain not in DEFAULT_DOMAINS:
            nodes.append(node)
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        x, (y,) = node.input[0], node.output
        flat, hard, shape = (f"{y}__hardmax_{part}" for part in ("flat", "2d", "shape"))
        nodes += [helper.make_node("Flatten", [x], [flat], axis=axis),
                  helper.make_node("Hardmax", [flat], [hard], axis=1),
                  helper.make_node("Shape", [x], [shape]),
                  helper.make_node("Reshape", [hard, shape], [y])]
    del graph.node[:]
    graph.node.extend(nodes)


def check_input_shapes(input_shapes) -> dict:
    """`input_shapes` with each value checked: a size, or a sequence of sizes."""
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise LegatoError(f"input_shapes must be a mapping of names to sizes or shapes, not "
                          f"{type(input_shapes).__name__}")
    checked = {}
    for key, value in input_shapes.items():
        if not isinstance(key, str):
            raise LegatoError(f"input_shapes key {quote(key)} is not a name")
        where = f"input_shapes[{quote(key)}]"
        checked[key] = check_size(value, where) if isinstance(value, numbers.Integral) \
            and not isinstance(value, bool) else check_shape(value, where)
    return checked


def check_shapes(proto, input_shapes: Mapping) -> None:
    """Run ONNX's strict shape inference with the bound input shapes; refuse on failure."""
    initializers = {t.name for t in proto.graph.initializer}
    shapes = {value.name: input_shape(value, input_shapes) for value in proto.graph.input
              if value.name not in initializers}
    bound, _ = without_large_data(proto)
    spell_out_defaults(bound.graph)
    for value in bound.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in shapes[value.name]:
                if isinstance(size, int):
                    dims.add().dim_value = size
                else:
                    dims.add().dim_param = str(size)
    run_isolated(b"I", bound, "onnx's shape inference", "the model's shapes do not infer",
                 light=True)


# attributes whose default onnx's shape inference gets wrong when left unset
# (MeanVarianceNormalization's function body refers to `axes`; STFT's inference takes
# onesided as 0 once frame_length is a constant)
INFERENCE_DEFAULTS = {"MeanVarianceNormalization": ("axes", [0, 2, 3]),
                      "STFT": ("onesided", 1)}


def spell_out_defaults(graph) -> None:
    """Give the nodes of INFERENCE_DEFAULTS their default attribute explicitly."""
    from onnx import helper
    for node in graph.node:
        name, value = INFERENCE_DEFAULTS.get(node.op_type, (None, None))
        if name and node.domain in DEFAULT_DOMAINS and \
                all(a.name != name for a in node.attribute):
            node.attribute.append(helper.make_attribute(name, value))


def input_shape(value, input_shapes: Mapping) -> tuple[int, ...]:
    """The static shape of a graph input, with symbolic dimensions bound."""
    where = f"input {quote(value.name)}"
    declared = value.type.tensor_type.shape.dim
    has_shape = value.type.tensor_type.HasField("shape")
    if value.name in input_shapes:
        shape = input_shapes[value.name]
        if not isinstance(shape, tuple):
            raise LegatoError(f"input_shapes[{quote(value.name)}]: {where} needs a shape (a "
                              f"sequence of sizes), got {quote(shape)}")
        if has_shape and len(shape) != len(declared):
            raise LegatoError(f"input_shapes[{quote(value.name)}]: {where} has rank "
                              f"{len(declared)}, the bound shape {list(shape)} rank {len(shape)}")
        return shape
    if not has_shape:
        raise LegatoError(f"{where} declares no shape; bind it with "
                          f"input_shapes={{{quote(value.name)}: (...)}}")
    shape = []
    for i, dim in enumerate(declared):
        if dim.HasField("dim_value"):
            shape.append(dim.dim_value)
        elif dim.dim_param and dim.dim_param in input_shapes:
            size = input_shapes[dim.dim_param]
            if isinstance(size, tuple):
                raise LegatoError(f"input_shapes[{quote(dim.dim_param)}]: dimension {i} of "
                                  f"{where} needs a size, got the shape {list(size)}")
            shape.append(size)
        else:  # left symbolic: named after its dim_param, or after the input and axis
            shape.append(symbol(symbol_name(dim.dim_param or f"{value.name}_{i}")))
    return tuple(shape)


def symbol_name(text: str) -> str:
    """An identifier for a dim_param or input name ('batch_size', 'input:0_1' -> input_0_1)."""
    name = re.sub(r"[^A-Za-z0-9_.]", "_", text)[:MAX_NAME]
    return name if re.match(r"[A-Za-z_]", name) else f"d_{name}"[:MAX_NAME]


def attribute_value(attr, checked: bool = False):
    """An ONNX attribute as a Python value (strings decoded, tensors as numpy arrays);
    `checked`: a tensor's metadata was checked already (check_graph checks every node's)."""
    kind = attr.type
    if kind == attr.TENSOR:
        return tensor_array(attr.t, f"attribute {quote(attr.name)}", checked)
    if kind in _PLAIN_ATTRIBUTES and not attr.ref_attr_name:  # as onnx's helper reads them
        return _PLAIN_ATTRIBUTES[kind](attr)
    from onnx import helper
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


# INT, FLOAT, INTS, FLOATS: read as onnx.helper.get_attribute_value reads them
_PLAIN_ATTRIBUTES = {2: lambda a: a.i, 1: lambda a: a.f, 7: lambda a: list(a.ints),
                     6: lambda a: list(a.floats)}


def check_no_symbolic_consts(calls, results) -> None:
    """Symbolic sizes shape the model (reshape targets) or are computed at run time where
    a call reads them (sizes.py); none is left as a call's operand or a graph output."""
    for call in calls:
        if any(is_symbolic_const(v) for v in call.inputs):
            node = call.origin.source if call.origin is not None else call.op
            raise LegatoError(f"{node}: {call.op} reads symbolic sizes as data")
    if any(is_symbolic_const(v) for v in results):
        raise LegatoError("a graph output is a shape with symbolic sizes")


def _fold_key(fields: NodeFields, inputs):
    """What a node's folded results depend on, for a node of small constant inputs (shape
    arithmetic, where exports repeat the same chain per layer), else None: its op, its
    attributes, which of its inputs and outputs are present, and its inputs' data. The
    inputs are looked at first: most nodes have a computed one, and reading a node's
    attributes costs more than that look."""
    if not inputs:
        return None
    data = []
    for value in inputs:
        if value is None:
            data.append(None)
        elif not isinstance(value, Const) or value.data.size > FOLD_MAX_ELEMENTS or \
                value.data.dtype == object:
            return None
        else:  # (the legato dtype names the numpy one)
            data.append((value.type.dtype, value.type.shape, value.data.tobytes()))
    attributes = fields.attributes
    if any(a.type in (GRAPH, GRAPHS) for a in attributes):  # bodies
        return None
    return (fields.domain, fields.op_type, tuple(a.SerializeToString() for a in attributes),
            tuple(map(bool, fields.outputs)), tuple(data))


def _from_node(call: Call, node_name: str) -> Call:
    """`call` with the ONNX node it came from as its origin (no rules yet: the call is as
    imported), so reports and errors can name the node; decompositions keep the name."""
    if call.origin is not None:
        return call
    return Call(call.op, call.inputs, call.attrs, call.outputs,
                Origin(call.op, call.attrs, node_name))


class _Importer:
    """Walks the graph in order, converting each node with its converter."""

    def __init__(self, graph, opset: int, input_shapes: Mapping, registry=None, weights=None,
                 read: Mapping | None = None, fields: list[NodeFields] | None = None):
        self.graph, self.opset, self.input_shapes = graph, opset, input_shapes
        self.fields = fields   # the graph's node_fields, where the caller read them
        self.weights, self.read = weights, read or {}  # read: of read_weights
        self.b = GraphBuilder(registry)
        self.env: dict[str, Value] = {}
        self.nodes: list[tuple[str, str, list[str]]] = []
        self.sizes: dict = {}  # symbolic sizes computed at run time (sizes.py)
        self.folded: dict = {}  # _fold_key -> the constants a folded node gave
        self.small: dict = {}  # a small Constant tensor's bytes -> (its type, its array)

    def run(self) -> Module:
        for tensor in self.graph.initializer:
            self.env[tensor.name] = self.initializer(tensor)
        for value in self.graph.input:
            if value.name not in self.env:
                dtype = onnx_dtype(value.type.tensor_type.elem_type, f"input {quote(value.name)}")
                self.env[value.name] = self.b.input(value.name,
                                                    input_shape(value, self.input_shapes), dtype)
        with collecting_guards() as guards:  # what symbolic slices assumed of the sizes
            for node in node_fields(self.graph) if self.fields is None else self.fields:
                self.convert(node)
        self.fields = None   # (the caller's list is freed with it)
        results = [self.lookup(out.name, "graph output") for out in self.graph.output]
        check_no_symbolic_consts(self.b.calls, results)
        if not guards:
            return self.b.build(*results)
        module = Module({"main": self.b.function(*results, attrs={GUARDS: guards})})
        return verify(module, self.b.registry)

    def initializer(self, tensor) -> Const:
        where = f"initializer {quote(tensor.name)}"
        if self.weights is not None and self.weights.owns(tensor):
            if self.read and (found := self.read.get(_weight_key(tensor))) is not None:
                return found
            check_tensor(tensor, where)
            return Const.of(self.weights.array(tensor, where), copy=False)
        return Const.of(tensor_array(tensor, where))

    def lookup(self, name: str, where: str) -> Value:
        if name not in self.env:
            raise LegatoError(f"{where} {quote(name)} is not defined by any node, input or "
                              "initializer")
        return self.env[name]

    def convert(self, fields: NodeFields) -> None:
        op_type = fields.op_type
        if op_type == "Constant" and self.constant(fields):
            return
        env, names = self.env, fields.inputs
        inputs = [env.get(n) if n else None for n in names]
        if None in inputs:
            missing = next((n for n in names if n and n not in env), None)
            if missing is not None:
                self.lookup(missing, f"{op_type} node {quote(fields.name)} input")
        key = _fold_key(fields, inputs)
        if key in self.folded:  # the same node on the same constants, folded before
            self.nodes.append((op_type, fields.name or f"<unnamed {op_type}>", []))
            self.env.update((n, v) for n, v in zip(fields.outputs, self.folded[key]) if n)
            return
        node = Node(self.b, fields.proto, inputs, {}, self.opset, fields)
        node.scope = self
        calls = self.b.calls
        start = len(calls)
        try:
            # attribute tensors were checked with the graph (check_graph)
            node.attrs = {a.name: attribute_value(a, checked=True) for a in fields.attributes}
            result = converter_of(fields.domain, op_type).fn(node)
        except LegatoError as err:
            text = str(err)
            prefix = f"{op_type} node {node.label}"
            raise type(err)(text if text.startswith(prefix) else f"{prefix}: {text}") from None
        results = result if isinstance(result, (tuple, list)) else (result,)
        if inputs and all(isinstance(v, Const) or v is None for v in inputs):
            results = self.fold(start, results)
        # constants alone, whether its calls folded or it made none (ConstantOfShape)
        folded = len(calls) == start and all(isinstance(v, Const) or v is None
                                             for v in results)
        if len(calls) > start:
            new = calls[start:]
            del calls[start:]  # the calls computing sizes come first
            calls.extend(with_sizes_computed(self.b, new, self.sizes))
            self.nodes.append((op_type, node.name, [c.op for c in calls[start:]]))
            calls[start:] = [_from_node(c, node.name) for c in calls[start:]]
        else:
            self.nodes.append((op_type, node.name, []))
        for name, value in zip(node.outputs, results):
            if name and value is None:
                node.fail(f"output {name!r} is not produced by legato's converter")
            if name:
                env[name] = value
        if folded and key is not None:
            self.folded[key] = results

    def constant(self, fields: NodeFields) -> bool:
        """A Constant node holding a tensor, made a constant here without the converter's
        per-node machinery (exports hold hundreds of them); False for any other form, or
        where its tensor is refused, for `convert` to convert (or refuse) as usual."""
        attributes, outputs = fields.attributes, fields.outputs
        if fields.domain not in DEFAULT_DOMAINS or len(attributes) != 1 or \
                len(outputs) != 1 or not outputs[0]:
            return False
        attr = attributes[0]
        if attr.name != "value" or attr.type != TENSOR or attr.ref_attr_name:
            return False
        tensor = attr.t
        # exports repeat a few small tensors hundreds of times (MobileNetV2: 10 in 538
        # nodes): each is decoded once, and each node gets a constant of its own
        key = tensor.SerializeToString() if tensor.ByteSize() <= SMALL_CONSTANT else None
        known = self.small.get(key) if key is not None else None
        if known is not None:
            value = Const(known[0], None, known[1])
        else:
            try:
                value = Const.of(tensor_array(tensor, "attribute 'value'", True), copy=False)
            except LegatoError:
                return False
            if key is not None:
                self.small[key] = value.type, value.data
        self.nodes.append((fields.op_type, fields.name or "<unnamed Constant>", []))
        self.env[outputs[0]] = value
        return True

    def subgraph(self, graph, bound: Mapping[str, Value]) -> list[Value]:
        """The outputs of a control-flow body `graph` converted inline: its inputs are
        `bound`, names of the enclosing scopes stay visible, its own names do not leak."""
        outer = self.env
        self.env = {**outer, **bound}
        try:
            for tensor in graph.initializer:
                self.env[tensor.name] = Const.of(tensor_array(
                    tensor, f"initializer {quote(tensor.name)}"))
            for node in node_fields(graph):
                self.convert(node)
            return [self.lookup(out.name, "subgraph output") for out in graph.output]
        finally:
            self.env = outer

    def fold(self, start: int, results) -> tuple:
        """Evaluate shape arithmetic on constants now, so later shape operands are known."""
        values = [v for v in results if v is not None]
        if not foldable(values) or all(isinstance(v, Const) for v in values):
            return tuple(results)
        arrays = fold_calls(self.b.calls[start:], values, self.b.registry)
        if arrays is None:
            return tuple(results)
        del self.b.calls[start:]
        consts = iter(shape_const(a) if a.dtype == object else Const.of(a) for a in arrays)
        return tuple(None if v is None else next(consts) for v in results)
