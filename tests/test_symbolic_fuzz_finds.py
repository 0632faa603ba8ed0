"""Cases the symbolic-shapes fuzz target (tests/fuzz/target_symbolic.py) found: ONNX models
with symbolic dims compiled once per backend and run at several sizes against
onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.ir.symbols import parse_dim  # noqa: E402

BACKENDS = ("cpu_ref", "c_kernels")


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def model_of(nodes, inputs, inits=()):
    """A one-output (y) opset-18 model over float inputs {name: dims}."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, d)
                     for n, d in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def check_every_size(model, tmp_path, shapes):
    """One compile per backend of the saved model, run at each of `shapes` ({input:
    shape}), against onnxruntime."""
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for backend in BACKENDS:
        compiled = legato.compile(str(path), backend)
        for shape in shapes:
            feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shape.items()}
            want = session.run(None, feeds)[0]
            got = compiled(**feeds)
            assert got.shape == want.shape, (backend, shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_reshape_minus_one_divides_a_sum_of_terms_by_itself_or_a_factor(tmp_path):
    """[seq+1] reshaped to [seq+1, 1, -1], [2, seq+1] to [2*seq+2, -1]: the -1 is 1 (it
    was taken as seq+1, refused as 'cannot reshape'; fuzz seeds 57 and 98)."""
    b, s = parse_dim("batch"), parse_dim("seq")
    assert (2 * b - 4).exact_div(2 * b - 4) == 1
    assert (2 * b - 4).exact_div(b - 2) == 2
    assert (b * s - b).exact_div(s - 1) == b
    assert (b * s + 2).exact_div(b + 1) is None
    nodes = [helper.make_node("Concat", ["x", "one"], ["x1"], axis=0),
             helper.make_node("Shape", ["x1"], ["shape"]),
             helper.make_node("Concat", ["shape", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x1", "target"], ["r"]),
             helper.make_node("Concat", ["r", "r"], ["rr"], axis=1),
             helper.make_node("Transpose", ["rr"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Shape", ["t"], ["tshape"]),
             helper.make_node("Gather", ["tshape", "i0"], ["d0"], axis=0),
             helper.make_node("Gather", ["tshape", "i1"], ["d1"], axis=0),
             helper.make_node("Mul", ["d0", "d1"], ["count"]),
             helper.make_node("Concat", ["count", "minus1"], ["flat"], axis=0),
             helper.make_node("Reshape", ["t", "flat"], ["y"])]
    inits = [numpy_helper.from_array(np.ones(1, np.float32), "one"), ints("tail", [1, -1]),
             ints("minus1", [-1]),
             ints("i0", [0]), ints("i1", [1])]
    model = model_of(nodes, {"x": ["seq"]}, inits)
    check_every_size(model, tmp_path, [{"x": (1,)}, {"x": (4,)}, {"x": (0,)}])


def test_strided_slices_over_symbolic_sizes(tmp_path):
    """x[1:batch:2, ::3] with the end read from Shape: ceil((end - start) / step)
    elements (steps other than 1 were refused over symbolic sizes; fuzz seed 58)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["rows"], axis=0),
             helper.make_node("Slice", ["x", "one", "rows", "i0", "two"], ["a"]),
             helper.make_node("Slice", ["a", "i0", "big", "i1", "three"], ["y"])]
    inits = [ints("i0", [0]), ints("i1", [1]), ints("one", [1]), ints("two", [2]),
             ints("three", [3]), ints("big", [2 ** 63 - 1])]
    model = model_of(nodes, {"x": ["batch", "seq"]}, inits)
    check_every_size(model, tmp_path, [{"x": (b, s)} for b, s in
                                       [(1, 1), (2, 4), (5, 7), (6, 3)]])


def test_slices_from_the_end_of_a_symbolic_dim(tmp_path):
    """x[:, -2:] and x[-1:, :] over [batch, seq] (a decoder's last positions): a start
    counted from the end of a symbolic dim, kept as a guard (seq >= 2); it was refused at
    import (torch fuzz seed 31, x[:, -1:])."""
    nodes = [helper.make_node("Slice", ["x", "minus2", "big", "i1"], ["a"]),
             helper.make_node("Slice", ["a", "minus1", "big", "i0"], ["y"])]
    inits = [ints("minus2", [-2]), ints("minus1", [-1]), ints("big", [2 ** 63 - 1]),
             ints("i0", [0]), ints("i1", [1])]
    model = model_of(nodes, {"x": ["batch", "seq"]}, inits)
    check_every_size(model, tmp_path, [{"x": (b, s)} for b, s in [(1, 2), (3, 7), (2, 3)]])
    compiled = legato.compile(str(tmp_path / "model.onnx"), "cpu_ref")
    with pytest.raises(legato.ExecutionError, match="2<=seq"):
        compiled(np.ones((2, 1), np.float32))  # (onnxruntime clamps: legato refuses)


@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_pad_over_symbolic_dims(tmp_path, mode):
    """Pad of [batch, seq, 3] by constant pads, one negative on seq: batch+3, seq+1, 3+1
    (a symbolic dim was compared with 0 and the model refused at import; fuzz seed 36),
    the negative pad kept as a guard (seq >= 1)."""
    nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)]
    inits = [ints("pads", [1, 2, 0, 2, -1, 1]),
             numpy_helper.from_array(np.array(1.5, np.float32), "value")]
    model = model_of(nodes, {"x": ["batch", "seq", 3]}, inits)
    sizes = [(1, 2), (2, 5)] + ([(1, 1), (0, 3)] if mode == "constant" else [])  # (edge: of
    # nothing onnxruntime refuses)
    check_every_size(model, tmp_path, [{"x": (b, s, 3)} for b, s in sizes])


def test_constant_of_shape_over_symbolic_sizes(tmp_path):
    """ConstantOfShape(Shape(x)) (exporters' masks) at every size: the fill broadcast to
    [batch, seq, 3] (the symbolic shape was read as values and refused; fuzz seed 400s)."""
    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [2.5])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["c"], value=fill),
             helper.make_node("Mul", ["x", "c"], ["y"])]
    model = model_of(nodes, {"x": ["batch", "seq", 3]})
    check_every_size(model, tmp_path, [{"x": (b, s, 3)} for b, s in [(1, 1), (2, 5), (0, 3)]])


def test_a_reshape_to_sizes_read_as_data_that_reach_zero_is_refused(tmp_path):
    """Reshape of [4, batch, batch] to [4*batch] + Shape[2:] from Shape: at batch=0 ONNX's
    0 copies the input's dim (onnxruntime: [4, 0]); legato made [0, 0] (symbolic fuzz seed
    1593). The size is guarded >= 1 and batch=0 refused; dims equal to the input's are not
    guarded (copying them gives the same size)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["d0"], axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["d1"], axis=0),
             helper.make_node("Mul", ["d0", "d1"], ["merged"]),
             helper.make_node("Slice", ["shape", "two", "big"], ["rest"]),
             helper.make_node("Concat", ["merged", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [ints("i0", [0]), ints("i1", [1]), ints("two", [2]), ints("big", [2 ** 63 - 1])]
    model = model_of(nodes, {"x": [4, "batch", "batch"]}, inits)
    check_every_size(model, tmp_path, [{"x": (4, b, b)} for b in (1, 3)])
    compiled = legato.compile(str(tmp_path / "model.onnx"), "cpu_ref")
    assert compiled.module.main.attrs["guards"] == ["1<=4*batch"]
    with pytest.raises(legato.ExecutionError, match="1<=4\\*batch"):
        compiled(np.ones((4, 0, 0), np.float32))


def test_a_difference_of_sizes_divided_as_data(tmp_path):
    """x[:, 1:][:, :(seq - 1) // 2] with the end computed from Shape - 1 and Div (a
    truncating integer Div in ONNX, floor for the guarded seq - 1 >= 0; it was refused as
    a 'division of symbolic sizes', fuzz seed 302); and a negative difference next to a
    symbolic size in one vector truncates ((3 - 8) / 2 is -2, not floor's -3: Slice to -2
    keeps 3 of 5 columns)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i1"], ["seq"], axis=0),
             helper.make_node("Sub", ["seq", "one"], ["less"]),
             helper.make_node("Slice", ["x", "one", "seq", "i1"], ["a"]),
             helper.make_node("Div", ["less", "two"], ["half"]),
             helper.make_node("Slice", ["a", "zero", "half", "i1"], ["b"]),
             helper.make_node("Gather", ["shape", "i0"], ["rows"], axis=0),
             helper.make_node("Sub", ["rows", "eight"], ["short"]),
             helper.make_node("Concat", ["short", "seq"], ["pair"], axis=0),
             helper.make_node("Div", ["pair", "two"], ["halves"]),
             helper.make_node("Gather", ["halves", "i0"], ["cut"], axis=0),
             helper.make_node("Slice", ["y5", "zero", "cut", "i1"], ["c"]),
             helper.make_node("ReduceSum", ["c", "i1"], ["s"], keepdims=1),
             helper.make_node("Mul", ["b", "s"], ["y"])]
    inits = [ints("i0", [0]), ints("i1", [1]), ints("one", [1]), ints("two", [2]),
             ints("zero", [0]), ints("eight", [8]),
             numpy_helper.from_array(np.arange(15, dtype=np.float32).reshape(3, 5), "y5")]
    model = model_of(nodes, {"x": [3, "seq"]}, inits)
    check_every_size(model, tmp_path, [{"x": (3, s)} for s in (1, 2, 5, 8)])


def test_torch_reductions_over_symbolic_dims():
    """x - x.mean(dim=1, keepdim=True) and x.sum(dim=(0, 1)) through torch.export with batch
    and seq Dims (the importer's empty-tensor check asked batch*seq*4 for its value and
    refused; symbolic fuzz seed 10037), against eager at several sizes."""
    torch = pytest.importorskip("torch")
    from legato.frontends import torch as torch_frontend

    class Centered(torch.nn.Module):
        def forward(self, x):
            return x - x.mean(dim=1, keepdim=True) + x.sum(dim=(0, 1))

    model = Centered()
    dims = {0: torch.export.Dim("batch", max=16), 1: torch.export.Dim("seq", max=64)}
    module = torch_frontend.load(model, (torch.randn(2, 5, 4),), dynamic_shapes=(dims,))
    for backend in BACKENDS:
        compiled = legato.compile(module, backend)
        for shape in [(1, 1, 4), (3, 7, 4), (2, 5, 4)]:
            x = torch.randn(*shape)
            np.testing.assert_allclose(compiled(x.numpy()), model(x).numpy(),
                                       rtol=1e-5, atol=1e-5)


def test_a_reshape_minus_one_divides_out_a_sum_of_terms():
    """[2*seq+2, batch+1] to [2, seq+1, -1]: the -1 is the quotient batch+1 of two sums of
    terms (long division; it was refused as 'cannot tell how ... divide', fuzz seed
    30000s)."""
    b, s = parse_dim("batch"), parse_dim("seq")
    assert ((7 * s + 7) * (b + 1)).exact_div(7 * s + 7) == b + 1
    assert (b * b - 1).exact_div(b + 1) == b - 1
    assert (b * b + 1).exact_div(b + 1) is None
    assert ((s // 2 + 1) * (b + 3)).exact_div(s // 2 + 1) == b + 3


def test_a_reshape_of_padded_copies_to_minus_one(tmp_path):
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"]),
             helper.make_node("Concat", ["p", "p"], ["pp"], axis=0),
             helper.make_node("Shape", ["p"], ["shape"]),
             helper.make_node("Slice", ["shape", "zero", "one"], ["rows"]),
             helper.make_node("Concat", ["two", "rows", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["pp", "target"], ["y"])]
    inits = [ints("pads", [0, 0, 1, 1]), ints("zero", [0]), ints("one", [1]),
             ints("two", [2]), ints("minus1", [-1])]
    model = model_of(nodes, {"x": ["seq", "batch"]}, inits)
    check_every_size(model, tmp_path, [{"x": (s, b)} for s, b in [(1, 1), (4, 2), (0, 3)]])
