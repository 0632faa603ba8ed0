"""Quantized ONNX models as onnxruntime's quantization tool writes them (quantize_static in
both formats, per-tensor and per-channel, s8s8 and u8s8, with and without int32 biases;
quantize_dynamic), for a tiny transformers BERT and a small CNN, against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402
from legato.ir.errors import LegatoError  # noqa: E402

BACKENDS = ["cpu_ref", "c_kernels"]
VOCAB, BATCH, TOKENS = 64, 2, 8


def run_ort(model, feeds, optimize=True):
    """onnxruntime on one thread; `optimize=False` runs each Q/DQ node as written (no
    fusion into its int8 kernels), the float arithmetic a QDQ file spells out."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def bert():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32, initializer_range=0.1,
        attn_implementation="eager")
    model = transformers.BertModel(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

    mask = np.ones((BATCH, TOKENS), np.int64)
    mask[1, TOKENS - 3:] = 0

    def feeds(seed):
        ids = np.random.default_rng(seed).integers(4, VOCAB, (BATCH, TOKENS))
        return {"ids": ids, "mask": mask}
    return Hidden(), feeds


def cnn():
    """conv, relu, max and average pooling, a residual add, a concat, global average
    pooling and a linear layer."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1)
            self.a = nn.Conv2d(8, 8, 3, padding=1)
            self.b = nn.Conv2d(8, 4, 1)
            self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.fc = nn.Linear(12, 5)

        def forward(self, x):
            x = torch.relu(self.stem(x))
            x = nn.functional.max_pool2d(x, 2)
            x = torch.relu(self.a(x) + x)
            y = nn.functional.avg_pool2d(torch.relu(self.depthwise(x)), 2)
            x = torch.cat([nn.functional.avg_pool2d(self.b(x), 2), y[:, :8]], 1)
            return self.fc(x.mean((2, 3))[:, :12])

    def feeds(seed):
        data = np.random.default_rng(seed).standard_normal((2, 3, 16, 16))
        return {"x": data.astype(np.float32)}
    return Net().eval(), feeds


MODELS = {"bert": bert, "cnn": cnn}


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """(model, fmt, per_channel, activations, quantize_bias) -> (quantized model, feeds):
    each model exported once at opset 17, each quantization made once; `fmt` "dynamic"
    is quantize_dynamic."""
    torch = pytest.importorskip("torch")
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    root = tmp_path_factory.mktemp("quantized")
    exported, cache = {}, {}

    class Reader(CalibrationDataReader):
        def __init__(self, feeds):
            self.batches = iter([feeds(seed) for seed in range(1, 5)])

        def get_next(self):
            return next(self.batches, None)

    def get(name, fmt="QDQ", per_channel=True, activations="s8", quantize_bias=True):
        if name not in exported:
            module, feeds = MODELS[name]()
            path = root / f"{name}.onnx"
            example = feeds(0)
            with torch.no_grad():
                torch.onnx.export(module, tuple(torch.from_numpy(a) for a in example.values()),
                                  str(path), input_names=list(example), output_names=["y"],
                                  opset_version=17, dynamo=False)
            exported[name] = path, feeds
        key = name, fmt, per_channel, activations, quantize_bias
        if key not in cache:
            path, feeds = exported[name]
            target = root / ("_".join(map(str, key)) + ".onnx")
            if fmt == "dynamic":
                quantize_dynamic(str(path), str(target), weight_type=QuantType.QInt8)
            else:
                quantize_static(
                    str(path), str(target), Reader(feeds),
                    quant_format=getattr(QuantFormat, fmt), per_channel=per_channel,
                    activation_type=QuantType.QInt8 if activations == "s8" else
                    QuantType.QUInt8, weight_type=QuantType.QInt8,
                    extra_options={"QuantizeBias": quantize_bias})
            cache[key] = onnx.load(str(target)), feeds(0)
        return cache[key]
    return get


def steps(got, want, model):
    """|got - want| in quantization steps of the model's last QuantizeLinear (the grid
    its float output lies on)."""
    last = [n for n in model.graph.node if n.op_type == "QuantizeLinear"][-1]
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return np.abs(got - want) / float(init[last.input[1]])


# --- Q/DQ parameters of every shape ONNX allows --------------------------------------------

def dq_model(x, scale, zero, data_shape):
    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "s")]
    inputs = ["x", "s"]
    if zero is not None:
        inits.append(numpy_helper.from_array(np.asarray(zero, x.dtype), "z"))
        inputs.append("z")
    node = helper.make_node("DequantizeLinear", inputs, ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(
            "x", helper.np_dtype_to_tensor_dtype(x.dtype), data_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, data_shape)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dtype, scale, zero, shape", [
    ("int32", [0.25], 0, (6,)),            # onnxruntime's int32 bias: scale [1], zero point []
    ("int8", 0.5, [3], (2, 3)),
    ("uint8", [0.5], [7], ()),             # a [1] scale of a scalar keeps the scalar's shape
    ("int8", [0.5], None, (2, 3)),
    ("int8", [0.5, 0.25, 2.0], [1, -2, 0], (2, 3)),
])
def test_dequantize_accepts_every_parameter_shape_onnx_allows(dtype, scale, zero, shape):
    x = np.random.default_rng(0).integers(-100, 100, shape).astype(dtype)
    model = dq_model(x, scale, zero, shape)
    onnx.checker.check_model(model, full_check=True)
    want = run_ort(model, {"x": x})[0]
    got = legato.compile(onnx_frontend.load(model), "cpu_ref")(x)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_dequantize_refuses_a_per_axis_scale_with_a_scalar_zero_point():
    x = np.zeros((2, 3), np.int8)
    with pytest.raises(LegatoError, match=r"scale \[3\] and zero_point \[\] must each hold"):
        onnx_frontend.load(dq_model(x, [0.5, 0.25, 2.0], 0, (2, 3)))


# --- whole models ---------------------------------------------------------------------------

QDQ_VARIANTS = [(pc, act, qb) for pc in (True, False) for act in ("s8", "u8")
                for qb in (True, False)]


@pytest.mark.parametrize("per_channel, activations, quantize_bias", QDQ_VARIANTS)
def test_qdq_bert_imports_and_runs_as_written(quantized, per_channel, activations,
                                              quantize_bias):
    # onnxruntime's quantizer gives LayerNormalization's bias an int32 DequantizeLinear with
    # a [1] scale and a scalar zero point (was refused as mismatched shapes)
    model, feeds = quantized("bert", "QDQ", per_channel, activations, quantize_bias)
    want = run_ort(model, feeds, optimize=False)[0]
    got = legato.reference(onnx_frontend.load(model))(*feeds.values())   # nothing folded
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


STATIC_VARIANTS = [(pc, act, qb) for pc in (True, False) for act in ("s8", "u8")
                   for qb in (True, False)]


def within_one_step(got, want, model):
    """The fraction of output elements within one quantization step of onnxruntime's."""
    return float((steps(got, want, model) <= 1.001).mean())


