"""ONNX converters of the later batch (Dropout, MeanVarianceNormalization, control flow,
recurrent layers) on cases beyond the ONNX node tests, against onnx's reference evaluator,
on cpu_ref and c_kernels; and the reasons given for ops refused by design."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402
from legato.ir.errors import LegatoError  # noqa: E402

F = TensorProto.FLOAT
BACKENDS = ["cpu_ref", "c_kernels"]
rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def model_of(nodes, arrays, outputs, initializers=(), opset=21, out_type=TensorProto.UNDEFINED):
    """A model whose inputs x0, x1, ... have the shapes and dtypes of `arrays` (outputs of
    `out_type`: onnxruntime wants them typed)."""
    inputs = [helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for i, a in enumerate(arrays)]
    outs = [helper.make_tensor_value_info(name, out_type, None) for name in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), name) for name, v in initializers]
    graph = helper.make_graph(nodes, "g", inputs, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(model, arrays, backend, atol=1e-5, runtime=False):
    """legato against onnx's reference evaluator, or against onnxruntime (`runtime`) where
    the evaluator lacks a feature (Scan over other axes) or concatenates Loop's per-iteration
    values instead of stacking them as the operator's definition does."""
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    if runtime:
        ort = pytest.importorskip("onnxruntime")
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
    else:
        want = ReferenceEvaluator(model).run(None, feeds)
    got = legato.compile(onnx_frontend.load(model), backend)(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)


# --- Dropout ---------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("training", [None, False, True])
def test_dropout_is_the_identity_with_a_full_mask(training, backend):
    x = randn(2, 3, 4)
    inits = [("ratio", np.float32(0.0 if training else 0.3))]
    names = ["x0", "ratio"]
    if training is not None:
        inits.append(("training", np.bool_(training)))
        names.append("training")
    node = helper.make_node("Dropout", names, ["y", "mask"])
    check(model_of([node], [x], ["y", "mask"], inits), [x], backend)


def test_training_dropout_with_a_ratio_is_refused_saying_why():
    x = randn(2, 3)
    node = helper.make_node("Dropout", ["x0", "ratio", "training"], ["y"], name="drop")
    model = model_of([node], [x], ["y"], [("ratio", np.float32(0.5)),
                                          ("training", np.bool_(True))])
    with pytest.raises(LegatoError, match="Dropout node 'drop'.*random"):
        onnx_frontend.load(model)


# --- MeanVarianceNormalization ---------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axes", [None, [1], [0, 2], [-1, -2]])
def test_mean_variance_normalization(axes, backend):
    x = randn(2, 3, 4, 5) * 3 + 1
    attrs = {} if axes is None else {"axes": axes}
    node = helper.make_node("MeanVarianceNormalization", ["x0"], ["y"], **attrs)
    check(model_of([node], [x], ["y"]), [x], backend, atol=1e-4)


# --- ops refused by design -------------------------------------------------------------------

@pytest.mark.parametrize("op, inputs, attrs, why", [
    ("RandomNormalLike", ["x0"], {}, "random"),
    ("NonZero", ["x0"], {}, "depends on the data"),
    ("Unique", ["x0"], {}, "depends on the data"),
    ("ImageDecoder", ["x0"], {}, "decoded size is in the data"),
    ("SequenceEmpty", [], {}, "sequences"),
])
def test_ops_refused_by_design_name_the_op_and_the_reason(op, inputs, attrs, why):
    node = helper.make_node(op, inputs, ["y"], name="n1", **attrs)
    model = model_of([node], [randn(4)], ["y"])
    with pytest.raises(LegatoError, match=f"{op}: n1: .*{why}"):
        onnx_frontend.load(model)


# --- If / Loop / Scan --------------------------------------------------------------------------

def body(nodes, inputs, outputs, shapes=None):
    """A control-flow body; its inputs and outputs are float tensors unless named in
    BODY_TYPES, of the `shapes` given (onnxruntime wants them)."""
    def info(name):
        return helper.make_tensor_value_info(name, BODY_TYPES.get(name, F),
                                             (shapes or {}).get(name, [] if name in BODY_TYPES
                                                                else None))
    return helper.make_graph(nodes, "body", [info(n) for n in inputs], [info(n) for n in outputs])


