"""The ONNX importer's fixed and per-node costs: what it does once per model or per op type
is not repeated per node, and the process that runs onnx's C++ passes starts without
loading the onnx package. The answers must stay what they were (same errors, same
results); benchmarks/import_speed.py measures the times."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

from legato import LegatoError  # noqa: E402
from legato.ir import DTYPES  # noqa: E402
from legato.frontends import onnx as lonnx  # noqa: E402
from legato.frontends.onnx import isolate  # noqa: E402
from legato.frontends.onnx.importer import attribute_value  # noqa: E402
from legato.frontends.onnx.tensors import check_shape, tensor_array  # noqa: E402
from legato.ir.errors import _BOUNDED, quote  # noqa: E402
from tests.test_onnx_import import model, tensor  # noqa: E402


def old_model(n: int = 1):
    """A chain of `n` Unsqueeze nodes at opset 9: the version converter runs on it."""
    nodes = [helper.make_node("Unsqueeze", [f"v{i}"], [f"v{i + 1}"], axes=[0]) for i in range(n)]
    return model(nodes, [tensor("v0", [2])], [tensor(f"v{n}", None)], opset=9)


def mismatched_model():
    """Shape inference refuses it: the output declares another element type."""
    return model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", [2])],
                 [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, [2])], opset=17)


def shared_libraries(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as maps:
        return maps.read()


def test_the_onnx_worker_runs_onnx_passes_without_the_onnx_package():
    # importing onnx (and numpy with it) was most of a small model's import time
    assert lonnx.load(old_model()).main.results[0].type.shape == (1, 2)
    libraries = shared_libraries(isolate._WORKER.process.pid)
    assert "onnx_cpp2py_export" in libraries
    assert "_multiarray_umath" not in libraries   # numpy never loaded


def test_the_onnx_worker_falls_back_to_the_onnx_package(monkeypatch):
    # where onnx's extension module will not load by itself, the package's passes answer
    monkeypatch.setattr(isolate, "_extension", lambda: "/nonexistent/onnx_cpp2py_export.so")
    worker = isolate._Worker()
    monkeypatch.setattr(isolate, "_WORKER", worker)
    try:
        assert lonnx.load(old_model()).main.results[0].type.shape == (1, 2)
        with pytest.raises(LegatoError, match="the model's shapes do not infer: .*"
                                              "Inferred elem type differs"):
            lonnx.load(mismatched_model())
        assert "_multiarray_umath" in shared_libraries(worker.process.pid)
    finally:
        worker.close()


def test_shape_inference_errors_read_as_onnx_words_them():
    with pytest.raises(LegatoError) as caught:
        lonnx.load(mismatched_model())
    try:
        onnx.shape_inference.infer_shapes(mismatched_model(), check_type=True, strict_mode=True)
    except Exception as err:  # noqa: BLE001 - onnx's own InferenceError
        want = str(err).strip().splitlines()[-1]
    assert str(caught.value) == f"the model's shapes do not infer: {want}"


def test_the_version_converter_through_the_worker_matches_onnx():
    converted = isolate.run_isolated(b"C", old_model(3), "onnx's version converter", "failed")
    sent, _ = isolate.without_large_data(old_model(3))   # what the worker is handed
    want = onnx.version_converter.convert_version(sent, 13)
    assert converted.SerializeToString() == want.SerializeToString()


def test_onnx_schemas_are_read_once_per_op_and_opset(monkeypatch):
    calls = []
    get_schema = onnx.defs.get_schema
    monkeypatch.setattr(onnx.defs, "get_schema", lambda *a: calls.append(a) or get_schema(*a))
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(40)]
    lonnx.load(model(nodes, [tensor("v0", [2])], [tensor("v40", None)], opset=16))
    assert len(calls) <= 1   # was one per node


def test_schema_errors_are_worded_as_before():
    node = helper.make_node("Relu", ["x"], ["y"], name="r", alpha=1.0)
    with pytest.raises(LegatoError, match=r"^Relu node 'r': attribute 'alpha' is not an "
                                          r"attribute of Relu \(its attributes since opset "
                                          r"14: none\)$"):
        lonnx.load(model([node], [tensor("x", [2])], [tensor("y", None)], opset=17))
    node = helper.make_node("Gemm", ["a", ""], ["y"], name="g")
    with pytest.raises(LegatoError, match=r"^Gemm node 'g': input 1 \(B\) is required but "
                                          r"missing$"):
        lonnx.load(model([node], [tensor("a", [2, 2])], [tensor("y", None)], opset=17))
    node = helper.make_node("Cast", ["x"], ["y"], name="c")
    with pytest.raises(LegatoError, match=r"^Cast node 'c': required attribute 'to' is "
                                          r"missing$"):
        lonnx.load(model([node], [tensor("x", [2])], [tensor("y", None)], opset=17))


@pytest.mark.parametrize("text", ["", "x", "conv/1", "it's", 'say "hi"', "a\nb", "é\u2028",
                                  "\x00\x7f", "n" * 59, "n" * 60, "n" * 61, "'" * 59 + '"',
                                  "\\" * 30, "\\" * 31, "ü" * 60])
def test_quote_of_a_short_string_is_the_bounded_repr(text):
    for limit in (80, 20, 3):
        full = _BOUNDED.repr(text)
        assert quote(text, limit) == (full if len(full) <= limit else full[:limit - 3] + "...")


FLAT_TYPES = [t for t in (np.float32, np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64,
                          np.bool_, np.float16, np.float64, np.uint32, np.uint64)
              if np.dtype(t).name in DTYPES]   # the element types legato has


@pytest.mark.parametrize("dtype", FLAT_TYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3)])
def test_raw_tensors_read_without_onnx_helpers_as_onnx_reads_them(dtype, shape, monkeypatch):
    rng = np.random.default_rng(0)
    data = (rng.standard_normal(shape) * 100).astype(dtype)
    proto = numpy_helper.from_array(data, "t")
    want = numpy_helper.to_array(proto)
    monkeypatch.setattr(numpy_helper, "to_array", None)   # onnx's per-call lookups: not used
    got = tensor_array(proto, "t")
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_typed_field_tensors_still_decode():
    proto = helper.make_tensor("t", onnx.TensorProto.FLOAT, [2], [1.5, -2.0])   # float_data
    np.testing.assert_array_equal(tensor_array(proto, "t"), np.array([1.5, -2.0], np.float32))


@pytest.mark.parametrize("value", [3, -(2 ** 40), 0.1, [1, -2], [0.25, 1e30]])
def test_plain_attributes_read_as_onnx_helper_reads_them(value):
    attr = helper.make_attribute("a", value)
    assert attribute_value(attr) == helper.get_attribute_value(attr)
    assert type(attribute_value(attr)) is type(helper.get_attribute_value(attr))


@pytest.mark.parametrize("dims, error", [
    ([2, -1], r"^w dimension 1: size -1 is negative$"),
    ([2 ** 41], r"^w dimension 0: size 2199023255552 exceeds the limit of 1099511627776$"),
    ([2 ** 25] * 2, r"^w: shape \[33554432, 33554432\] has 1125899906842624 elements, more "
                    r"than the limit of 281474976710656$"),
    ([1] * 65, r"^w: rank 65 exceeds the limit of 64$"),
    ([True, 2], r"^w dimension 0: size True is not an integer$")])
def test_shape_errors_are_worded_as_before(dims, error):
    with pytest.raises(LegatoError, match=error):
        check_shape(dims, "w")
    assert check_shape([np.int64(2), 3], "w") == (2, 3)


def test_the_importer_never_builds_onnx_schema_table():
    # the worker builds it (7 MB, 30-50 ms) and answers the schemas a model uses; no thread
    # is left behind either
    script = ("import threading\nimport onnx.defs\n"
              "def refuse(*a): raise RuntimeError('built here')\n"
              "onnx.defs.get_schema = refuse\n"
              "from legato.frontends import onnx as lonnx\n"
              "from tests.test_onnx_import_speed import old_model\n"
              "print(lonnx.load(old_model()).main.results[0].type.shape)\n"
              "print(sorted(t.name for t in threading.enumerate()))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.splitlines() == ["(1, 2)", "['MainThread']"], done.stderr


SCHEMA_CASES = [("Conv", 17), ("Pad", 11), ("Pad", 18), ("Resize", 19), ("Gemm", 17),
                ("LSTM", 14), ("Split", 18), ("Cast", 13), ("If", 16), ("Relu", 5),
                ("NoSuchOp", 17), ("LayerNormalization", 13)]


def test_schemas_from_the_worker_are_onnx_schemas():
    from legato.frontends.onnx.worker import lookup_schemas
    pairs = [list(p) for p in SCHEMA_CASES]
    found = isolate.worker_schemas(pairs)
    assert found == lookup_schemas(pairs, onnx.defs)
    assert found[-2] is None and found[-1] is None   # no such op (at that opset)
    conv = found[0]
    want = onnx.defs.get_schema("Conv", 17, "")
    assert conv["attributes"]["group"] == [int(want.attributes["group"].type.value), False]
    assert conv["inputs"][2] == ["B", True] and conv["max_input"] == 3


def test_without_the_worker_schemas_are_read_here(monkeypatch):
    from legato.frontends.onnx import check
    monkeypatch.setattr(check, "worker_schemas", lambda pairs: None)
    monkeypatch.setattr(check, "_SCHEMAS", {})
    assert lonnx.load(old_model()).main.results[0].type.shape == (1, 2)
    test_schema_errors_are_worded_as_before()
    assert ("Relu", 17) in check._SCHEMAS


@pytest.mark.parametrize("value", [[], (), (5,), [1, -2], [0] * 6, [0] * 7, (1,) * 6,
                                   [2 ** 63 - 1, -2 ** 63], [2 ** 63], [True, 1], [1.0],
                                   [10 ** 18] * 6, ["a"]])
def test_quote_of_a_short_list_of_ints_is_the_bounded_repr(value):
    for limit in (80, 20, 3):
        full = _BOUNDED.repr(value)
        assert quote(value, limit) == (full if len(full) <= limit else full[:limit - 3] + "...")


def repeated_shape_chains(layers: int):
    """Each layer reshapes x by a shape computed as Concat(Constant, Constant), the same in
    every layer, as exports compute a padding or a view per layer."""
    ints = onnx.TensorProto.INT64
    nodes = []
    for i in range(layers):
        nodes += [helper.make_node("Constant", [], [f"a{i}"], value=helper.make_tensor(
                      "a", ints, [1], [2])),
                  helper.make_node("Constant", [], [f"b{i}"], value=helper.make_tensor(
                      "b", ints, [1], [-1])),
                  helper.make_node("Concat", [f"a{i}", f"b{i}"], [f"s{i}"], axis=0),
                  helper.make_node("Reshape", [f"x{i}", f"s{i}"], [f"r{i}"]),
                  helper.make_node("Relu", [f"r{i}"], [f"x{i + 1}"]),
                  helper.make_node("Reshape", [f"x{i + 1}", "flat"], [f"f{i}"])]
    nodes[-1].output[0] = "y"
    flat = numpy_helper.from_array(np.array([-1], np.int64), "flat")
    return model([n for n in nodes], [tensor("x0", [4, 3])], [tensor("y", None)], [flat],
                 opset=17)


def test_a_shape_chain_repeated_per_layer_is_folded_once(monkeypatch):
    from legato.frontends.onnx import importer
    folds = []
    fold_calls = importer.fold_calls
    monkeypatch.setattr(importer, "fold_calls", lambda *a: folds.append(1) or fold_calls(*a))
    proto = repeated_shape_chains(12)
    module, nodes = lonnx.load_with_nodes(proto)
    assert len(folds) == 1   # was one per layer
    assert [ops for op, _, ops in nodes if op == "Concat"] == [[]] * 12   # all folded away
    import onnxruntime as ort
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x0": x})[0]
    import legato
    got = legato.compile(module, "cpu_ref")(x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def padded_conv_layers(channels=(3, 4, 6), pads=((0, 1, 0, 1), (1, 1, 1, 1))):
    """Convolutions each preceded by the padding chain HF's MobileNetV2 exports (a Constant
    for every operand, ConstantOfShape, Concat, Reshape, a reversing Slice, Transpose,
    Cast, Pad), then Clip(0, 6) with Constant bounds; a last Constant of each other form
    (value_float, value_ints) added to the output."""
    rng = np.random.default_rng(1)
    ints, nodes, inits = onnx.TensorProto.INT64, [], []

    def const(name, value, dtype=np.int64):
        nodes.append(helper.make_node("Constant", [], [name], name=name,
                                      value=numpy_helper.from_array(np.array(value, dtype))))
    x = "x"
    for i, (c_in, c_out) in enumerate(zip(channels, channels[1:])):
        pad = pads[i % len(pads)]
        const(f"n{i}", [4])
        const(f"p{i}", list(pad))
        const(f"r{i}", [-1, 2])
        const(f"s{i}", [-1]), const(f"e{i}", [-2 ** 63 + 1]), const(f"a{i}", [0])
        const(f"t{i}", [-1]), const(f"flat{i}", [-1]), const(f"v{i}", 0.0, np.float32)
        nodes += [helper.make_node("ConstantOfShape", [f"n{i}"], [f"z{i}"],
                                   value=helper.make_tensor("v", ints, [1], [0])),
                  helper.make_node("Concat", [f"p{i}", f"z{i}"], [f"c{i}"], axis=0),
                  helper.make_node("Reshape", [f"c{i}", f"r{i}"], [f"rs{i}"]),
                  helper.make_node("Slice", [f"rs{i}", f"s{i}", f"e{i}", f"a{i}", f"t{i}"],
                                   [f"sl{i}"]),
                  helper.make_node("Transpose", [f"sl{i}"], [f"tr{i}"], perm=[1, 0]),
                  helper.make_node("Reshape", [f"tr{i}", f"flat{i}"], [f"fl{i}"]),
                  helper.make_node("Cast", [f"fl{i}"], [f"pads{i}"], to=ints),
                  helper.make_node("Pad", [x, f"pads{i}", f"v{i}"], [f"xp{i}"],
                                   mode="constant")]
        w = rng.standard_normal((c_out, c_in, 3, 3)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [f"xp{i}", f"w{i}", f"b{i}"], [f"y{i}"],
                                      kernel_shape=[3, 3], strides=[2, 2]))
        const(f"lo{i}", 0.0, np.float32), const(f"hi{i}", 6.0, np.float32)
        nodes.append(helper.make_node("Clip", [f"y{i}", f"lo{i}", f"hi{i}"], [f"x{i + 1}"]))
        x = f"x{i + 1}"
    nodes += [helper.make_node("Constant", [], ["k"], value_float=0.5),
              helper.make_node("Constant", [], ["shape"], value_ints=[1, -1]),
              helper.make_node("Add", [x, "k"], ["sum"]),
              helper.make_node("Reshape", ["sum", "shape"], ["y"])]
    return model(nodes, [tensor("x", [1, channels[0], 16, 16])], [tensor("y", None)], inits,
                  opset=17)


def test_constant_nodes_import_as_their_converter_makes_them(monkeypatch):
    # Constant nodes of a tensor take a short path (538 of MobileNetV2's 1051 nodes); the
    # module printed must be the one the converter gives, and run as onnxruntime does
    from legato.frontends.onnx.importer import _Importer
    from legato.ir.graph import print_module
    proto = padded_conv_layers()
    fast = lonnx.load(proto)
    with monkeypatch.context() as patch:
        patch.setattr(_Importer, "constant", lambda self, node: False)
        slow = lonnx.load(proto)
    assert print_module(fast) == print_module(slow)
    import legato
    import onnxruntime as ort
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.asarray(legato.compile(fast, "cpu_ref")(x)), want,
                               rtol=1e-5, atol=1e-5)


def test_a_refused_constant_is_refused_as_before():
    bad = helper.make_tensor("v", onnx.TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    bad.dims[0] = 4   # declares 4 values, holds 3
    node = helper.make_node("Constant", [], ["c"], name="k", value=bad)
    with pytest.raises(LegatoError, match=r"^Constant node 'k': attribute 'value': declares "
                                          r"shape \[4\] of float32"):
        lonnx.load(model([node], [], [tensor("c", None)], opset=17))


def test_conversion_overlapping_the_worker_start_gives_the_same_module(monkeypatch):
    # models are converted while the worker starts, before check_graph and shape inference
    # answer; the module must be the one converting after them gives
    from legato.frontends.onnx import importer
    from legato.ir.graph import print_module
    for proto in (padded_conv_layers(), repeated_shape_chains(3)):
        early = lonnx.load_with_nodes(proto)
        with monkeypatch.context() as patch:
            patch.setattr(importer, "convert_early", lambda *args: None)
            late = lonnx.load_with_nodes(proto)
        assert print_module(early[0]) == print_module(late[0]) and early[1] == late[1]


def test_the_checks_verdict_comes_before_an_early_conversion_error():
    # the Reshape fails to convert, and onnx's shape inference refuses the Relu's declared
    # output type: shape inference ran first before, so its error is the one raised
    shape = numpy_helper.from_array(np.array([5], np.int64), "s")
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="r"),
             helper.make_node("Relu", ["x"], ["z"], name="relu")]
    proto = model(nodes, [tensor("x", [2, 3])],
                  [tensor("y", None), helper.make_tensor_value_info("z", onnx.TensorProto.INT32,
                                                                    [2, 3])], [shape], opset=17)
    with pytest.raises(LegatoError, match="^the model's shapes do not infer: "):
        lonnx.load(proto)
    proto.graph.output.pop()
    proto.graph.output.append(tensor("z", None))
    with pytest.raises(LegatoError, match=r"^Reshape node 'r': .*cannot reshape \[2, 3\]"):
        lonnx.load(proto)


def test_passing_node_checks_format_no_message(monkeypatch):
    # per-node checks build their messages only when they fail: quoting and formatting
    # values for every conv of a model cost more than the checks
    from legato.frontends.onnx import convert, nn

    def never(*args, **kwargs):
        raise AssertionError("a message was formatted for a check that passed")
    monkeypatch.setattr(nn, "quote", never)
    monkeypatch.setattr(convert, "quote", never)
    assert lonnx.load(padded_conv_layers()).main.results[0].type.shape == (1, 96)


def helper_node(**attrs):
    from legato.frontends.onnx.convert import Node
    from legato.ir import Const
    inputs = [Const.of(np.array([1.5, 2.0], np.float32)), Const.of(np.array([1, 2], np.int64))]
    return Node(None, helper.make_node("Pad", ["a", "b"], ["y"], name="p"), inputs, attrs, 17)


@pytest.mark.parametrize("call, message", [
    (lambda n: n.ints(0), "input 0 must hold integers, not float32"),
    (lambda n: n.scalar(1), "input 1 must hold one value, not 2"),
    (lambda n: n.axis("axis", 3), "attribute 'axis' = 3 is out of range for an input of rank 3"),
    (lambda n: n.flag("axis", 0), "attribute 'axis' = 3 must be 0 or 1"),
    (lambda n: n.positive("group", 1), "attribute 'group' = 0 must be at least 1"),
])
def test_node_helpers_word_their_refusals_as_before(call, message):
    with pytest.raises(LegatoError) as caught:
        call(helper_node(axis=3, group=0))
    assert str(caught.value) == f"Pad node 'p': {message}"


@pytest.mark.parametrize("attrs, message", [
    ({"strides": [1, 0]}, "attribute 'strides' = [1, 0] must be 2 values of at least 1"),
    ({"pads": [0, 0, 1]}, "attribute 'pads' = [0, 0, 1] must be 4 values of at least 0"),
    ({"auto_pad": "SAME"}, "attribute 'auto_pad' = 'SAME' is none of NOTSET, SAME_UPPER, "
                           "SAME_LOWER, VALID"),
])
def test_window_attributes_are_refused_as_before(attrs, message):
    from legato.frontends.onnx.convert import Node
    from legato.frontends.onnx.nn import window_attrs
    from legato.ir import Value, TensorType
    node = Node(None, helper.make_node("Conv", ["x", "w"], ["y"], name="c"),
                [Value(TensorType((1, 3, 8, 8), "float32"))], attrs, 17)
    with pytest.raises(LegatoError) as caught:
        window_attrs(node, [3, 3])
    assert str(caught.value) == f"Conv node 'c': {message}"


def test_each_node_of_the_main_graph_is_read_once(monkeypatch):
    # the text, coverage and schema checks and the conversion read each node's repeated
    # fields (a new Python object per element and read) from one NodeFields per node
    from legato.frontends.onnx import nodes
    made = []
    init = nodes.NodeFields.__init__
    monkeypatch.setattr(nodes.NodeFields, "__init__",
                        lambda self, proto: made.append(proto.name) or init(self, proto))
    proto = padded_conv_layers()
    lonnx.load(proto)
    assert len(made) == len(proto.graph.node)


def if_then_relu():
    """An If whose branches each hold a node named BODYX, then a Relu named MAINX."""
    def branch(name):
        body = [helper.make_node("Identity", ["x"], [f"{name}_y"], name="BODYX")]
        return helper.make_graph(body, name, [], [tensor(f"{name}_y", [2])])
    cond = numpy_helper.from_array(np.array(True), "c")
    nodes = [helper.make_node("If", ["c"], ["t"], name="if", then_branch=branch("a"),
                              else_branch=branch("b")),
             helper.make_node("Relu", ["t"], ["y"], name="MAINX")]
    return model(nodes, [tensor("x", [2])], [tensor("y", None)], [cond], opset=17)


@pytest.mark.parametrize("damaged, where", [
    ([b"BODYX", b"MAINX"], r"node #0 body node #0: b'BOD\\xffX'"),
    ([b"MAINX"], r"node #1: b'MAI\\xffX'"),
])
def test_names_that_are_not_utf8_are_named_in_the_models_order(damaged, where):
    data = if_then_relu().SerializeToString()
    assert [c.op for c in lonnx.load(onnx.ModelProto.FromString(data)).main.calls] == \
        ["nn.relu"]
    for name in damaged:
        data = data.replace(name, name[:3] + b"\xff" + name[4:])
    with pytest.raises(LegatoError, match=f"^{where} is not valid UTF-8"):
        lonnx.load(onnx.ModelProto.FromString(data))


def test_a_repeated_node_that_makes_a_constant_is_converted_once(monkeypatch):
    # ConstantOfShape makes its constant without a call to fold; each padding chain of
    # HF's MobileNetV2 has one, on the same shape, and each ran its converter
    import dataclasses
    from legato.frontends.onnx.convert import CONVERTERS
    made = []
    original = CONVERTERS["ConstantOfShape"]
    monkeypatch.setitem(CONVERTERS, "ConstantOfShape", dataclasses.replace(
        original, fn=lambda node: made.append(node.name) or original.fn(node)))
    proto = padded_conv_layers(channels=(3, 4, 6, 8, 5), pads=((1, 1, 1, 1),))
    module = lonnx.load(proto)
    assert len(made) == 1   # was one per layer
    import legato
    import onnxruntime as ort
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.asarray(legato.compile(module, "cpu_ref")(x)), want,
                               rtol=1e-5, atol=1e-5)


def test_a_small_constant_repeated_is_decoded_once_into_constants_of_their_own(monkeypatch):
    from legato.frontends.onnx import importer
    decoded = []
    tensor_array = importer.tensor_array
    monkeypatch.setattr(importer, "tensor_array",
                        lambda t, *a: decoded.append(t.dims[:]) or tensor_array(t, *a))
    ints = onnx.TensorProto.INT64
    nodes = [helper.make_node("Constant", [], [f"k{i}"], value=helper.make_tensor(
                 "v", ints, [2], [3, 4])) for i in range(3)]
    nodes.append(helper.make_node("Concat", ["k0", "k1", "k2", "x"], ["y"], axis=0))
    module, _ = lonnx.load_with_nodes(model(nodes, [tensor("x", [2], ints)],
                                            [tensor("y", None, ints)], opset=17))
    assert decoded == [[2]]   # was one per node
    consts = module.main.calls[0].inputs[:3]
    assert len({id(c) for c in consts}) == 3   # each node's own constant, as before
    assert all(c.data.tolist() == [3, 4] and c.type == consts[0].type for c in consts)


def test_the_benchmarks_cpu_mode_counts_the_workers_cpu_time():
    # benchmarks/import_speed.py --cpu adds the worker's CPU time spent on an import (shape
    # inference) to the importing process's own
    from benchmarks import import_speed
    lonnx.load(old_model())
    before = import_speed._worker_cpu()
    assert before > 0   # it started, and read onnx's schemas
    isolate.run_isolated(b"C", old_model(200), "onnx's version converter", "failed")
    assert import_speed._worker_cpu() > before


def constants_then(bad_index: int | None, count: int = 4):
    """`count` Constant nodes of the same small tensor, the one at `bad_index` declaring
    4 values and holding 3, concatenated."""
    nodes = []
    for i in range(count):
        value = helper.make_tensor("v", onnx.TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
        if i == bad_index:
            value.dims[0] = 4
        nodes.append(helper.make_node("Constant", [], [f"k{i}"], name=f"c{i}", value=value))
    nodes.append(helper.make_node("Concat", [f"k{i}" for i in range(count)], ["y"], axis=0))
    return model(nodes, [], [tensor("y", None)], opset=17)


def test_a_repeated_small_tensor_is_checked_once(monkeypatch):
    from legato.frontends.onnx import check
    checked = []
    check_tensor = check.check_tensor
    monkeypatch.setattr(check, "check_tensor",
                        lambda t, where: checked.append(str(where)) or check_tensor(t, where))
    assert lonnx.load(constants_then(None)).main.results[0].type.shape == (12,)
    assert checked == ["Constant node 'c0': attribute 'value'"]   # was one per node


@pytest.mark.parametrize("bad", [0, 2])
def test_a_lying_tensor_among_repeats_is_named(bad):
    with pytest.raises(LegatoError, match=rf"^Constant node 'c{bad}': attribute 'value': "
                                          r"declares shape \[4\] of float32"):
        lonnx.load(constants_then(bad))


def test_the_weight_scan_keeps_every_other_field_as_protobuf_parses_it(tmp_path):
    # the scan of a model file reads one-byte field keys and lengths inline; fields of
    # every length (nodes over 127 bytes, 2-byte keys such as ModelProto.metadata_props)
    # must come through as protobuf parses them, the large weights as mapped references
    from legato.frontends.onnx.weights import load_mapped
    proto = padded_conv_layers(channels=(3, 64, 96))
    proto.graph.node[0].name = "n" * 300
    proto.graph.node[0].doc_string = "d" * 5
    onnx.helper.set_model_props(proto, {"key": "v" * 200})
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    parsed, mapped = load_mapped(path, onnx)
    try:
        assert mapped is not None
        want = onnx.load(str(path))
        for tensor in parsed.graph.initializer:
            if mapped.owns(tensor):
                original = next(t for t in want.graph.initializer if t.name == tensor.name)
                np.testing.assert_array_equal(mapped.array(tensor, "w"),
                                              numpy_helper.to_array(original))
                tensor.CopyFrom(original)
        assert parsed.SerializeToString() == want.SerializeToString()
    finally:
        mapped.close()
