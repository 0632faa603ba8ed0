"""onnxruntime's com.microsoft operators (what its transformer optimizer writes into BERT,
GPT-2 and Llama-style models), each against onnxruntime's CPU kernels on cpu_ref and
c_kernels; the fused ops stay whole; the forms legato refuses say which input and why."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402
from legato.ir.errors import LegatoError  # noqa: E402

F, I32 = TensorProto.FLOAT, TensorProto.INT32
BACKENDS = ["cpu_ref", "c_kernels"]
MS = "com.microsoft"
rng = np.random.default_rng(0)


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def ms_node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, domain=MS, **attrs)


def model_of(nodes, feeds, outputs, initializers=(), types=None):
    """A model over graph inputs `feeds` (name -> array) whose `outputs` are float32 unless
    `types` says otherwise (onnxruntime wants them typed)."""
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for name, a in feeds.items()]
    outs = [helper.make_tensor_value_info(name, (types or {}).get(name, F), None)
            for name in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), name) for name, v in initializers]
    graph = helper.make_graph(nodes, "g", inputs, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(MS, 1)])


def run_ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check(model, feeds, backend, atol=1e-5, rows=None):
    """legato against onnxruntime; `rows`: per output, an index of the part onnxruntime
    defines (the rest is left unspecified)."""
    want = run_ort(model, feeds)
    got = legato.compile(onnx_frontend.load(model), backend)(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, g.shape, w.dtype, w.shape)
        pick = (rows or {}).get(i, ...)
        np.testing.assert_allclose(g[pick], w[pick], rtol=1e-4, atol=atol, err_msg=f"output {i}")


def kept_ops(model, backend="c_kernels", keep=()):
    """The ops of the legalized module (what the backend runs); `keep`: ops the backend's
    config keeps whole (c_kernels has no attention kernel; cpu_ref keeps what it is told)."""
    config = {"backends": {backend: {"keep": list(keep)}}} if keep else None
    low = legato.legalize(onnx_frontend.load(model), backend=backend, config=config).module
    return {call.op for fn in low.functions.values() for call in fn.calls}


# --- activations, bias adds ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, inputs, attrs", [
    ("Gelu", 1, {}), ("FastGelu", 1, {}), ("FastGelu", 2, {}), ("BiasGelu", 2, {}),
    ("QuickGelu", 1, {}), ("QuickGelu", 1, {"alpha": 1.0}), ("QuickGelu", 1, {"alpha": -0.5})])
def test_activation_matches_onnxruntime(op, inputs, attrs, backend):
    feeds = {"x": randn(2, 3, 8, scale=2.0)}
    inits = [("bias", randn(8)), ("skip", randn(2, 3, 8))][:inputs - 1]
    node = ms_node(op, ["x"] + [name for name, _ in inits], ["y"], **attrs)
    check(model_of([node], feeds, ["y"], inits), feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bias_add_adds_bias_and_skip(backend):
    # onnxruntime runs BiasAdd on CUDA only: the reference is its definition
    x, bias, skip = randn(2, 4, 8), randn(8), randn(2, 4, 8)
    model = model_of([ms_node("BiasAdd", ["x", "bias", "skip"], ["y"])], {"x": x, "skip": skip},
                     ["y"], [("bias", bias)])
    got = legato.compile(onnx_frontend.load(model), backend)(x, skip)
    np.testing.assert_allclose(got, x + bias + skip, rtol=1e-6)


@pytest.mark.parametrize("op, approximate", [("Gelu", "none"), ("BiasGelu", "none"),
                                             ("FastGelu", "tanh")])
def test_gelus_stay_whole(op, approximate):
    feeds = {"x": randn(2, 8)}
    inputs = ["x", "bias"] if op == "BiasGelu" else ["x"]
    model = model_of([ms_node(op, inputs, ["y"])], feeds, ["y"], [("bias", randn(8))])
    mod = onnx_frontend.load(model)
    gelus = [c for c in mod.main.calls if c.op == "nn.gelu"]
    assert [c.attrs["approximate"] for c in gelus] == [approximate]
    assert "nn.gelu" in kept_ops(model)


# --- normalizations ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("epsilon", [None, 1e-3])
def test_skip_norms_match_onnxruntime_with_every_output(op, bias, epsilon, backend):
    feeds = {"x": randn(2, 3, 16), "skip": randn(2, 3, 16)}
    simplified = op.startswith("SkipSimplified")
    inits = [("gamma", randn(16))] + ([] if simplified else [("beta", randn(16))])
    names = ["x", "skip"] + [n for n, _ in inits]
    if bias:
        inits.append(("bias", randn(16)))
        names.append("bias")
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    outputs = ["y", "", "inv_std", "sum"] if simplified else ["y", "mean", "inv_std", "sum"]
    node = ms_node(op, names, outputs, **attrs)
    check(model_of([node], feeds, [o for o in outputs if o], inits), feeds, backend, atol=1e-4)


def test_skip_layer_norm_default_epsilon_is_onnxruntimes():
    # 1e-12: with inputs of spread 1e-4, an epsilon of 1e-5 would change the result
    feeds = {"x": randn(2, 3, 8, scale=1e-4), "skip": np.zeros((2, 3, 8), np.float32)}
    node = ms_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["y"])
    check(model_of([node], feeds, ["y"], [("gamma", np.ones(8, np.float32))]), feeds,
          "cpu_ref", atol=1e-4)


def test_skip_norms_stay_whole():
    feeds = {"x": randn(2, 3, 16), "skip": randn(2, 3, 16)}
    nodes = [ms_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta"], ["a"]),
             ms_node("SkipSimplifiedLayerNormalization", ["a", "skip", "gamma"], ["y"])]
    model = model_of(nodes, feeds, ["y"], [("gamma", randn(16)), ("beta", randn(16))])
    assert {"nn.layer_norm", "nn.rms_norm"} <= kept_ops(model)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axis, outputs", [(-1, ["y"]), (-1, ["y", "inv_std"]), (1, ["y"])])
def test_simplified_layer_norm_matches_onnxruntime(axis, outputs, backend):
    feeds = {"x": randn(2, 3, 8)}
    scale = randn(*((8,) if axis == -1 else (3, 8)))
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], outputs, axis=axis,
                            epsilon=1e-6)
    check(model_of([node], feeds, outputs, [("scale", scale)]), feeds, backend, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("segments, positions, mask", [
    (True, False, True), (False, False, False), (True, True, True), (False, True, False)])
def test_embed_layer_norm_matches_onnxruntime(segments, positions, mask, backend):
    ids = rng.integers(0, 20, (2, 5)).astype(np.int32)
    feeds = {"ids": ids}
    names = ["ids", "seg" if segments else "", "words", "pos", "segs" if segments else "",
             "gamma", "beta"]
    if segments:
        feeds["seg"] = rng.integers(0, 2, (2, 5)).astype(np.int32)
    if mask:
        # onnxruntime counts the entries equal to 1 (not the first 0, nor the nonzero ones)
        feeds["mask"] = np.array([[1, 1, 0, 1, 0], [1, 2, 1, -1, 1]], np.int32)
    names.append("mask" if mask else "")
    if positions:
        feeds["position_ids"] = np.array([[4, 3, 2, 1, 0], [0, 0, 1, 1, 6]], np.int32)
        names.append("position_ids")
    inits = [("words", randn(20, 8)), ("pos", randn(8, 8)), ("segs", randn(2, 8)),
             ("gamma", randn(8)), ("beta", randn(8))]
    outputs = ["y", "mask_index", "sum"] if mask else ["y", "", "sum"]
    node = ms_node("EmbedLayerNormalization", names, outputs, epsilon=1e-5)
    model = model_of([node], feeds, [o for o in outputs if o], inits,
                     types={"mask_index": I32})
    check(model, feeds, backend, atol=1e-4)


# --- refusals ---------------------------------------------------------------------------------

def test_an_unknown_com_microsoft_op_is_refused_by_domain_and_name():
    feeds = {"x": randn(2, 8)}
    model = model_of([ms_node("FusedMatMul", ["x", "x"], ["y"], transB=1)], feeds, ["y"])
    with pytest.raises(LegatoError, match=r"com\.microsoft\.FusedMatMul"):
        onnx_frontend.load(model)


def test_a_contrib_node_is_held_against_its_schema():
    feeds = {"x": randn(2, 8)}
    model = model_of([ms_node("QuickGelu", ["x"], ["y"], beta=1.0)], feeds, ["y"])
    with pytest.raises(LegatoError, match="'beta' is not an attribute of QuickGelu"):
        onnx_frontend.load(model)


# --- Attention (BERT, GPT-2) ------------------------------------------------------------------

HIDDEN, HEADS = 16, 2


def raw_mask(*shape):
    """A random 0/1 mask keeping key 0 of every row: a row whose keys are all masked
    sums scores near mask_filter_value (-10000), where float32 rounding alone differs."""
    mask = (rng.random(shape) > 0.3).astype(np.int32)
    mask[..., 0] = 1
    return mask


MASKS = {  # name -> mask_index of (batch 2, seq 5, total 5 + past)
    "none": lambda t: None,
    "lengths": lambda t: np.array([t - 2, t], np.int32),
    "ends_and_starts": lambda t: np.array([t - 1, t, 1, 0], np.int32),
    "raw_2d": lambda t: raw_mask(2, t),
    "raw_3d": lambda t: raw_mask(2, 5, t),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("past", [0, 3])
def test_attention_matches_onnxruntime(mask, unidirectional, past, backend):
    x = randn(2, 5, HIDDEN)
    feeds = {"x": x}
    names = ["x", "w", "b", "", ""]
    index = MASKS[mask](5 + past)
    if index is not None:
        feeds["mask"] = index
        names[3] = "mask"
    outputs = ["y", "present"]
    if past:
        feeds["past"] = randn(2, 2, HEADS, past, HIDDEN // HEADS)
        names[4] = "past"
    node = ms_node("Attention", names, outputs, num_heads=HEADS, unidirectional=unidirectional)
    inits = [("w", randn(HIDDEN, 3 * HIDDEN, scale=0.5)), ("b", randn(3 * HIDDEN))]
    check(model_of([node], feeds, outputs, inits), feeds, backend, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_with_qkv_hidden_sizes_scale_and_bias_input(backend):
    feeds = {"x": randn(2, 4, HIDDEN), "bias": randn(2, 1, 4, 4)}
    node = ms_node("Attention", ["x", "w", "", "", "", "bias"], ["y"], num_heads=HEADS,
                   qkv_hidden_sizes=[8, 8, 12], scale=0.3)
    inits = [("w", randn(HIDDEN, 28, scale=0.5))]
    check(model_of([node], feeds, ["y"], inits), feeds, backend, atol=1e-4)


def test_attention_stays_whole():
    feeds = {"x": randn(2, 5, HIDDEN), "mask": MASKS["raw_2d"](5)}
    node = ms_node("Attention", ["x", "w", "b", "mask"], ["y"], num_heads=HEADS)
    model = model_of([node], feeds, ["y"], [("w", randn(HIDDEN, 3 * HIDDEN)),
                                             ("b", randn(3 * HIDDEN))])
    assert "nn.linear" in kept_ops(model)
    assert "nn.attention" in kept_ops(model, "cpu_ref", keep=["nn.attention"])


@pytest.mark.parametrize("attrs, inputs, match", [
    ({"do_rotary": 1}, {}, "'do_rotary'"),
    ({"past_present_share_buffer": 1}, {}, "'past_present_share_buffer'"),
    ({}, {"mask": np.zeros((2, 1, 8, 8), np.int32)}, "Megatron"),
    ({}, {"mask": np.zeros(8, np.int32)}, r"\(3 \* batch \+ 2\)"),
])
def test_attention_forms_legato_refuses_say_why(attrs, inputs, match):
    feeds = {"x": randn(2, 4, HIDDEN), **inputs}
    node = ms_node("Attention", ["x", "w", "", *inputs], ["y"], num_heads=HEADS, **attrs)
    model = model_of([node], feeds, ["y"], [("w", randn(HIDDEN, 3 * HIDDEN))])
    with pytest.raises(LegatoError, match=f"Attention node .*{match}"):
        onnx_frontend.load(model)


# --- MultiHeadAttention -----------------------------------------------------------------------

SIZE = HIDDEN // HEADS
MHA_FORMS = {  # name -> (feeds of query, key, value; how many of the three inputs)
    "separate": lambda: {"q": randn(2, 4, HIDDEN), "k": randn(2, 6, HIDDEN),
                         "v": randn(2, 6, HIDDEN)},
    "self": lambda: {"q": randn(2, 4, HIDDEN), "k": randn(2, 4, HIDDEN),
                     "v": randn(2, 4, HIDDEN)},
    "packed_qkv": lambda: {"q": randn(2, 4, HEADS, 3, SIZE)},
    "packed_kv": lambda: {"q": randn(2, 4, HIDDEN), "k": randn(2, 6, HEADS, 2, SIZE)},
    "split_kv": lambda: {"q": randn(2, 4, HIDDEN), "k": randn(2, HEADS, 6, SIZE),
                         "v": randn(2, HEADS, 6, SIZE)},
}


def mha_model(form, bias=False, mask=None, extra=False, past=0, attrs=None):
    feeds = MHA_FORMS[form]()
    names = list(feeds) + [""] * (3 - len(feeds))
    kv_len = 4 if form in ("self", "packed_qkv") else 6
    inits = []
    if bias:
        inits.append(("bias", randn(3 * HIDDEN)))
    names.append("bias" if bias else "")
    total = kv_len + past
    if mask is not None:
        feeds["mask"] = {"lengths": np.array([total - 2, total], np.int32),
                         "raw_2d": raw_mask(2, total), "raw_3d": raw_mask(2, 4, total)}[mask]
    names.append("" if mask is None else "mask")
    if extra:
        feeds["extra"] = randn(1, HEADS, 4, total)
    names.append("extra" if extra else "")
    outputs = ["y"]
    if past:
        feeds["past_k"], feeds["past_v"] = randn(2, HEADS, past, SIZE), randn(2, HEADS, past, SIZE)
        names += ["past_k", "past_v"]
        outputs += ["present_k", "present_v"]
    node = ms_node("MultiHeadAttention", names, outputs, num_heads=HEADS, **(attrs or {}))
    return model_of([node], feeds, outputs, inits), feeds


def unpacked(model, feeds):
    """The same MultiHeadAttention with packed QKV or KV given as separate (batch, seq,
    hidden) inputs: onnxruntime's CPU kernel runs only those."""
    node = model.graph.node[0]
    names, separate = list(node.input), {}
    for name, array in feeds.items():
        if array.ndim == 5:
            batch, seq = array.shape[:2]
            parts = [array[:, :, :, i, :].reshape(batch, seq, -1) for i in range(array.shape[3])]
            slots = ["q", "k", "v"][3 - len(parts):]
            separate.update(zip(slots, parts))
        else:
            separate[name] = array
    names[:3] = ["q", "k", "v"]
    plain = ms_node("MultiHeadAttention", names, list(node.output),
                    **{a.name: helper.get_attribute_value(a) for a in node.attribute})
    inits = [(t.name, numpy_helper.to_array(t)) for t in model.graph.initializer]
    return model_of([plain], separate, list(node.output), inits), separate


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form, bias", [(form, bias) for form in sorted(MHA_FORMS)
                                        for bias in (False, True)
                                        if not (bias and form == "split_kv")])