BODY_TYPES = {"i": TensorProto.INT64, "c_in": TensorProto.BOOL, "c_out": TensorProto.BOOL}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("condition", [True, False])
def test_if_with_a_constant_condition_inlines_its_branch(condition, backend):
    x = randn(3, 4)
    then = body([helper.make_node("Mul", ["x0", "x0"], ["t"])], [], ["t"])   # outer x0
    other = body([helper.make_node("Neg", ["x0"], ["e"])], [], ["e"])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)
    check(model_of([node], [x], ["y"], [("cond", np.bool_(condition))]), [x], backend)


def test_if_on_run_time_data_is_refused_as_dynamic_control_flow():
    then = body([helper.make_node("Identity", ["x1"], ["t"])], [], ["t"])
    other = body([helper.make_node("Neg", ["x1"], ["e"])], [], ["e"])
    node = helper.make_node("If", ["x0"], ["y"], name="branchy", then_branch=then,
                            else_branch=other)
    model = model_of([node], [np.array(True), randn(2)], ["y"])
    with pytest.raises(LegatoError, match="If node 'branchy'.*dynamic control flow"):
        onnx_frontend.load(model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_with_a_static_trip_count_unrolls(backend):
    x = randn(2, 3)
    loop_body = body([helper.make_node("Identity", ["c_in"], ["c_out"]),
                      helper.make_node("Add", ["acc", "x0"], ["acc_out"]),     # outer x0
                      helper.make_node("Cast", ["i"], ["i_f"], to=F),
                      helper.make_node("Mul", ["acc_out", "i_f"], ["scaled"])],
                     ["i", "c_in", "acc"], ["c_out", "acc_out", "scaled"],
                     {n: [2, 3] for n in ("acc", "acc_out", "scaled")})
    node = helper.make_node("Loop", ["trips", "go", "x0"], ["final", "each"], body=loop_body)
    model = model_of([node], [x], ["final", "each"], [("trips", np.int64(4)),
                                                     ("go", np.bool_(True))], out_type=F)
    check(model, [x], backend, runtime=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_stops_when_its_condition_folds_to_false(backend):
    x = randn(3)
    loop_body = body([helper.make_node("Less", ["i", "two"], ["c_out"]),
                      helper.make_node("Mul", ["acc", "acc"], ["acc_out"])],
                     ["i", "c_in", "acc"], ["c_out", "acc_out"], {"acc": [3], "acc_out": [3]})
    node = helper.make_node("Loop", ["trips", "", "x0"], ["y"], body=loop_body)
    model = model_of([node], [x], ["y"], [("trips", np.int64(10)), ("two", np.int64(2))],
                     out_type=F)
    check(model, [x], backend, runtime=True)


def test_loop_whose_condition_depends_on_data_is_refused():
    loop_body = body([helper.make_node("ReduceMax", ["acc"], ["m"], keepdims=0),
                      helper.make_node("Less", ["m", "ten"], ["c_out"]),
                      helper.make_node("Add", ["acc", "acc"], ["acc_out"])],
                     ["i", "c_in", "acc"], ["c_out", "acc_out"])
    node = helper.make_node("Loop", ["trips", "", "x0"], ["y"], name="until", body=loop_body)
    model = model_of([node], [randn(3)], ["y"], [("trips", np.int64(5)),
                                                 ("ten", np.float32(10))])
    with pytest.raises(LegatoError, match="Loop node 'until'.*run-time data"):
        onnx_frontend.load(model)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("directions", [(0, 0, 0), (1, 0, 1), (0, 1, 0)])
def test_scan_over_axes_and_directions(directions, backend):
    in_dir, out_dir, out_axis = directions
    state, xs = randn(3, 4), randn(3, 5, 4)
    scan_body = body([helper.make_node("Add", ["s", "x"], ["s_out"]),
                      helper.make_node("Mul", ["s_out", "x"], ["e"])],
                     ["s", "x"], ["s_out", "e"], {"s": [3, 4], "x": [3, 4], "s_out": [3, 4],
                                                  "e": [3, 4]})
    node = helper.make_node("Scan", ["x0", "x1"], ["final", "stacked"], body=scan_body,
                            num_scan_inputs=1, scan_input_axes=[1],
                            scan_input_directions=[in_dir], scan_output_axes=[out_axis],
                            scan_output_directions=[out_dir])
    model = model_of([node], [state, xs], ["final", "stacked"], out_type=F)
    check(model, [state, xs], backend, atol=1e-4, runtime=True)


# --- RNN / GRU / LSTM --------------------------------------------------------------------------

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_model(op, direction, layout, steps=4, batch=3, size=5, hidden=6, lengths=None,
                    initial=False, bias=True, **attrs):
    """A one-layer `op` whose weights are initializers; input x0 is X, in `layout`."""
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[op]
    x = randn(*((batch, steps, size) if layout else (steps, batch, size)))
    inits = [("W", randn(dirs, gates * hidden, size) * 0.5),
             ("R", randn(dirs, gates * hidden, hidden) * 0.5)]
    names = ["x0", "W", "R", "", "", "", "", ""]
    if bias:
        inits.append(("B", randn(dirs, 2 * gates * hidden) * 0.5))
        names[3] = "B"
    if lengths is not None:
        inits.append(("lens", np.array(lengths, np.int32)))
        names[4] = "lens"
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    if initial:
        inits.append(("h0", randn(*state_shape)))
        names[5] = "h0"
        if op == "LSTM":
            inits += [("c0", randn(*state_shape)), ("P", randn(dirs, 3 * hidden) * 0.5)]
            names[6:8] = ["c0", "P"]
    while names[-1] == "":
        names.pop()
    outputs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction,
                            layout=layout, **attrs)
    return model_of([node], [x], outputs, inits, opset=22, out_type=F), x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("direction, layout, initial", [
    ("forward", 0, False), ("reverse", 1, True), ("bidirectional", 0, True),
    ("bidirectional", 1, False)])
def test_recurrent_layers(op, direction, layout, initial, backend):
    model, x = recurrent_model(op, direction, layout, initial=initial)
    check(model, [x], backend, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", sorted(GATES))
def test_recurrent_layers_with_constant_sequence_lengths(op, backend):
    model, x = recurrent_model(op, "bidirectional", 0, lengths=[4, 2, 3], initial=True)
    check(model, [x], backend, atol=1e-4, runtime=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gru_linear_before_reset_and_lstm_activations(backend):
    model, x = recurrent_model("GRU", "forward", 0, linear_before_reset=1)
    check(model, [x], backend, atol=1e-4, runtime=True)
    model, x = recurrent_model("LSTM", "forward", 0, activations=["HardSigmoid", "Tanh",
                                                                   "Relu"],
                               activation_alpha=[0.3], activation_beta=[0.4], clip=2.0)
    check(model, [x], backend, atol=1e-4, runtime=True)


def test_recurrent_layer_with_run_time_sequence_lengths_is_refused():
    x, lens = randn(4, 2, 3), np.array([4, 2], np.int32)
    node = helper.make_node("RNN", ["x0", "W", "R", "", "x1"], ["y"], hidden_size=2,
                            name="rnn")
    model = model_of([node], [x, lens], ["y"], [("W", randn(1, 2, 3)), ("R", randn(1, 2, 2))])
    with pytest.raises(LegatoError, match="RNN node 'rnn'.*sequence_lens"):
        onnx_frontend.load(model)


# --- GridSample / Col2Im -----------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode, padding, align", [
    ("linear", "zeros", 0), ("nearest", "border", 1), ("cubic", "reflection", 0),
    ("bilinear", "border", 0)])
def test_grid_sample_modes_of_both_opsets(mode, padding, align, backend):
    x, grid = randn(2, 3, 5, 6), rng.uniform(-1.2, 1.2, (2, 4, 3, 2)).astype(np.float32)
    opset = 16 if mode in ("bilinear", "bicubic") else 22
    node = helper.make_node("GridSample", ["x0", "x1"], ["y"], mode=mode, padding_mode=padding,
                            align_corners=align)
    model = model_of([node], [x, grid], ["y"], opset=opset, out_type=F)
    # onnx's evaluator knows the opset-20 mode names only
    check(model, [x, grid], backend, atol=1e-4, runtime=opset == 16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("image, block, attrs", [
    ([5, 6], [2, 3], {}),
    ([6, 7], [3, 2], {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
    ([4, 3, 5], [2, 2, 3], {"strides": [1, 2, 1]}),
])
def test_col2im(image, block, attrs, backend):
    dims = len(image)
    strides = attrs.get("strides", [1] * dims)
    dilations = attrs.get("dilations", [1] * dims)
    pads = attrs.get("pads", [0] * 2 * dims)
    counts = [(image[d] + pads[d] + pads[d + dims] - dilations[d] * (block[d] - 1) - 1)
              // strides[d] + 1 for d in range(dims)]
    x = randn(2, 3 * int(np.prod(block)), int(np.prod(counts)))
    node = helper.make_node("Col2Im", ["x0", "image", "block"], ["y"], **attrs)
    model = model_of([node], [x], ["y"], [("image", np.array(image, np.int64)),
                                          ("block", np.array(block, np.int64))])
    check(model, [x], backend, atol=1e-4)


# --- STFT --------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("components, onesided, window", [(1, 1, False), (1, 0, True),
                                                          (2, 0, True)])
def test_stft(components, onesided, window, backend):
    signal = randn(2, 40, components)
    inits = [("step", np.int64(6)), ("length", np.int64(10))]
    names = ["x0", "step", "", "length"]
    if window:
        inits.append(("window", np.hanning(10).astype(np.float32)))
        names[2] = "window"
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    check(model_of([node], [signal], ["y"], inits, opset=17), [signal], backend, atol=1e-4)


# --- TensorScatter -----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode, axis, starts", [("linear", -2, [0, 3]), ("circular", 2, [5, 2]),
                                                ("linear", 1, None)])
def test_tensor_scatter_with_run_time_write_indices(mode, axis, starts, backend):
    cache = randn(2, 3, 7, 4) if axis != 1 else randn(2, 7, 3)
    shape = list(cache.shape)
    shape[axis] = 3
    update = randn(*shape)
    arrays = [cache, update] + ([] if starts is None else [np.array(starts, np.int64)])
    node = helper.make_node("TensorScatter", [f"x{i}" for i in range(len(arrays))], ["y"],
                            mode=mode, axis=axis)
    check(model_of([node], arrays, ["y"], opset=24), arrays, backend)


# --- CausalConvWithState -------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kernel, past, bias, activation", [
    (4, True, True, "silu"), (3, False, False, "none"), (1, False, True, "swish")])
