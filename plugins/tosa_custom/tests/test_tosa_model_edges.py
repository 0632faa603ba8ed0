"""Shapes real models give tosa_custom that its own cases did not: concats wider than one
TOSA CONCAT takes (an LSTM unrolled over 75 frames), pooling windows larger than their
input (EfficientNet's pooler), float64 constant subgraphs (position tables)."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato_tosa_custom.cases import KEEP, assert_matches
from legato_tosa_custom.limits import MAX_TENSOR_LIST


def wide_concat(count, dtype="float32", axis=1):
    b = legato.GraphBuilder()
    shapes = [(2, 1 + i % 3)[::1 if axis else -1] for i in range(count)]
    xs = [b.input(f"x{i}", shape, dtype) for i, shape in enumerate(shapes)]
    return b.build(b.concat(*xs, axis=axis))


@pytest.mark.parametrize("count", [75, 200])
def test_concat_of_more_operands_than_tosa_takes_is_a_tree(tools, count):
    module = wide_concat(count)
    text = legato.compile(module, backend=KEEP).artifact
    groups = -(-count // MAX_TENSOR_LIST)
    assert text.count('tosa.concat') == groups + 1
    rng = np.random.default_rng(count)
    feeds = [rng.standard_normal(p.shape).astype(np.float32) for p in module.main.params]
    (out,) = tools.run_reference(text, feeds, validate=True)
    np.testing.assert_array_equal(out, np.concatenate(feeds, axis=1))


def test_concat_tree_of_integers_and_of_thousands_of_operands():
    module = wide_concat(MAX_TENSOR_LIST**2 + 3, axis=0)
    text = legato.compile(module, backend=KEEP).artifact  # two levels of groups
    assert text.count('tosa.concat') == MAX_TENSOR_LIST + 2 + 1
    ints = wide_concat(70, "int32")
    feeds = [np.arange(np.prod(p.shape), dtype=np.int32).reshape(p.shape) + i
             for i, p in enumerate(ints.main.params)]
    from legato_tosa_custom.kernels import simulate
    compiled = legato.compile(ints, backend=KEEP)
    assert_matches(simulate(compiled.module)(*feeds), np.concatenate(feeds, axis=1))


def pool(op, shape, **attrs):
    b = legato.GraphBuilder()
    return b.build(b.call(op, b.input("x", shape), **attrs))


@pytest.mark.parametrize("op, reduce", [("nn.avg_pool2d", np.mean), ("nn.max_pool2d", np.max)])
def test_ceil_mode_window_larger_than_the_map_is_one_tosa_pool(tools, op, reduce):
    """EfficientNet's pooler: AvgPool2d(1280, ceil_mode=True) over a 7 x 7 map is one
    window over the whole map (as in PyTorch), one TOSA pool with a 7 x 7 kernel."""
    module = pool(op, (1, 3, 7, 7), pool_size=[1280, 1280], ceil_mode=True)
    text = legato.compile(module, backend=KEEP).artifact
    assert text.count(f"tosa.{op[3:]}") == 1 and "kernel = array<i64: 7, 7>" in text
    x = np.random.default_rng(0).standard_normal((1, 3, 7, 7)).astype(np.float32)
    (out,) = tools.run_reference(text, [x], validate=True)
    assert_matches(out, reduce(x, axis=(2, 3), keepdims=True))


def test_ceil_mode_window_larger_than_the_padded_map_with_padding_and_dilation(tools):
    module = pool("nn.max_pool2d", (1, 2, 7, 8), pool_size=[4, 10], strides=[9, 9],
                  padding=[1, 1, 1, 1], dilation=[3, 1], ceil_mode=True)
    text = legato.compile(module, backend=KEEP).artifact
    x = np.random.default_rng(1).standard_normal((1, 2, 7, 8)).astype(np.float32)
    (out,) = tools.run_reference(text, [x], validate=True)
    assert_matches(out, legato.reference(module)(x))


# --- float64 constant subgraphs -----------------------------------------------------------

def sine_table_onnx(path, channels=32, size=16):
    """A DETR-style 2-D sine-cosine position table computed in float64 from constants
    (Range, Div, Sin, Cos, Concat, Transpose, Cast), added to the float32 input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    half = channels // 2
    dim_t = 10000.0 ** (2 * (np.arange(half) // 2) / half)

    def const(name, array):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))

    nodes = [const("one", np.array(1.0)), const("end", np.array(size + 1.0)),
             const("dim_t", dim_t), const("ax", np.array([1, 2], np.int64)),
             helper.make_node("Range", ["one", "end", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax"], ["r3"]),  # [size, 1, 1]
             helper.make_node("Div", ["r3", "dim_t"], ["pos"]),   # [size, 1, half]
             helper.make_node("Sin", ["pos"], ["s"]), helper.make_node("Cos", ["pos"], ["c"]),
             const("shape", np.array([size, size, half], np.int64)),
             helper.make_node("Expand", ["s", "shape"], ["sy"]),
             helper.make_node("Expand", ["c", "shape"], ["cy"]),
             helper.make_node("Transpose", ["cy"], ["cx"], perm=[1, 0, 2]),
             helper.make_node("Concat", ["sy", "cx"], ["table"], axis=2),
             helper.make_node("Transpose", ["table"], ["chw"], perm=[2, 0, 1]),
             helper.make_node("Cast", ["chw"], ["chw32"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "chw32"], ["y"])]
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return str(path)


def test_float64_sine_table_from_onnx_is_folded_and_matches_onnxruntime(tools, tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from legato.frontends import onnx as lonnx
    path = sine_table_onnx(tmp_path / "table.onnx")
    module = lonnx.load(path)
    assert any(c.op == "sin" and c.outputs[0].dtype == "float64" for c in module.main.calls)
    compiled = legato.compile(module, backend=KEEP)
    assert "sin" not in compiled.report.after and "f64" not in compiled.artifact
    x = np.random.default_rng(0).standard_normal((1, 32, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (out,) = tools.run_reference(compiled.artifact, [x], validate=True)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_float64_sine_table_from_torch_is_folded_and_matches_eager(tools):
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as ltorch

    class SineTable(torch.nn.Module):
        """DETR's PositionEmbeddingSine, its table computed in float64 from aranges."""
        def forward(self, x):
            _, c, h, w = x.shape
            y_embed = torch.arange(1, h + 1, dtype=torch.float64)[:, None].expand(h, w)
            x_embed = torch.arange(1, w + 1, dtype=torch.float64)[None, :].expand(h, w)
            dim_t = torch.arange(c // 2, dtype=torch.float64)
            dim_t = 10000 ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / (c // 2))
            pos_x, pos_y = x_embed[:, :, None] / dim_t, y_embed[:, :, None] / dim_t
            pos_x = torch.stack((pos_x[:, :, 0::2].sin(), pos_x[:, :, 1::2].cos()), dim=3)
            pos_y = torch.stack((pos_y[:, :, 0::2].sin(), pos_y[:, :, 1::2].cos()), dim=3)
            pos = torch.cat((pos_y.flatten(2), pos_x.flatten(2)), dim=2).permute(2, 0, 1)
            return x + pos.to(x.dtype)

    x = torch.randn(1, 32, 16, 12)
    want = SineTable()(x).numpy()
    compiled = legato.compile(ltorch.load(SineTable(), (x,)), backend=KEEP)
    assert "f64" not in compiled.artifact
    (out,) = tools.run_reference(compiled.artifact, [x.numpy()], validate=True)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def qdq_conv_module():
    """dequantize -> conv2d -> quantize, as onnxruntime's QDQ quantizer writes a conv."""
    rng = np.random.default_rng(5)
    b = legato.GraphBuilder()
    x = b.call("qnn.dequantize", b.input("x", (1, 4, 8, 8), "int8"),
               b.const(np.float32(0.05)), b.const(np.int8(3)))
    w = b.call("qnn.dequantize", b.const(rng.integers(-9, 9, (8, 4, 3, 3)).astype(np.int8)),
               b.const(np.full(8, 0.02, np.float32)), b.const(np.zeros(8, np.int8)), axis=0)
    y = b.call("nn.conv2d", x, w, None, padding=[1, 1, 1, 1])
    return b.build(b.call("qnn.quantize", y, b.const(np.float32(0.1)), b.const(np.int8(-2))))


def test_qdq_regions_tosa_cannot_run_whole_stay_float_and_say_why(tools):
    """The QDQ folding makes qnn.conv2d only where the backend runs it: this pro_fp emitter
    has no integer convolution, so the region stays float (as before folding existed) and
    the report says why; c_kernels folds the same region."""
    module = qdq_conv_module()
    compiled = legato.compile(module, backend=KEEP)
    assert not compiled.report.qdq.folded
    ((op, why),) = compiled.report.qdq.not_folded
    assert op == "nn.conv2d" and why.startswith(f"{KEEP} cannot run qnn.conv2d: ")
    feeds = [np.random.default_rng(1).integers(-128, 128, (1, 4, 8, 8)).astype(np.int8)]
    (out,) = tools.run_reference(compiled.artifact, feeds, validate=True)
    want = legato.reference(module)(*feeds)  # float sums in another order: ties may round
    assert np.abs(out.astype(np.int32) - want).max() <= 1   # the other way, one step
    assert legato.compile(module, backend="c_kernels").report.qdq.folded["qnn.conv2d"] == 1