@pytest.mark.parametrize("name", ["bert", "cnn"])
@pytest.mark.parametrize("per_channel, activations, quantize_bias", STATIC_VARIANTS)
def test_qoperator_models_match_onnxruntime(quantized, name, per_channel, activations,
                                            quantize_bias):
    # QLinearMatMul, QLinearConv and com.microsoft QLinearAdd/Mul/Softmax/Concat/
    # GlobalAveragePool/AveragePool onto qnn ops: the same integers as onnxruntime's kernels
    model, feeds = quantized(name, "QOperator", per_channel, activations, quantize_bias)
    want = run_ort(model, feeds)[0]
    module = onnx_frontend.load(model)
    if name == "bert":   # nothing left to fold: the module comes back as it is
        assert legato.fold_qdq(module) == (module, False)
    for backend in BACKENDS:
        got = legato.compile(module, backend)(*feeds.values())
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=backend)


@pytest.mark.parametrize("name", ["bert", "cnn"])
def test_dynamically_quantized_models_match_onnxruntime(quantized, name):
    model, feeds = quantized(name, "dynamic")
    want = run_ort(model, feeds)[0]
    module = onnx_frontend.load(model)
    for backend in BACKENDS:
        got = legato.compile(module, backend)(*feeds.values())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=backend)