def test_multi_head_attention_forms_match_onnxruntime(form, bias, backend):
    model, feeds = mha_model(form, bias=bias)
    if form.startswith("packed"):
        reference, separate = unpacked(model, feeds)
        want = run_ort(reference, separate)[0]
        got = legato.compile(onnx_frontend.load(model), backend)(*feeds.values())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    else:
        check(model, feeds, backend, atol=1e-4)


def test_multi_head_attention_bias_with_split_key_is_refused():
    model, _ = mha_model("split_kv", bias=True)
    with pytest.raises(LegatoError, match="MultiHeadAttention node .*bias with key and value "
                                          "split into heads"):
        onnx_frontend.load(model)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask", [None, "lengths", "raw_2d", "raw_3d"])
@pytest.mark.parametrize("extra, past, unidirectional", [
    (False, 0, 0), (True, 0, 0), (False, 0, 1), (False, 3, 1), (True, 3, 0)])
def test_multi_head_attention_masks_and_past_match_onnxruntime(mask, extra, past,
                                                               unidirectional, backend):
    model, feeds = mha_model("self", bias=True, mask=mask, extra=extra, past=past,
                             attrs={"unidirectional": unidirectional, "scale": 0.4})
    check(model, feeds, backend, atol=1e-4)


def test_multi_head_attention_qk_output_is_refused():
    feeds = {"q": randn(2, 4, HIDDEN)}
    node = ms_node("MultiHeadAttention", ["q", "q", "q"], ["y", "", "", "qk"], num_heads=HEADS)
    with pytest.raises(LegatoError, match="MultiHeadAttention node .*output 3 \\(qk\\)"):
        onnx_frontend.load(model_of([node], feeds, ["y", "qk"]))