def test_causal_conv_with_state(kernel, past, bias, activation, backend):
    arrays = [randn(2, 5, 6), randn(5, 1, kernel)]
    names = ["x0", "x1", "", ""]
    if bias:
        arrays.append(randn(5))
        names[2] = f"x{len(arrays) - 1}"
    if past:
        arrays.append(randn(2, 5, kernel - 1))
        names[3] = f"x{len(arrays) - 1}"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], activation=activation)
    check(model_of([node], arrays, ["y", "state"], opset=27), arrays, backend, atol=1e-4)


# --- LinearAttention ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule, heads, per_key_decay, past", [
    ("linear", (2, 2), False, False), ("gated", (4, 2), True, True),
    ("delta", (2, 1), False, False), ("gated_delta", (4, 2), False, True)])
def test_linear_attention(rule, heads, per_key_decay, past, backend):
    (hq, hkv), batch, steps, dk, dv = heads, 2, 3, 4, 5
    unit = lambda *shape: (randn(*shape) / 3).astype(np.float32)  # noqa: E731
    arrays = [unit(batch, steps, hq * dk), unit(batch, steps, hkv * dk),
              unit(batch, steps, hkv * dv)]
    names = ["x0", "x1", "x2", "", "", ""]
    extra = [(3, past, (batch, hkv, dk, dv)),
             (4, rule.startswith("gated"), (batch, steps, hkv * dk if per_key_decay else hkv)),
             (5, rule.endswith("delta"), (batch, steps, hkv))]
    for slot, wanted, shape in extra:
        if wanted:
            value = unit(*shape)
            arrays.append(-np.abs(value) if slot == 4 else
                          1 / (1 + np.exp(-value)) if slot == 5 else value)
            names[slot] = f"x{len(arrays) - 1}"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "state"], update_rule=rule,
                            q_num_heads=hq, kv_num_heads=hkv)
    check(model_of([node], arrays, ["y", "state"], opset=27), arrays, backend, atol=1e-4)


