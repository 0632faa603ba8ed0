"""The ONNX importer on hostile models: no crash, no raw exception, no unbounded allocation,
no file read outside the model's directory. Every bad model is a LegatoError that names
the node, attribute, input or tensor at fault."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from legato import LegatoError  # noqa: E402
from legato.frontends import onnx as lonnx  # noqa: E402
from tests.test_onnx_import import F, model, tensor  # noqa: E402


def relu_model(shape=("batch", 3)):
    return model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", list(shape))],
                 [tensor("y", None)])


def with_attribute(node, name, value):
    """`node` with attribute `name` replaced by `value`, whatever its type."""
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(name, value)])
    return node


# --- models that used to kill the process -----------------------------------------------------

def limit_memory():
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def load_in_subprocess(build: str) -> str:
    """Run `build` (which defines `model` and `shapes`) and load it in a fresh interpreter:
    a crash in onnx's C++ code fails this test instead of killing pytest."""
    script = textwrap.dedent("""
        import onnx
        from onnx import helper
        from legato import LegatoError
        from legato.frontends import onnx as lonnx
        shapes = None
    """) + textwrap.dedent(build) + textwrap.dedent("""
        try:
            lonnx.load(model, shapes)
            print("LOADED")
        except LegatoError as err:
            print("LegatoError:", err)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, preexec_fn=limit_memory)
    assert done.returncode == 0, f"exit code {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def test_a_mistyped_attribute_below_opset_13_is_refused_before_the_version_converter():
    out = load_in_subprocess("""
        node = helper.make_node("Unsqueeze", ["x"], ["y"], name="u")
        node.attribute.append(helper.make_attribute("axes", 1.0))
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                                  [helper.make_tensor_value_info("y", 1, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    """)
    assert out.startswith("LegatoError: Unsqueeze node 'u': attribute 'axes' must be INTS, "
                          "got FLOAT"), out


def test_a_dangling_input_below_opset_13_is_refused_before_the_version_converter():
    out = load_in_subprocess("""
        node = helper.make_node("Relu", ["nowhere"], ["y"], name="r")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                                  [helper.make_tensor_value_info("y", 1, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    """)
    assert "Relu node 'r': input 0 'nowhere' is not defined" in out, out


@pytest.mark.parametrize("binding", ["{'b': -2}", "{'x': (-1, 3)}", "{'b': 2 ** 62}"])
def test_negative_or_absurd_input_sizes_are_refused_before_shape_inference(binding):
    out = load_in_subprocess(f"""
        node = helper.make_node("Relu", ["x"], ["y"])
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, ["b", 3])],
                                  [helper.make_tensor_value_info("y", 1, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        shapes = {binding}
    """)
    assert out.startswith("LegatoError: input_shapes[") and \
        ("is negative" in out or "exceeds the limit" in out), out


SPLIT_CRASHING_SHAPE_INFERENCE = """
    # num_outputs differs from the outputs: onnx's Split inference indexes past its vector
    node = helper.make_node("Split", ["x"], ["a", "b"], name="s", axis=0, num_outputs=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [4])],
                              [helper.make_tensor_value_info(n, 1, None) for n in "ab"])
    crashing = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    relu = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([relu], "g", [helper.make_tensor_value_info("x", 1, [4])],
                              [helper.make_tensor_value_info("y", 1, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    try:
        lonnx.load(crashing)
    except LegatoError as err:
        print("first:", err)
"""


def test_a_crash_in_onnx_shape_inference_is_a_legato_error_and_the_next_load_works():
    # without the up-front check of Split, onnx's shape inference sees the model and dies
    out = load_in_subprocess("from legato.frontends.onnx import check as onnx_check\n"
                             "onnx_check.VALUE_CHECKS.clear()\n"
                             + textwrap.dedent(SPLIT_CRASHING_SHAPE_INFERENCE))
    first, second = out.splitlines()
    assert first.startswith("first: onnx's shape inference crashed on this model (signal "
                            "SIGABRT)") or "do not infer" in first, out
    assert second == "LOADED", out


def test_a_split_whose_num_outputs_differs_from_its_outputs_is_named():
    out = load_in_subprocess(SPLIT_CRASHING_SHAPE_INFERENCE)
    assert out.splitlines() == ["first: Split node 's': attribute 'num_outputs' = 1 differs "
                                "from the 2 outputs", "LOADED"], out


def test_onnx_checks_run_from_many_threads_at_once():
    from concurrent.futures import ThreadPoolExecutor
    old = model([helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0])], [tensor("x", [2])],
                [tensor("y", None)], opset=9)
    with ThreadPoolExecutor(8) as pool:
        shapes = list(pool.map(lambda _: lonnx.load(old).main.results[0].type.shape, range(32)))
    assert shapes == [(1, 2)] * 32


def test_a_forked_child_starts_its_own_onnx_worker():
    old = model([helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0])], [tensor("x", [2])],
                [tensor("y", None)], opset=9)
    lonnx.load(old)   # the parent's worker runs
    from legato.frontends.onnx.isolate import _WORKER
    parent = _WORKER.process
    with _WORKER.lock:   # held at fork time, as by another thread of the parent
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                shape = lonnx.load(old).main.results[0].type.shape
                ok = shape == (1, 2) and _WORKER.process is not parent
            finally:
                os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60   # a child stuck on the parent's lock never ends
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0
    assert _WORKER.process is parent


def test_the_version_converter_gets_large_initializers_back_by_name():
    w = numpy_helper.from_array(np.arange(5000, dtype=np.float32).reshape(50, 100), "w")
    old = model([helper.make_node("Unsqueeze", ["w"], ["y"], axes=[0])], [], [tensor("y", None)],
                [w], opset=9)
    mod = lonnx.load(old)
    np.testing.assert_array_equal(mod.main.calls[0].inputs[0].data, numpy_helper.to_array(w))


def test_shape_inference_time_and_memory_do_not_grow_with_declared_sizes():
    # onnx's data propagation materializes 1-D shape data: a (2**40,) tensor took 13 s and
    # more than 2 GiB before the importer stopped asking for it
    out = load_in_subprocess("""
        from onnx import numpy_helper
        import numpy as np
        nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=0),
                 helper.make_node("Cast", ["m"], ["y"], to=10)]
        axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2 ** 40, 3])],
                                  [helper.make_tensor_value_info("y", 10, None)], [axes])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    """)
    assert out.startswith("LOADED"), out


def test_names_that_are_not_utf8_are_refused_or_ignored():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    data = model([node], [tensor("x", [2])], [tensor("y", None)]).SerializeToString()
    damaged = onnx.ModelProto.FromString(data.replace(b"Relu", b"R\xffel"))
    with pytest.raises(LegatoError, match=r"node #0: b'R\\xffel' is not valid UTF-8"):
        lonnx.load(damaged)
    unnamed = onnx.ModelProto.FromString(data.replace(b"\x12\x01g", b"\x12\x01\xd3"))
    assert unnamed.graph.name == b"\xd3"   # the graph's own name is never read
    assert [c.op for c in lonnx.load(unnamed).main.calls] == ["nn.relu"]


def test_constant_operands_of_the_wrong_size_or_type_are_named():
    pad = helper.make_node("Pad", ["x", "pads", "value"], ["y"], name="p")
    inits = [numpy_helper.from_array(np.array([0, 1], np.int64), "pads"),
             numpy_helper.from_array(np.zeros(0, np.float32), "value")]
    bad = model([pad], [tensor("x", [2])], [tensor("y", None)], inits)
    with pytest.raises(LegatoError, match="Pad node 'p': input 2 must hold one value, not 0"):
        lonnx.load(bad)


def test_a_negative_declared_dimension_is_refused():
    with pytest.raises(LegatoError, match=r"input 'x' dimension 0: size -4 is negative"):
        lonnx.load(relu_model((-4, 3)))


# --- attributes, inputs and input_shapes of the wrong kind ----------------------------------

@pytest.mark.parametrize("op, name, value, message", [
    ("LayerNormalization", "axis", [1], "attribute 'axis' must be INT, got INTS"),
    ("LayerNormalization", "epsilon", "small", "attribute 'epsilon' must be FLOAT, got STRING"),
    ("Gemm", "transB", 1.0, "attribute 'transB' must be INT, got FLOAT"),
    ("Transpose", "perm", numpy_helper.from_array(np.array([1, 0])),
     "attribute 'perm' must be INTS, got TENSOR"),
    ("Concat", "axis", [0.5], "attribute 'axis' must be INT, got FLOATS"),
    ("Relu", "alpha", 1.0, "attribute 'alpha' is not an attribute of Relu"),
])
def test_attributes_are_checked_against_the_operator_schema(op, name, value, message):
    inputs = {"LayerNormalization": ["x", "g"], "Gemm": ["x", "x"]}.get(op, ["x"])
    node = with_attribute(helper.make_node(op, inputs, ["y"], name="n"), name, value)
    g = numpy_helper.from_array(np.ones(2, np.float32), "g")
    bad = model([node], [tensor("x", [2, 2])], [tensor("y", None)], [g])
    with pytest.raises(LegatoError, match=f"{op} node 'n': {message}"):
        lonnx.load(bad)


def test_a_missing_required_attribute_and_an_undecodable_string_are_named():
    split = helper.make_node("Squeeze", ["x"], ["y"], name="s")   # opset 11: axes optional
    pool = helper.make_node("MaxPool", ["x"], ["y"], name="p")    # kernel_shape required
    with pytest.raises(LegatoError, match="MaxPool node 'p': required attribute "
                                          "'kernel_shape' is missing"):
        lonnx.load(model([pool], [tensor("x", [1, 1, 4, 4])], [tensor("y", None)]))
    assert lonnx.load(model([split], [tensor("x", [1, 3])], [tensor("y", None)], opset=11))
    gelu = helper.make_node("Gelu", ["x"], ["y"], name="g", approximate="tanh")
    gelu.attribute[0].s = b"\xff\xfe"
    with pytest.raises(LegatoError, match="Gelu node 'g': attribute 'approximate' is not "
                                          "valid UTF-8"):
        lonnx.load(model([gelu], [tensor("x", [2])], [tensor("y", None)], opset=20))


@pytest.mark.parametrize("op, inputs, message", [
    ("Add", ["x", ""], r"input 1 \(B\) is required but missing"),
    ("LayerNormalization", ["x", ""], r"input 1 \(Scale\) is required but missing"),
    ("Add", ["x"], "inputs: 1 given, the schema takes 2"),
    ("Relu", ["x", "x"], "inputs: 2 given, the schema takes 1"),
])
def test_missing_inputs_are_named(op, inputs, message):
    bad = model([helper.make_node(op, inputs, ["y"], name="n")], [tensor("x", [2, 2])],
                [tensor("y", None)])
    with pytest.raises(LegatoError, match=f"{op} node 'n': {message}"):
        lonnx.load(bad)


def test_a_converter_reads_required_inputs_through_one_checked_accessor():
    from legato.frontends.onnx.convert import Node
    proto = helper.make_node("Add", ["x", ""], ["y"], name="n")
    node = Node(None, proto, [object(), None], {}, 18)
    assert node.input(1) is None and node.input(5) is None
    with pytest.raises(LegatoError, match=r"Add node 'n': input 1 is required but missing"):
        node.arg(1)


def test_optional_inputs_left_empty_are_accepted():
    clip = helper.make_node("Clip", ["x", "", "hi"], ["y"], name="c")
    hi = numpy_helper.from_array(np.array(1.0, np.float32), "hi")
    mod = lonnx.load(model([clip], [tensor("x", [3])], [tensor("y", None)], [hi]))
    assert [c.op for c in mod.main.calls] == ["clip"]


@pytest.mark.parametrize("shapes, message", [
    ({"batch": 2.0}, r"input_shapes\['batch'\]: shape 2.0 is not a sequence of sizes"),
    ({"batch": "2"}, r"input_shapes\['batch'\]: shape '2' is not a sequence of sizes"),
    ({"batch": True}, r"input_shapes\['batch'\]: shape True is not a sequence of sizes"),
    ({"batch": None}, r"input_shapes\['batch'\]: shape None is not a sequence of sizes"),
    ({"x": (2.5, 3)}, r"input_shapes\['x'\] dimension 0: size 2.5 is not an integer"),
    ({"x": (2, 3, 4)}, r"input 'x' has rank 2, the bound shape \[2, 3, 4\] rank 3"),
    ({"x": 2}, r"input 'x' needs a shape"),
    ({"x": {2: 0, 3: 0}}, r"input_shapes\['x'\]: shape \{2: 0, 3: 0\} is not a sequence"),
    ({"batch": (2, 3)}, r"dimension 0 of input 'x' needs a size"),
    ({"batch": 2 ** 41}, r"size 2199023255552 exceeds the limit"),
    ([("batch", 2)], "input_shapes must be a mapping"),
])
def test_wrongly_typed_input_shapes_are_named(shapes, message):
    with pytest.raises(LegatoError, match=message):
        lonnx.load(relu_model(), shapes)


def test_numpy_sizes_are_accepted_in_input_shapes():
    mod = lonnx.load(relu_model(), {"batch": np.int64(4)})
    assert mod.main.params[0].type.shape == (4, 3)


def test_outputs_may_leave_their_type_out_but_inputs_may_not():
    relu = helper.make_node("Relu", ["x"], ["y"])
    untyped = onnx.ValueInfoProto(name="y")
    mod = lonnx.load(model([relu], [tensor("x", [2])], [untyped]))
    assert mod.main.results[0].type.shape == (2,)
    sequence = helper.make_tensor_sequence_value_info("y", F, None)
    with pytest.raises(LegatoError, match="graph output 'y' is not a tensor"):
        lonnx.load(model([relu], [tensor("x", [2])], [sequence]))
    with pytest.raises(LegatoError, match="input 'x': ONNX element type UNDEFINED"):
        lonnx.load(model([relu], [tensor("x", [2], 0)], [untyped]))


def test_a_graph_out_of_order_or_reassigning_a_name_is_refused():
    nodes = [helper.make_node("Relu", ["h"], ["y"], name="second"),
             helper.make_node("Relu", ["x"], ["h"], name="first")]
    with pytest.raises(LegatoError, match="Relu node 'second': input 0 'h' is not defined by "
                                          "an earlier node"):
        lonnx.load(model(nodes, [tensor("x", [2])], [tensor("y", None)]))
    nodes = [helper.make_node("Relu", ["x"], ["x"], name="again")]
    with pytest.raises(LegatoError, match="Relu node 'again': output 'x' is already defined"):
        lonnx.load(model(nodes, [tensor("x", [2])], [tensor("x", None)]))


def test_a_path_that_is_not_a_regular_file_is_refused_without_reading(tmp_path):
    os.mkfifo(tmp_path / "pipe.onnx")   # reading it would block forever
    with pytest.raises(LegatoError, match="pipe.onnx is not a regular file"):
        lonnx.load(tmp_path / "pipe.onnx")
    with pytest.raises(LegatoError, match="an ONNX model is a path or an onnx.ModelProto, "
                                          "not bytes"):
        lonnx.load(b"\x08\x07")


# --- sizes a model lies about ---------------------------------------------------------------

def add_with(initializer):
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", [1])],
                 [tensor("y", None)], [initializer])


def test_a_16_gib_initializer_over_a_few_bytes_is_refused_before_allocating():
    huge = TensorProto(name="w", data_type=F, dims=[1 << 32, 1], raw_data=bytes(16))
    with pytest.raises(LegatoError, match=r"initializer 'w': declares shape \[4294967296, 1\] "
                                          r"of float32 \(17179869184 bytes\) but holds 16"):
        lonnx.load(add_with(huge))
    typed = TensorProto(name="w", data_type=F, dims=[1 << 32], float_data=[1.0, 2.0])
    with pytest.raises(LegatoError, match=r"\(4294967296 values\) but holds 2 values"):
        lonnx.load(add_with(typed))


def test_negative_and_absurd_tensor_dims_are_refused():
    negative = TensorProto(name="w", data_type=F, dims=[-2], raw_data=bytes(8))
    with pytest.raises(LegatoError, match="initializer 'w' dimension 0: size -2 is negative"):
        lonnx.load(add_with(negative))
    absurd = TensorProto(name="w", data_type=F, dims=[1 << 30] * 3)
    with pytest.raises(LegatoError, match="initializer 'w': shape .* elements, more than"):
        lonnx.load(add_with(absurd))


def test_a_huge_declared_input_is_imported_without_allocating():
    # 16 GiB of float32 declared: the importer only records the type
    mod = lonnx.load(relu_model((1 << 32, 1)))
    assert mod.main.params[0].type.shape == (1 << 32, 1)


def test_converters_refuse_to_build_huge_constants_from_declared_shapes():
    pool = helper.make_node("MaxPool", ["x"], ["y", "i"], name="p", kernel_shape=[2, 2])
    big = model([pool], [tensor("x", [1, 1, 1 << 16, 1 << 16])],
                [tensor("y", None), tensor("i", None, TensorProto.INT64)])
    with pytest.raises(LegatoError, match=r"MaxPool node 'p': MaxPool's Indices table would "
                                          r"be a constant of 4294967296 elements"):
        lonnx.load(big)
    reduce = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="r", keepdims=0)
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    empty = model([reduce], [tensor("x", [0, 1 << 30])], [tensor("y", None)], [axes])
    with pytest.raises(LegatoError, match=r"ReduceSum node 'r': the reduction of an empty "
                                          r"axis would be a constant of 1073741824 elements"):
        lonnx.load(empty)


# --- external data ----------------------------------------------------------------------------

def external_model(location="w.bin", offset=0, length=None, values=(1.0, 2.0)):
    w = TensorProto(name="w", data_type=F, dims=[len(values)], data_location=1)
    entries = {"location": location, "offset": str(offset),
               "length": str(4 * len(values) if length is None else length)}
    for key, value in entries.items():
        w.external_data.add(key=key, value=value)
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", [len(values)])],
                 [tensor("y", None)], [w])


def write_data(directory, values=(1.0, 2.0), name="w.bin"):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(np.array(values, np.float32).tobytes())


def weights(mod):
    return mod.main.calls[0].inputs[1].data.tolist()


def test_external_data_of_a_model_proto_is_read_from_base_dir_only(tmp_path, monkeypatch):
    write_data(tmp_path / "model")
    write_data(tmp_path, values=(7.0, 7.0))   # the current directory holds other data
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LegatoError, match="pass base_dir="):
        lonnx.load(external_model())
    proto = external_model()
    assert weights(lonnx.load(proto, base_dir=tmp_path / "model")) == [1.0, 2.0]
    assert proto.graph.initializer[0].data_location == 1   # the caller's model is unchanged


def test_external_data_of_a_path_is_read_next_to_the_file(tmp_path, monkeypatch):
    write_data(tmp_path / "model")
    onnx.save(external_model(), str(tmp_path / "model" / "m.onnx"))
    write_data(tmp_path, values=(7.0, 7.0))
    monkeypatch.chdir(tmp_path)
    assert weights(lonnx.load(tmp_path / "model" / "m.onnx")) == [1.0, 2.0]


@pytest.mark.parametrize("location, message", [
    ("../outside.bin", "resolves outside the model's directory"),
    ("sub/../../outside.bin", "resolves outside the model's directory"),
    ("/etc/passwd", "must be a relative path inside"),
    ("link.bin", "resolves outside the model's directory"),
    ("missing.bin", "'missing.bin': No such file"),
    ("sub", "is not a regular file"),
])
def test_external_data_outside_base_dir_is_refused(tmp_path, location, message):
    write_data(tmp_path / "model")
    write_data(tmp_path, name="outside.bin")
    (tmp_path / "model" / "sub").mkdir()
    os.symlink(tmp_path / "outside.bin", tmp_path / "model" / "link.bin")
    with pytest.raises(LegatoError, match=f"tensor 'w': .*{message}"):
        lonnx.load(external_model(location), base_dir=tmp_path / "model")


def test_a_symlink_that_stays_inside_base_dir_is_followed(tmp_path):
    write_data(tmp_path / "model" / "data")
    os.symlink(tmp_path / "model" / "data" / "w.bin", tmp_path / "model" / "link.bin")
    assert weights(lonnx.load(external_model("link.bin"), base_dir=tmp_path / "model")) == \
        [1.0, 2.0]


@pytest.mark.parametrize("offset, length, message", [
    (4, None, r"needs bytes 4 to 12 of 'w.bin', which has 8"),
    (0, 1 << 34, r"length 17179869184 does not match the declared shape \[2\] \(8 bytes\)"),
    ("-1", None, r"offset '-1' is not a non-negative integer"),
])
def test_external_data_sizes_must_match_the_file_and_the_dims(tmp_path, offset, length, message):
    write_data(tmp_path)
    with pytest.raises(LegatoError, match=message):
        lonnx.load(external_model(offset=offset, length=length), base_dir=tmp_path)


# --- no quadratic behaviour ---------------------------------------------------------------------

def chain(n):
    nodes = [helper.make_node("Relu", [f"h{i}"], [f"h{i + 1}"]) for i in range(n)]
    return model(nodes, [tensor("h0", [2])], [tensor(f"h{n}", None)])


def test_import_time_grows_linearly_with_the_graph():
    small, large = chain(500), chain(5000)
    lonnx.load(small)
    timings = []
    for proto in (small, large):
        start = time.perf_counter()
        lonnx.load(proto)
        timings.append(time.perf_counter() - start)
    assert timings[1] < 40 * timings[0] + 0.5, timings   # 10x the nodes; quadratic is 100x


# --- converters check what onnx's shape inference may let through ---------------------------

def convert(op, inputs, **attrs):
    """Run the converter of `op` directly: shapes (tuples) become graph inputs, arrays
    constants, None an absent input."""
    import legato
    from legato.frontends.onnx.convert import CONVERTERS, Node
    from legato.ir import Const
    b = legato.GraphBuilder()
    values = [None if v is None else b.input(f"i{k}", v) if isinstance(v, tuple)
              else Const.of(np.asarray(v)) for k, v in enumerate(inputs)]
    outputs = ["y", "y2"] if op == "Split" else ["y"]
    proto = helper.make_node(op, [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)],
                             outputs, name="n")
    return CONVERTERS[op].fn(Node(b, proto, values, attrs, 23))


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("Reshape", [(2, 3), np.array([0, 0, 0])], {},
     r"shape \[0, 0, 0\] copies a dimension \(0\) that the rank-2 input does not have"),
    ("Constant", [], {}, "needs exactly one value attribute, has 0"),
    ("Pad", [(2,), np.array([0, 1, 1])], {}, r"pads \[0, 1, 1\] must hold two values for each"),
    ("Pad", [(2,), np.array([0, 1]), np.zeros(2, np.float32)], {},
     "input 2 must hold one value, not 2"),
    ("Reshape", [(2, 3), np.array([6.0])], {}, "input 1 must hold integers, not float64"),
    ("Conv", [(1, 1, 4, 4), (1, 1, 2, 2)], {"strides": [0, 1]},
     r"attribute 'strides' = \[0, 1\] must be 2 values of at least 1"),
    ("Conv", [(1, 1, 4, 4), (1, 1, 2, 2)], {"pads": [1, 1]},
     r"attribute 'pads' = \[1, 1\] must be 4 values of at least 0"),
    ("Conv", [(1, 1, 4, 4), (1, 1, 2, 2)], {"group": 0}, "attribute 'group' = 0 must be at "
                                                         "least 1"),
    ("MaxPool", [(1, 1, 4, 4)], {"kernel_shape": [0, 2]},
     r"kernel_shape \[0, 2\] does not fit an input of shape \[1, 1, 4, 4\]"),
    ("MaxPool", [(1, 4, 4)], {"kernel_shape": [2, 2]},
     r"kernel_shape \[2, 2\] does not fit an input of shape \[1, 4, 4\]"),
    ("GroupNormalization", [(1, 4, 2), (4,), (4,)], {"num_groups": 0},
     "attribute 'num_groups' = 0 must be at least 1"),
    ("Squeeze", [(1, 3, 1), np.zeros(0, np.int64)], {}, "empty axes are read differently"),
    ("DequantizeLinear", [(), np.float32(0.5), np.array([0, 1], np.int8)], {},
     "attribute 'axis' = 1 is out of range for an input of rank 0"),
    ("QuantizeLinear", [(2, 4), np.ones(4, np.float32)], {"block_size": -2},
     "attribute 'block_size' = -2 is negative"),
    ("GroupNormalization", [(1, 4, 2), np.ones((), np.float32), (4,)], {"num_groups": 2},
     r"scale of shape \[\] fits neither 4 channels nor 2 groups"),
    ("GroupNormalization", [(1, 4, 2), (3,), (3,)], {"num_groups": 3},
     r"scale of shape \[3\] fits neither 4 channels nor 3 groups"),
    ("Attention", [(1, 2, 8), (1, 2, 8), (1, 2, 8)], {},
     "attribute 'q_num_heads' = 0 must be at least 1"),
    ("Attention", [(1, 2, 2, 0), (1, 2, 2, 0), (1, 2, 2, 0)], {"softcap": 1.0},
     r"head size 0 leaves the default scale 1/sqrt\(head size\) undefined"),
    # the ONNX reference skips a NaN softcap, onnxruntime applies it: neither is agreed
    ("Attention", [(1, 2, 2, 4), (1, 2, 2, 4), (1, 2, 2, 4)], {"softcap": float("nan")},
     "softcap is NaN"),
    ("Attention", [(1, 2, 8), (1, 1, 2, 8), (1, 2, 8)], {"q_num_heads": 2},
     "Q, K and V must all be 3-D or all 4-D, not of ranks 3, 4, 3"),
    ("LayerNormalization", [(), (1,)], {}, "attribute 'axis' = -1 is out of range for an input "
                                           "of rank 0"),
    ("Split", [(4,)], {"num_outputs": 3}, "attribute 'num_outputs' = 3 differs from the 2 "
                                          "outputs"),
    ("Add", [(2,), None], {}, r"input 1 is required but missing"),
    # onnxruntime reads keepdims=-1 as false, legato read it as true: neither is agreed
    ("ReduceMean", [(2, 3), np.array([1])], {"keepdims": -1},
     "attribute 'keepdims' = -1 must be 0 or 1"),
    ("Gemm", [(2, 2), (2, 2)], {"transB": 2}, "attribute 'transB' = 2 must be 0 or 1"),
])
def test_converters_name_bad_values_that_reach_them(op, inputs, attrs, message):
    with pytest.raises(LegatoError, match=f"{op} node 'n': {message}"):
        convert(op, inputs, **attrs)



def run_pad(shape, pads, axes=None, mode="constant"):
    inputs = ["x", "pads", "value"] + (["axes"] if axes is not None else [])
    node = helper.make_node("Pad", inputs, ["y"], name="p", mode=mode)
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads"),
             numpy_helper.from_array(np.array(9.0, np.float32), "value")]
    if axes is not None:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    mod = lonnx.load(model([node], [tensor("x", list(shape))], [tensor("y", None)], inits))
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    import legato
    return x, legato.compile(mod, "cpu_ref")(x)


def test_negative_pads_may_remove_padding_as_well_as_data():
    # axis 0: two rows of padding in front, then two rows removed at the end: the input's
    # only row goes, one padding row stays (ONNX: size 1 + 2 - 2)
    _, y = run_pad((1, 3), [2, 0, -2, 0])
    np.testing.assert_array_equal(y, np.full((1, 3), 9.0, np.float32))
    x, y = run_pad((3, 2), [-1, 1, 0, 1])   # an ordinary crop and pad
    np.testing.assert_array_equal(y, np.pad(x, ((0, 0), (1, 1)), constant_values=9.0)[1:])


def test_pads_follow_the_order_of_their_axes():
    x, y = run_pad((2, 3), [1, 0, 0, 2], axes=[1, 0])
    np.testing.assert_array_equal(y, np.pad(x, ((0, 2), (1, 0)), constant_values=9.0))


def test_negative_pads_beyond_the_data_are_refused_where_nothing_defines_them():
    with pytest.raises(LegatoError, match=r"Pad node 'p': negative pads \[1, -2\] remove more "
                                          r"than the dims \[1\] hold"):
        run_pad((1,), [1, -2], mode="edge")