@pytest.mark.parametrize("name, index, match", [
    ("past_sequence_length", 8, "input 8 .*shared between past and present"),
    ("cache_indirection", 9, "input 9 .*beam")])
def test_multi_head_attention_buffer_forms_are_refused(name, index, match):
    feeds = {"q": randn(2, 4, HIDDEN), "extra": np.zeros((2, 1, 4), np.int32)}
    names = ["q", "q", "q"] + [""] * (index - 3) + ["extra"]
    model = model_of([ms_node("MultiHeadAttention", names, ["y"], num_heads=HEADS)], feeds, ["y"])
    with pytest.raises(LegatoError, match=f"MultiHeadAttention node .*{match}"):
        onnx_frontend.load(model)


# --- RotaryEmbedding --------------------------------------------------------------------------

def rope_caches(max_seq, half):
    angles = np.arange(max_seq)[:, None] / 10000 ** (np.arange(half)[None, :] / half)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["bsh", "bnsh"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["start", "per_token"])
@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_rotary_embedding_matches_onnxruntime(layout, interleaved, positions, rotary_dim,
                                              backend):
    batch, seq, heads, size = 2, 3, 2, 8
    x = randn(batch, seq, heads * size) if layout == "bsh" else randn(batch, heads, seq, size)
    half = (rotary_dim or size) // 2
    cos, sin = rope_caches(16, half)
    pos = np.array([5], np.int64) if positions == "start" else \
        rng.integers(0, 16, (batch, seq)).astype(np.int64)
    attrs = {"interleaved": interleaved}
    if rotary_dim or layout == "bsh":
        attrs["num_heads"] = heads
    if rotary_dim:
        attrs["rotary_embedding_dim"] = rotary_dim
    feeds = {"x": x, "pos": pos}
    node = ms_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], **attrs)
    check(model_of([node], feeds, ["y"], [("cos", cos), ("sin", sin)]), feeds, backend)


