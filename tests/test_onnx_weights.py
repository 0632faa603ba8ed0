"""Large initializers of an .onnx file are read from the file once, straight into their
arrays (legato.frontends.onnx.weights), with the same checks and results as before."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402
from legato.frontends.onnx.weights import MIN_MAPPED_BYTES  # noqa: E402
from legato.ir.errors import LegatoError  # noqa: E402


def matmul_model(weight: np.ndarray, bias: np.ndarray, raw_weight: bool = True):
    tensor = numpy_helper.from_array(weight, "w")
    if not raw_weight:
        tensor = helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel().tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Add", ["h", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, weight.shape[1]])],
        [tensor, numpy_helper.from_array(bias, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def weights():
    rng = np.random.default_rng(0)
    return rng.standard_normal((96, 64)).astype(np.float32), \
        rng.standard_normal(64).astype(np.float32)


def test_large_initializers_are_cut_out_of_the_parsed_message(tmp_path, weights):
    weight, bias = weights
    assert weight.nbytes >= MIN_MAPPED_BYTES > bias.nbytes
    path = tmp_path / "m.onnx"
    onnx.save(matmul_model(weight, bias), path)
    proto, _, mapped = onnx_frontend.read_model(path)
    try:
        by_name = {t.name: t for t in proto.graph.initializer}
        assert mapped.owns(by_name["w"]) and not by_name["w"].raw_data
        assert not mapped.owns(by_name["b"]) and by_name["b"].raw_data
        data = mapped.array(by_name["w"], "w")
    finally:
        mapped.close()
    np.testing.assert_array_equal(data, weight)
    assert not data.flags.writeable and data.flags.aligned and data.flags.owndata


def test_model_with_cut_out_weights_computes_the_same(tmp_path, weights):
    weight, bias = weights
    path = tmp_path / "m.onnx"
    onnx.save(matmul_model(weight, bias), path)
    mod = onnx_frontend.load(path)
    consts = {c.name: c for call in mod.main.calls for c in call.inputs
              if isinstance(c, legato.Const)}
    assert consts and not any(c.data.flags.writeable for c in consts.values())
    x = np.random.default_rng(1).standard_normal((2, 96)).astype(np.float32)
    for backend in ("cpu_ref", "c_kernels"):
        got = legato.compile(mod, backend=backend)(x)
        np.testing.assert_allclose(got, x @ weight + bias, rtol=1e-5, atol=1e-5)


def test_weights_in_typed_fields_and_lying_sizes_still_take_the_checked_path(tmp_path, weights):
    weight, bias = weights
    path = tmp_path / "typed.onnx"
    onnx.save(matmul_model(weight, bias, raw_weight=False), path)
    x = np.ones((2, 96), np.float32)
    np.testing.assert_allclose(legato.compile(onnx_frontend.load(path))(x),
                               x @ weight + bias, rtol=1e-5, atol=1e-4)
    model = matmul_model(weight, bias)
    model.graph.initializer[0].dims[0] = 97  # 97 x 64 floats promised, 96 x 64 present
    onnx.save(model, path)
    with pytest.raises(LegatoError, match=r"initializer 'w'.*declares shape \[97, 64\]"):
        onnx_frontend.load(path)


def test_a_file_that_does_not_scan_gets_protobufs_error(tmp_path, weights):
    path = tmp_path / "cut.onnx"
    data = matmul_model(*weights).SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(LegatoError, match="is not a readable ONNX model"):
        onnx_frontend.load(path)


def test_a_forged_mapped_location_is_read_as_ordinary_external_data(tmp_path, weights):
    model = matmul_model(*weights)
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "legato-mapped-weights:0000"), ("offset", "0"),
                       ("length", str(weights[0].nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    path = tmp_path / "forged.onnx"
    onnx.save(model, path)
    with pytest.raises(LegatoError, match="external data"):
        onnx_frontend.load(path)


def test_weights_read_before_the_graph_checks_give_the_same_module(tmp_path, weights, monkeypatch):
    # the mapped weights are read while the worker starts (before check_graph); the module
    # must be the one reading them during conversion gives
    from legato.frontends.onnx import importer
    from legato.ir.graph import print_module
    weight, bias = weights
    path = tmp_path / "m.onnx"
    onnx.save(matmul_model(weight, bias), path)
    early = onnx_frontend.load(path)
    with monkeypatch.context() as patch:
        patch.setattr(importer, "read_weights", lambda graph, mapped: {})
        late = onnx_frontend.load(path)
    assert print_module(early) == print_module(late)

