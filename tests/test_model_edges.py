"""Edges real models reach that legato's own examples did not: float16 programs through
`legato run`, qnn scales that cannot be right, pooling windows larger than their input,
float64 constant subgraphs on emitting backends, and very wide concats."""
import numpy as np
import pytest

import legato
from legato.cli.commands import main


def float16_onnx(path):
    """A float16 MatMul -> Relu -> LayerNormalization -> Softmax model."""
    pytest.importorskip("onnx")
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.2).astype(np.float16), "w"),
               numpy_helper.from_array(np.ones(64, np.float16), "g"),
               numpy_helper.from_array(np.zeros(64, np.float16), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "b"], ["n"], axis=-1),
             helper.make_node("Softmax", ["n"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [8, 64])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_run_float16_model_uses_the_float16_tolerance(tmp_path, capsys, backend_factory):
    path = float16_onnx(tmp_path / "half.onnx")
    assert main(["run", path, "-b", "c_kernels"]) == 0  # float16 rounding differs by ulps of 1e-3
    assert "float16[8, 64]" in capsys.readouterr().out
    backend_factory({"backend": "badexp16", "fallback": "cpu_ref", "legal": {"exp": {}}},
                    kernels={"exp": lambda a: np.exp(a * 1.5).astype(a.dtype)})
    assert main(["run", path, "-b", "badexp16"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH (tolerance" in out and "first differing call: " in out


# --- qnn scales that have no quantized value --------------------------------------------

def _quant_call(b, op, scale):
    """A call of `op` whose (first divided-by) scale constant is `scale`."""
    s, z8 = b.const(np.float32(scale)), b.const(np.int8(0))
    one = b.const(np.float32(1.0))
    if op == "qnn.quantize":
        return b.call(op, b.input("x", (2, 3), "float32"), s, z8)
    if op == "qnn.dequantize":
        return b.call(op, b.input("q", (2, 3), "int8"), s, z8)
    x, w = b.input("x", (1, 2, 4, 4), "int8"), b.const(np.ones((3, 2, 3, 3), np.int8))
    return b.call(op, x, one, z8, w, one, z8, s, z8)  # out_scale: the one divided by


@pytest.mark.parametrize("op", ["qnn.quantize", "qnn.dequantize", "qnn.conv2d"])
@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
def test_qnn_refuses_non_finite_scales(op, scale):
    with pytest.raises(legato.LegatoError, match=rf"{op}: input \d \(\w*scale\) holds {scale}"):
        _quant_call(legato.GraphBuilder(), op, scale)


def test_qnn_refuses_zero_scales_it_divides_by_and_keeps_the_defined_ones():
    for op in ("qnn.quantize", "qnn.conv2d"):
        with pytest.raises(legato.LegatoError, match=rf"{op}: .* holds 0.0 .* finite and nonzero"):
            _quant_call(legato.GraphBuilder(), op, 0.0)
    b = legato.GraphBuilder()
    x = b.input("x", (4,), "float32")
    q = b.call("qnn.quantize", x, b.const(np.float32(-0.5)), b.const(np.int8(3)))
    zeroed = b.call("qnn.dequantize", q, b.const(np.float32(0.0)), b.const(np.int8(3)))
    module = b.build(b.call("qnn.dequantize", q, b.const(np.float32(-0.5)), b.const(np.int8(3))), zeroed)
    data = np.array([1.3, -2.6, 0.25, 100.0], np.float32)
    want = (np.clip(np.round(data / -0.5) + 3, -128, 127) - 3) * -0.5  # ONNX's definition
    for backend in ("cpu_ref", "c_kernels"):
        back, zero = legato.compile(module, backend=backend)(data)
        np.testing.assert_array_equal(back, want.astype(np.float32))
        np.testing.assert_array_equal(zero, np.zeros(4, np.float32))


def test_qnn_nan_scale_refused_at_onnx_import(tmp_path):
    pytest.importorskip("onnx")
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from legato.frontends import onnx as lonnx
    for node_type, dtype in (("QuantizeLinear", TensorProto.FLOAT), ("DequantizeLinear", TensorProto.INT8)):
        graph = helper.make_graph(
            [helper.make_node(node_type, ["x", "s", "z"], ["y"])], "g",
            [helper.make_tensor_value_info("x", dtype, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
            [numpy_helper.from_array(np.array(np.nan, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")])
        path = tmp_path / f"{node_type}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        op = "qnn.quantize" if node_type == "QuantizeLinear" else "qnn.dequantize"
        with pytest.raises(legato.LegatoError, match=rf"{op}: input 1 \(scale\) holds nan at index 0"):
            lonnx.load(str(path))


# --- ceil-mode pooling windows larger than their input ----------------------------------

# (kind, arguments): windows larger than the (padded) 7 x 7 map that ceil mode still takes
BIG_WINDOWS = [("avg", dict(kernel_size=1280, ceil_mode=True)),  # EfficientNet's pooler
               ("avg", dict(kernel_size=10, stride=9, padding=2, ceil_mode=True)),
               ("avg", dict(kernel_size=10, stride=9, padding=2, ceil_mode=True,
                            count_include_pad=False)),
               ("avg", dict(kernel_size=(9, 3), stride=(8, 2), padding=1, ceil_mode=True)),
               ("max", dict(kernel_size=1280, ceil_mode=True)),
               ("max", dict(kernel_size=4, stride=9, padding=1, dilation=3, ceil_mode=True))]


@pytest.fixture(scope="module")
def big_window_pools():
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as ltorch

    class Pools(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pools = torch.nn.ModuleList(
                (torch.nn.AvgPool2d if kind == "avg" else torch.nn.MaxPool2d)(**kw)
                for kind, kw in BIG_WINDOWS)

        def forward(self, x):
            F = torch.nn.functional  # and the paths through 3-d pooling and torch's indices
            return tuple(pool(x) for pool in self.pools) + (
                F.max_pool2d(x, 1280, ceil_mode=True, return_indices=True)[1],
                F.max_pool3d(x[:, None], (2, 1280, 9), (2, 1280, 8), ceil_mode=True),
                F.avg_pool1d(x[0], 1280, ceil_mode=True))

    x = torch.randn(2, 3, 7, 7, generator=torch.Generator().manual_seed(0))
    model = Pools()
    with torch.no_grad():
        want = [y.numpy() for y in model(x)]
    return ltorch.load(model, (x,)), x.numpy(), want


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_ceil_mode_pools_larger_than_the_map_match_eager(big_window_pools, backend):
    module, x, want = big_window_pools
    got = legato.compile(module, backend=backend)(x)
    assert [g.shape for g in got] == [w.shape for w in want]
    names = [f"{kind} {kw}" for kind, kw in BIG_WINDOWS] + ["indices", "3-d", "1-d"]
    for name, g, w in zip(names, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_ceil_mode_pools_larger_than_the_map_match_onnxruntime(tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from onnx import TensorProto, helper
    from legato.frontends import onnx as lonnx
    nodes = [("AveragePool", dict(kernel_shape=[1280, 1280], strides=[1280, 1280])),
             ("AveragePool", dict(kernel_shape=[10, 10], strides=[9, 9], pads=[2, 2, 2, 2],
                                  count_include_pad=1)),
             ("AveragePool", dict(kernel_shape=[10, 3], strides=[9, 2], pads=[1, 1, 1, 1])),
             ("MaxPool", dict(kernel_shape=[1280, 1280], strides=[1280, 1280])),
             ("MaxPool", dict(kernel_shape=[4, 4], strides=[9, 9], dilations=[3, 3],
                              pads=[1, 1, 1, 1])),
             ("LpPool", dict(kernel_shape=[10, 3], strides=[9, 2], pads=[1, 1, 1, 1], p=3))]
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], [f"y{i}"], ceil_mode=1, **kw) for i, (op, kw) in enumerate(nodes)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 7])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(len(nodes))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    path = str(tmp_path / "pools.onnx")
    onnx.save(model, path)
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 7)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    module = lonnx.load(path)
    for backend in ("cpu_ref", "c_kernels"):
        got = legato.compile(module, backend=backend)(x)
        for (op, kw), g, w in zip(nodes, got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{op} {kw} {backend}")


def test_window_too_large_even_for_ceil_mode_is_refused():
    b = legato.GraphBuilder()
    x = b.input("x", (1, 1, 7, 7))
    with pytest.raises(legato.LegatoError, match="does not fit input 7 .*stride above the 3 cells"):
        b.call("nn.avg_pool2d", x, pool_size=[10, 10], strides=[2, 2], ceil_mode=True)


def test_efficientnet_pooler_at_its_published_form():
    """transformers' EfficientNetModel pools its last map with AvgPool2d(hidden_dim,
    ceil_mode=True): 1280 over 7 x 7 at the published size, here 128 over 8 x 8."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from legato.frontends import torch as ltorch
    config = transformers.EfficientNetConfig(
        image_size=32, width_coefficient=0.1, depth_coefficient=0.1, hidden_dim=128,
        kernel_sizes=[3, 3], in_channels=[32, 16], out_channels=[16, 24], strides=[1, 2],
        num_block_repeats=[1, 1], expand_ratios=[1, 6], depthwise_padding=[])
    torch.manual_seed(0)
    model = transformers.EfficientNetModel(config).eval()
    with torch.no_grad():  # weights with some spread: the default init shrinks to 1e-28
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.ndim == 1 else 0.0))
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        want = model(x)
    assert model.pooler.kernel_size == 128 > want.last_hidden_state.shape[-1]
    module = ltorch.load(model, (x,))
    for backend in ("cpu_ref", "c_kernels"):
        hidden, pooled = legato.compile(module, backend=backend)(x.numpy())
        for got, ref in ((hidden, want.last_hidden_state), (pooled, want.pooler_output)):
            ref = ref.numpy()
            assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))
    text = legato.compile(module, backend="tosa_custom").artifact
    assert text.count("tosa.avg_pool2d") == 1  # the pooler, one TOSA pool over the map


# --- constant subgraphs folded before emission ------------------------------------------

def float64_table_module():
    """x + cast(sin(arange / 7) in float64): the table depends on constants only."""
    b = legato.GraphBuilder()
    x = b.input("x", (4, 6), "float32")
    ramp = b.const(np.arange(24, dtype=np.float64).reshape(4, 6))
    table = b.sin(b.divide(ramp, b.const(np.float64(7.0))))
    return b.build(b.add(x, b.cast(table, dtype="float32")))


def test_constant_calls_fold_with_the_reference_kernels():
    from legato.passes.constfold import fold_constants
    module = float64_table_module()
    folded = fold_constants(module, legato.context())
    assert [c.op for c in folded.main.calls] == ["add"]  # divide, sin and cast folded
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    want = x + np.sin(np.arange(24.0).reshape(4, 6) / 7.0).astype(np.float32)
    np.testing.assert_array_equal(legato.reference(folded)(x), legato.reference(module)(x))
    np.testing.assert_allclose(legato.reference(folded)(x), want, rtol=1e-6)
    kept = fold_constants(module, legato.context(), keep={"sin"})
    assert [c.op for c in kept.main.calls] == ["sin", "cast", "add"]  # kept whole, as asked


def test_constant_folding_stops_at_the_size_limit_and_at_inputs():
    from legato.passes.constfold import fold_constants
    b = legato.GraphBuilder()
    x = b.input("x", (64, 64), "float32")
    row = b.cos(b.const(np.linspace(0, 1, 64, dtype=np.float64)))  # 64 elements: folded
    big = b.broadcast_to(row, shape=[64, 64])  # 4096 elements: over the limit given
    y = b.add(x, b.cast(big, dtype="float32"))
    module = b.build(b.multiply(y, b.exp(x)))
    folded = fold_constants(module, legato.context(), max_elements=1000)
    assert [c.op for c in folded.main.calls] == ["broadcast_to", "cast", "add", "exp", "multiply"]
    data = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_array_equal(legato.reference(folded)(data), legato.reference(module)(data))


def test_emitting_backends_get_folded_tables_executing_ones_run_them(backend_factory):
    module = float64_table_module()
    backend_factory({"backend": "emits32", "executes": False,
                     "legal": {op: {"dtypes": ["float32"]} for op in ("add", "sin", "cast")}},
                    emitter=lambda m: str(m))
    emitted = legato.compile(module, backend="emits32")  # float64 sin: nothing takes it
    assert [c.op for c in emitted.module.main.calls] == ["add"]
    assert "sin" in legato.compile(module, backend="c_kernels").report.after


def test_every_qnn_op_refuses_a_nan_scale_constant():
    """Whatever qnn ops there are: each scale input of each registered example, made a
    NaN constant, is refused naming the op and the input."""
    registry = legato.context().registry
    ops = [op for op in registry.names() if op.startswith("qnn.")]
    assert {"qnn.quantize", "qnn.dequantize", "qnn.conv2d"} <= set(ops)
    for op in ops:
        opdef = registry.get(op)
        types, attrs = opdef.examples[0]
        scales = [i for i, spec in enumerate(opdef.inputs) if spec.name.endswith("scale")]
        assert scales, op
        for index in scales:
            b = legato.GraphBuilder()
            inputs = [None if t is None else
                      b.const(np.full(t.shape, np.nan, t.dtype)) if i == index else
                      b.input(f"x{i}", t.shape, t.dtype) for i, t in enumerate(types)]
            name = opdef.inputs[index].name
            with pytest.raises(legato.LegatoError, match=rf"{op}: input {index} \({name}\) holds nan"):
                b.call(op, *inputs, **attrs)