@pytest.mark.parametrize("per_channel, activations, quantize_bias", STATIC_VARIANTS[::3])
def test_qdq_cnn_imports_and_runs_as_written(quantized, per_channel, activations,
                                             quantize_bias):
    model, feeds = quantized("cnn", "QDQ", per_channel, activations, quantize_bias)
    want = run_ort(model, feeds, optimize=False)[0]
    got = legato.reference(onnx_frontend.load(model))(*feeds.values())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --- QDQ folded into qnn ops ----------------------------------------------------------------

FOLDED = {"bert": {"qnn.matmul", "qnn.add", "qnn.multiply", "qnn.softmax", "take (int8)"},
          "cnn": {"qnn.add", "qnn.avg_pool2d", "concat (int8)", "nn.max_pool2d (int8)"}}


@pytest.mark.parametrize("name", ["bert", "cnn"])
@pytest.mark.parametrize("per_channel, activations, quantize_bias", STATIC_VARIANTS)
def test_qdq_models_fold_and_match_onnxruntimes_int8_kernels(quantized, name, per_channel,
                                                              activations, quantize_bias):
    model, feeds = quantized(name, "QDQ", per_channel, activations, quantize_bias)
    want = run_ort(model, feeds)[0]
    module = onnx_frontend.load(model)
    report = legato.fold_qdq.explain(module)
    assert FOLDED[name] <= set(report.folded), report.text()
    if name == "bert":   # layer norms stay float between their dequantize and quantize
        assert report.not_folded["nn.layer_norm", "no qnn op computes it on integers"] > 0
    if name == "cnn":   # a float bias (QuantizeBias off) is quantized to int32, as
        # onnxruntime does when it fuses them (both were kept float: up to 4 steps off)
        assert {"qnn.conv2d", "qnn.linear"} <= set(report.folded), report.text()
    for backend in BACKENDS:
        compiled = legato.compile(module, backend)
        assert dict(compiled.report.qdq.folded) == dict(report.folded)
        got = compiled(*feeds.values())
        assert within_one_step(got, want, model) == 1.0, backend
        if name == "bert":   # the same integers as onnxruntime's fused kernels
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=backend)
        # the CNN: onnxruntime runs some of its convs float (on the dequantized data), where
        # legato folds every one, so an element now and then is one step away