# --- GroupQueryAttention ----------------------------------------------------------------------

Q_HEADS, KV_HEADS, HEAD = 4, 2, 16  # onnxruntime rotates head sizes of multiples of 16


def gqa_case(seq=4, past=0, seqlens=None, packed=False, rotary=False, attrs=None, extra=False,
             batch=2, total=None):
    """(model, feeds, rows): a GroupQueryAttention over `batch` entries that hold
    `seqlens` + 1 tokens after the step; `rows` picks the output rows onnxruntime defines
    (those of each entry's real tokens)."""
    seqlens = np.array(seqlens if seqlens is not None else [past + seq - 1] * batch, np.int32)
    total = total or max(int(seqlens.max()) + 1, past + seq if past else seq)
    kv_width = KV_HEADS * HEAD
    if packed:
        feeds = {"qkv": randn(batch, seq, Q_HEADS * HEAD + 2 * kv_width)}
        names = ["qkv", "", ""]
    else:
        feeds = {"q": randn(batch, seq, Q_HEADS * HEAD), "k": randn(batch, seq, kv_width),
                 "v": randn(batch, seq, kv_width)}
        names = ["q", "k", "v"]
    if past:
        feeds["past_k"] = randn(batch, KV_HEADS, past, HEAD)
        feeds["past_v"] = randn(batch, KV_HEADS, past, HEAD)
    names += ["past_k", "past_v"] if past else ["", ""]
    feeds["seqlens"] = seqlens
    names += ["seqlens", "total"]
    inits = [("total", np.array(total, np.int32))]
    if rotary:
        cos, sin = rope_caches(32, HEAD // 2)
        inits += [("cos", cos), ("sin", sin)]
        names += ["cos", "sin"]
    if extra:
        feeds["extra"] = randn(batch, 1, seq, max(total, past))
        names += [""] * (10 - len(names)) + ["extra"]
    outputs = ["y", "present_k", "present_v"]
    node = ms_node("GroupQueryAttention", names, outputs, num_heads=Q_HEADS,
                   kv_num_heads=KV_HEADS, do_rotary=int(rotary), **(attrs or {}))
    model = model_of([node], feeds, outputs, inits)
    tokens = seqlens + 1
    pasts = np.maximum(tokens - seq, 0)
    out_rows = np.arange(seq)[None, :, None] < (tokens - pasts)[:, None, None]
    cache_rows = np.arange(max(total, past))[None, None, :, None] < tokens[:, None, None, None]
    rows = {0: np.broadcast_to(out_rows, (batch, seq, Q_HEADS * HEAD)),
            1: np.broadcast_to(cache_rows, (batch, KV_HEADS, max(total, past), HEAD)),
            2: np.broadcast_to(cache_rows, (batch, KV_HEADS, max(total, past), HEAD))}
    return model, feeds, rows


GQA_CASES = {
    "prompt": {}, "prompt_packed": {"packed": True},
    "prompt_padded": {"seqlens": [3, 1]},
    "decode": {"seq": 1, "past": 4}, "decode_ragged": {"seq": 1, "past": 4, "seqlens": [4, 2]},
    # a cache buffer longer than the tokens it holds (total_sequence_length < its length)
    "decode_in_longer_buffer": {"seq": 1, "past": 8, "seqlens": [4, 6], "total": 7},
    # onnxruntime takes several new tokens after a past for one batch entry only
    "chunk_after_past": {"seq": 2, "past": 3, "batch": 1},
    "prompt_rotary": {"rotary": True},
    "decode_rotary_interleaved": {"seq": 1, "past": 4, "seqlens": [4, 3], "rotary": True,
                                  "attrs": {"rotary_interleaved": 1}},
    "window": {"seq": 6, "attrs": {"local_window_size": 2}},
    "window_decode": {"seq": 1, "past": 5, "attrs": {"local_window_size": 3}},
    "softcap": {"attrs": {"softcap": 2.0, "scale": 0.7}},
    "attention_bias": {"seq": 2, "past": 3, "extra": True, "batch": 1},
    "bidirectional": {"attrs": {"causal": 0}},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(GQA_CASES))
def test_group_query_attention_matches_onnxruntime(case, backend):
    model, feeds, rows = gqa_case(**GQA_CASES[case])
    check(model, feeds, backend, atol=1e-4, rows=rows)


def test_group_query_attention_stays_whole():
    model, _, _ = gqa_case(seq=1, past=4, rotary=True)
    assert "nn.attention" in kept_ops(model, "cpu_ref", keep=["nn.attention"])


@pytest.mark.parametrize("change, match", [
    ({"attrs": {"k_quant_type": "PER_TENSOR"}}, "'k_quant_type' = 'PER_TENSOR': a quantized"),
    ({"attrs": {"smooth_softmax": 1}}, "'smooth_softmax' = 1 is not imported"),
    ({"total_input": True}, r"input 6 \('total'\) must be a constant"),
])
def test_group_query_attention_forms_legato_refuses_say_why(change, match):
    model, _, _ = gqa_case(attrs=change.get("attrs"))
    if change.get("total_input"):   # total_sequence_length given at run time
        total = model.graph.initializer.pop()
        model.graph.input.append(helper.make_tensor_value_info(total.name, I32, []))
    with pytest.raises(LegatoError, match=f"GroupQueryAttention node .*{match}"):
        onnx_frontend.load(model)


# --- models through onnxruntime's transformer optimizer ---------------------------------------

BATCH, TOKENS, VOCAB = 2, 8, 100


def hf_model(kind):
    """A tiny transformers BERT, GPT-2 or Qwen3 (random weights, nothing downloaded)
    returning its last hidden state, and its inputs (token ids; a mask padding the second
    entry)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=32, initializer_range=0.1,
            attn_implementation="eager")
        model = transformers.BertModel(config)
    elif kind == "qwen3":   # Llama-style: RMS norms, rotary embeddings, grouped KV heads
        config = transformers.Qwen3Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
            use_cache=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            initializer_range=0.1, attn_implementation="eager")
        model = transformers.Qwen3Model(config)
    else:
        config = transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=4, n_positions=32, use_cache=False,
            bos_token_id=1, eos_token_id=2, initializer_range=0.1, attn_implementation="eager")
        model = transformers.GPT2Model(config)

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model.eval()

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

    ids = torch.randint(4, VOCAB, (BATCH, TOKENS))
    mask = torch.ones(BATCH, TOKENS, dtype=torch.int64)
    mask[1, TOKENS - 3:] = 0
    return Hidden(), (ids, mask)


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """(kind, opt_level) -> (model optimized by onnxruntime.transformers.optimizer, feeds):
    exported once with torch's TorchScript exporter; opt_level 0 runs the optimizer's
    Python fusions alone, None its default (onnxruntime's own graph rewrites first)."""
    torch = pytest.importorskip("torch")
    from onnxruntime.transformers.optimizer import optimize_model
    exported, cache = {}, {}

    def get(kind, level=0):
        if kind not in exported:
            module, inputs = hf_model(kind)
            path = tmp_path_factory.mktemp(kind) / f"{kind}.onnx"
            with torch.no_grad():
                torch.onnx.export(module, inputs, str(path), input_names=["ids", "mask"],
                                  output_names=["hidden"], opset_version=14, dynamo=False)
            exported[kind] = path, {"ids": inputs[0].numpy(), "mask": inputs[1].numpy()}
        if (kind, level) not in cache:
            path, feeds = exported[kind]
            fused = optimize_model(str(path), model_type=kind, num_heads=4, hidden_size=32,
                                   opt_level=level)
            target = path.with_name(f"{kind}_o{level}.onnx")
            fused.save_model_to_file(str(target))   # as people ship it
            cache[kind, level] = onnx.load(str(target)), feeds
        return cache[kind, level]
    return get


FUSED = {"bert": {"Attention", "SkipLayerNormalization", "BiasGelu"},
         "gpt2": {"SkipLayerNormalization", "FastGelu"},
         "qwen3": {"SkipSimplifiedLayerNormalization"}}
WHOLE = {"bert": {"nn.layer_norm", "nn.gelu"}, "gpt2": {"nn.layer_norm", "nn.gelu"},
         "qwen3": {"nn.rms_norm"}}


@pytest.mark.parametrize("kind", ["bert", "gpt2", "qwen3"])
def test_optimized_model_imports_whole_and_matches_onnxruntime(optimized, kind):
    model, feeds = optimized(kind)
    contrib_ops = {n.op_type for n in model.graph.node if n.domain == MS}
    assert FUSED[kind] <= contrib_ops   # what the optimizer fused, legato must import
    want = run_ort(model, feeds)[0]
    module = onnx_frontend.load(model)
    # c_kernels keeps layer norms and GELUs whole; attention, which it has no kernel for,
    # stays whole on cpu_ref when its config keeps it
    keep = {"backends": {"cpu_ref": {"keep": ["nn.attention"]}}}
    whole = {"cpu_ref": {"nn.attention"} if "Attention" in FUSED[kind] else set(),
             "c_kernels": WHOLE[kind]}
    for backend, config in (("cpu_ref", keep), ("c_kernels", None)):
        compiled = legato.compile(module, backend, config=config)
        np.testing.assert_allclose(compiled(*feeds.values()), want, rtol=1e-4, atol=1e-4,
                                   err_msg=backend)
        ops = {call.op for fn in compiled.module.functions.values() for call in fn.calls}
        assert whole[backend] <= ops, backend


# --- float16 models (as the optimizer writes them for GPUs) -----------------------------------

def to_half(model, feeds):
    """The model with its float32 initializers, inputs and outputs in float16 (statistics
    outputs `stats` stay float32, as onnxruntime defines them)."""
    for tensor in model.graph.initializer:
        array = numpy_helper.to_array(tensor)
        if array.dtype == np.float32:
            tensor.CopyFrom(numpy_helper.from_array(array.astype(np.float16), tensor.name))
    for value in list(model.graph.input) + list(model.graph.output):
        if value.type.tensor_type.elem_type == F and value.name not in ("mean", "inv_std"):
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    return model, {k: a.astype(np.float16) if a.dtype == np.float32 else a
                   for k, a in feeds.items()}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["skip_layer_norm", "group_query_attention"])
def test_float16_models_match_onnxruntime(case, backend):
    if case == "skip_layer_norm":
        feeds = {"x": randn(2, 3, 16), "skip": randn(2, 3, 16)}
        outputs = ["y", "mean", "inv_std", "sum"]
        node = ms_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta"], outputs)
        model = model_of([node], feeds, outputs, [("gamma", randn(16)), ("beta", randn(16))])
    else:
        model, feeds, _ = gqa_case(seq=1, past=4, rotary=True)
    model, feeds = to_half(model, feeds)
    want = run_ort(model, feeds)
    got = legato.compile(onnx_frontend.load(model), backend)(*feeds.values())
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=4e-3,
                                   atol=4e-3)


def test_bert_at_the_optimizers_default_level_matches_onnxruntime(optimized):
    # onnxruntime's own rewrites run first: linear layers become Gemm, Gelu stays unfused
    model, feeds = optimized("bert", None)
    assert {"SkipLayerNormalization", "Gelu"} <= {n.op_type for n in model.graph.node
                                                  if n.domain == MS}
    got = legato.compile(onnx_frontend.load(model), "cpu_ref")(*feeds.values())
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