# --- Det -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["batched", "pivoting", "singular", "one"])
def test_det(case, backend):
    x = {"batched": randn(2, 3, 5, 5),
         "pivoting": np.array([[0, 2, 1], [3, 0, 4], [1, 5, 0]], np.float32),
         "singular": np.array([[[1, 2, 3], [2, 4, 6], [0, 1, 1]], [[0, 0, 0], [1, 2, 3],
                                                                 [4, 5, 6]]], np.float32),
         "one": randn(3, 1, 1)}[case]
    node = helper.make_node("Det", ["x0"], ["y"])
    check(model_of([node], [x], ["y"]), [x], backend, atol=1e-4)


# --- RoiAlign ------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode, transform, scale", [("avg", "half_pixel", 0.5),
                                                    ("avg", "output_half_pixel", 1.0),
                                                    ("max", "half_pixel", 1.0)])
def test_roi_align_with_run_time_boxes(mode, transform, scale, backend):
    x = randn(2, 3, 8, 9)
    rois = np.array([[0.5, 1.2, 6.3, 7.9], [-2.0, -1.5, 3.0, 2.2], [4.0, 3.0, 12.5, 11.0],
                     [2.0, 2.0, 2.4, 2.3]], np.float32) / scale
    batch = np.array([1, 0, 1, 0], np.int64)
    node = helper.make_node("RoiAlign", ["x0", "x1", "x2"], ["y"], mode=mode,
                            coordinate_transformation_mode=transform, output_height=3,
                            output_width=4, sampling_ratio=2, spatial_scale=scale)
    check(model_of([node], [x, rois, batch], ["y"]), [x, rois, batch], backend, atol=1e-4)