def qdq_product_model(activation, dtype, per_channel):
    """DequantizeLinear -> MatMul -> activation -> QuantizeLinear -> DequantizeLinear, as a
    QDQ file spells one quantized linear layer."""
    rng = np.random.default_rng(3)
    zero = 3 if dtype == "int8" else 128
    inits = {"xs": np.array(0.02, np.float32), "xz": np.array(zero, dtype),
             "w": rng.integers(-128, 128, (24, 8)).astype(np.int8),
             "ws": (rng.uniform(0.005, 0.02, 8) if per_channel else
                    np.array(0.01)).astype(np.float32),
             "wz": np.zeros(8 if per_channel else (), np.int8),
             "ys": np.array(0.03, np.float32), "yz": np.array(zero - 10, dtype),
             "lo": np.array(-0.5, np.float32), "hi": np.array(1.5, np.float32)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=1),
             helper.make_node("MatMul", ["xf", "wf"], ["p"])]
    if activation == "Relu":
        nodes.append(helper.make_node("Relu", ["p"], ["a"]))
    else:
        nodes.append(helper.make_node("Clip", ["p", "lo", "hi"], ["a"]))
    nodes += [helper.make_node("QuantizeLinear", ["a", "ys", "yz"], ["q"]),
              helper.make_node("DequantizeLinear", ["q", "ys", "yz"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(
            "x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [4, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    return model, {"x": rng.integers(lo, hi, (4, 24)).astype(dtype)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("activation", ["Relu", "Clip"])
@pytest.mark.parametrize("dtype, per_channel", [("uint8", True), ("int8", False)])
def test_relu_and_clip_fold_into_the_output_range(backend, activation, dtype, per_channel):
    model, feeds = qdq_product_model(activation, dtype, per_channel)
    module = onnx_frontend.load(model)
    report = legato.fold_qdq.explain(module)
    assert dict(report.folded) == {"qnn.matmul": 1}, report.text()
    folded, modified = legato.fold_qdq(module)
    ops = [c.op for c in folded.main.calls]
    assert modified and "nn.relu" not in ops and "clip" not in ops and "matmul" not in ops
    want = run_ort(model, feeds)[0]
    got = legato.compile(module, backend)(*feeds.values())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_a_weight_quantized_along_the_wrong_axis_stays_float_and_says_why():
    model, feeds = qdq_product_model("Relu", "uint8", True)
    model.graph.node[1].attribute[0].i = 0      # per channel along the 24 rows of w
    model.graph.initializer[3].CopyFrom(numpy_helper.from_array(
        np.full(24, 0.01, np.float32), "ws"))
    model.graph.initializer[4].CopyFrom(numpy_helper.from_array(np.zeros(24, np.int8), "wz"))
    report = legato.fold_qdq.explain(onnx_frontend.load(model))
    assert not report.folded
    assert ("matmul", "b is quantized per channel along axis 0, which qnn.matmul does not "
            "take") in report.not_folded, report.text()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_a_quantized_pad_value_is_folded_at_import(backend, fmt):
    # onnxruntime's quantizer quantizes Pad's constant value (QuantizeLinear of a Constant,
    # then DequantizeLinear in QDQ): it must fold to a constant (was "input 2 must be a
    # constant"), as in MobileNetV2 and EfficientNet from transformers
    x = np.random.default_rng(4).integers(0, 256, (1, 2, 3, 3)).astype(np.uint8)
    inits = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
             "s": np.array(0.05, np.float32), "z": np.array(100, np.uint8)}
    nodes = [helper.make_node("Constant", [], ["v"], value=numpy_helper.from_array(
                 np.array(-1.0, np.float32))),
             helper.make_node("QuantizeLinear", ["v", "s", "z"], ["vq"])]
    if fmt == "QDQ":
        nodes += [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
                  helper.make_node("DequantizeLinear", ["vq", "s", "z"], ["vf"]),
                  helper.make_node("Pad", ["xf", "pads", "vf"], ["y"])]
        out = TensorProto.FLOAT
    else:
        nodes.append(helper.make_node("Pad", ["x", "pads", "vq"], ["y"]))
        out = TensorProto.UINT8
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.UINT8, x.shape)], [helper.make_tensor_value_info("y", out, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = run_ort(model, {"x": x})[0]
    got = legato.compile(onnx_frontend.load(model), backend)(x)
    np.testing.assert_array_equal(got, want)


def test_partitioned_compile_folds_too():
    model, feeds = qdq_product_model("Relu", "uint8", True)
    compiled = legato.compile(onnx_frontend.load(model), ["c_kernels", "cpu_ref"])
    np.testing.assert_allclose(compiled(*feeds.values()), run_ort(model, feeds)[0], rtol=0,
                               atol=1e-6)
    assert compiled.report.per_backend["c_kernels"].get("qnn.matmul") == 1


def test_compile_report_and_show_count_what_folded(tmp_path):
    from legato.show import graph
    model, feeds = qdq_product_model("Clip", "int8", False)
    module = onnx_frontend.load(model)
    report = legato.compile(module, "cpu_ref").report
    assert "folded QDQ into qnn.matmul x1" in report.summary()
    assert "QDQ regions before legalization" in str(report)
    assert "QDQ folded into qnn.matmul x1" in graph(module, "cpu_ref").after.title