def test_roi_align_with_an_adaptive_sampling_ratio_is_refused():
    node = helper.make_node("RoiAlign", ["x0", "x1", "x2"], ["y"], name="roi")
    model = model_of([node], [randn(1, 2, 4, 4), randn(3, 4), np.zeros(3, np.int64)], ["y"])
    with pytest.raises(LegatoError, match="RoiAlign node 'roi'.*sampling_ratio"):
        onnx_frontend.load(model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_roi_pool_with_run_time_boxes(backend):
    x = randn(2, 3, 8, 9)
    rois = np.array([[1, 0.4, 1.2, 6.3, 7.9], [0, -2.0, -1.5, 3.0, 2.2], [1, 4.0, 3.0, 12.5, 11.0],
                     [0, 2.0, 2.0, 2.4, 2.3], [1, 7.0, 1.0, 7.0, 1.0]], np.float32)
    node = helper.make_node("MaxRoiPool", ["x0", "x1"], ["y"], pooled_shape=[3, 2],
                            spatial_scale=0.9)
    model = model_of([node], [x, rois], ["y"], opset=21, out_type=F)
    check(model, [x, rois], backend, runtime=True)   # onnx's evaluator has no MaxRoiPool


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("groups, offset_groups, strides, dilations, pads, masked", [
    (1, 1, [1, 1], [1, 1], [0, 0, 0, 0], False),
    (2, 2, [2, 1], [1, 2], [1, 0, 1, 2], True)])
def test_deform_conv(groups, offset_groups, strides, dilations, pads, masked, backend):
    x, w = randn(2, 4, 6, 7), randn(6, 4 // groups, 2, 3)
    out_h = (6 + pads[0] + pads[2] - dilations[0] * 1 - 1) // strides[0] + 1
    out_w = (7 + pads[1] + pads[3] - dilations[1] * 2 - 1) // strides[1] + 1
    arrays = [x, w, randn(2, offset_groups * 6 * 2, out_h, out_w), randn(6)]
    if masked:
        arrays.append(rng.uniform(0, 1, (2, offset_groups * 6, out_h, out_w)).astype(np.float32))
    node = helper.make_node("DeformConv", [f"x{i}" for i in range(len(arrays))], ["y"],
                            group=groups, offset_group=offset_groups, strides=strides,
                            dilations=dilations, pads=pads)
    check(model_of([node], arrays, ["y"], opset=22), arrays, backend, atol=1e-4)
