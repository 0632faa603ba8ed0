"""The c_kernels backend end to end: kept ops, the planned executor, fallback, threads."""
import numpy as np
import pytest

import legato
from legato.frontends.examples import cnn, mlp, random_inputs, transformer


def test_c_kernels_is_installed_and_registered():
    import legato_c_kernels._lib  # noqa: F401  (make test builds it; a failure here is real)
    assert "c_kernels" in legato.list_backends(), legato.plugin_problems()


def rel_error(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want))) / float(np.max(np.abs(want)))


MODELS = {"transformer": lambda: transformer(seq=17, d_model=32, heads=4, ffn=64, blocks=2),
          "mlp": lambda: mlp(batch=3, sizes=(17, 129, 33, 10)),
          "cnn": lambda: cnn(batch=2, size=17)}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_whole_models_match_cpu_ref(name):
    mod = MODELS[name]()
    c = legato.compile(mod, "c_kernels")
    for seed in range(3):
        x = random_inputs(mod, seed)
        assert rel_error(c(*x), legato.compile(mod, "cpu_ref")(*x)) <= 1e-4


def _all_ops(module) -> set:
    """The ops of every function (a fused GEMM epilogue holds its calls in one)."""
    return {call.op for fn in module.functions.values() for call in fn.calls}


def test_high_level_ops_are_kept_whole():
    c = legato.compile("example:transformer", "c_kernels")
    ops = _all_ops(c.module)
    assert {"nn.layer_norm", "nn.linear", "nn.softmax", "nn.gelu"} <= ops
    assert c.report.ops("decomposed") == {}
    kept_cnn = _all_ops(legato.compile("example:cnn", "c_kernels").module)
    assert {"nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d"} <= kept_cnn
    assert "nn.batch_norm" not in kept_cnn  # no C kernel: decomposed into what C runs


def test_nhwc_conv_is_decomposed_not_kept():
    b = legato.GraphBuilder()
    x = b.input("x", (1, 5, 5, 3))
    w = b.const(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32))
    mod = b.build(b.call("nn.conv2d", x, w, None, data_layout="NHWC", kernel_layout="OHWI"))
    c = legato.compile(mod, "c_kernels")
    assert "nn.conv2d" not in {call.op for call in c.module.main.calls}
    x_in = random_inputs(mod)
    assert rel_error(c(*x_in), legato.reference(mod)(*x_in)) <= 1e-5


def test_what_c_cannot_run_falls_back_to_cpu_ref():
    b = legato.GraphBuilder()
    x = b.input("x", (4, 6))
    y = b.call("concat", b.call("exp", x), b.call("where", b.call("less", x, 0.0), x, 1.0),
               axis=0)
    y = b.call("pad", y, pads=[1, 0, 1, 0], mode="reflect")
    mod = b.build(b.call("nn.softmax", y))
    c = legato.compile(mod, "c_kernels")
    # concat, where and less move memory in c_kernels (any dtype); a reflecting pad
    # it has no kernel for
    assert c.report.ops("fallback") == {"pad": 1}
    x_in = random_inputs(mod)
    assert rel_error(c(*x_in), legato.reference(mod)(*x_in)) <= 1e-6


def test_planned_executor_reuses_buffers_and_replays_c_calls():
    mod = transformer(seq=16, d_model=32, heads=2, ffn=64, blocks=3)
    c = legato.compile(mod, "c_kernels")
    stats = c._runner.stats()
    intermediates = sum(v.type.size * 4 for call in c.module.main.calls for v in call.outputs)
    assert stats["arena_bytes"] < intermediates / 3, stats
    assert stats["replayed"] == stats["steps"]
    reshapes = sum(call.op == "reshape" for call in c.module.main.calls)
    assert stats["steps"] <= len(c.module.main.calls) - reshapes  # reshape is a view


def test_gemm_epilogue_fusion():
    b = legato.GraphBuilder()
    x = b.input("x", (5, 7))
    w = b.const(np.random.default_rng(1).standard_normal((7, 9)).astype(np.float32))
    bias = b.const(np.random.default_rng(2).standard_normal(9).astype(np.float32))
    y = b.call("nn.relu", b.call("add", b.call("matmul", x, w), bias))
    mod = b.build(b.call("nn.silu", b.call("nn.linear", y, b.const(np.ones((3, 9), np.float32)))))
    x_in = random_inputs(mod)
    # without recomposition the matmul + add + relu chain is one fused matmul step
    c = legato.compile(mod, "c_kernels", config={"backends": {"c_kernels": {"recompose": False}}})
    assert [call.op for _, call, _ in c._runner.steps] == ["matmul", "nn.linear"]
    assert rel_error(c(*x_in), legato.reference(mod)(*x_in)) <= 1e-5
    # by default matmul + add is recovered as nn.linear, the relu still in its epilogue
    c = legato.compile(mod, "c_kernels")
    assert [call.op for _, call, _ in c._runner.steps] == ["nn.linear", "nn.linear"]
    assert rel_error(c(*x_in), legato.reference(mod)(*x_in)) <= 1e-5


@pytest.mark.parametrize("size", [2, 9])
def test_conv_weights_packed_and_activation_fused(size):
    """A constant conv weight is packed once; a following relu runs in the conv's
    epilogue; a depthwise conv (groups == channels) takes the direct kernel."""
    from legato_c_kernels.kernels import PackedConvWeight
    rng = np.random.default_rng(3)
    b = legato.GraphBuilder()
    x = b.input("x", (1, 8, size, size))
    w = b.const(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    dw = b.const(rng.standard_normal((16, 1, 3, 3)).astype(np.float32))
    conv = dict(strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1])
    y = b.call("nn.relu", b.call("nn.conv2d", x, w, groups=1, **conv))
    mod = b.build(b.call("nn.relu", b.call("nn.conv2d", y, dw, groups=16, **conv)))
    c = legato.compile(mod, "c_kernels")
    steps = c._runner.steps
    assert [call.op for _, call, _ in steps] == ["nn.conv2d", "nn.conv2d"]
    assert isinstance(steps[0][0].call.args, tuple) and steps[0][0].direct
    assert any(isinstance(v, PackedConvWeight)
               for v in c._runner.prototype._packed.values())
    x_in = random_inputs(mod)
    assert rel_error(c(*x_in), legato.reference(mod)(*x_in)) <= 1e-5


def test_results_are_fresh_arrays_each_run():
    mod = legato.load_model("example:mlp")
    c = legato.compile(mod, "c_kernels")
    x1, x2 = random_inputs(mod, 1), random_inputs(mod, 2)
    first = c(*x1)
    kept = first.copy()
    second = c(*x2)
    np.testing.assert_array_equal(first, kept)
    assert not np.shares_memory(first, second)


def test_wrong_inputs_are_errors_not_crashes():
    c = legato.compile("example:mlp", "c_kernels")
    with pytest.raises(legato.ExecutionError, match="input 'x' must be float32"):
        c(np.zeros((8, 64), np.float64))
    with pytest.raises(legato.ExecutionError, match=r"got float32\[8, 65\]"):
        c(np.zeros((8, 65), np.float32))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_thread_counts_agree(monkeypatch, threads):
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    mod = mlp(batch=64, sizes=(256, 512, 10))
    x = random_inputs(mod)
    assert rel_error(legato.compile(mod, "c_kernels")(*x), legato.reference(mod)(*x)) <= 1e-5


def test_random_graphs_against_cpu_ref():
    """Bounded fuzzing: random shapes (1, 3, 17, 129) through linear, conv and norm layers."""
    rng = np.random.default_rng(0)
    sizes = [1, 3, 17, 129]
    for trial in range(12):
        b = legato.GraphBuilder()
        batch, n_in, n_out = (int(rng.choice(sizes)) for _ in range(3))
        x = b.input("x", (batch, n_in))
        w = b.const((rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32))
        h = b.call("nn.linear", x, w, b.const(rng.standard_normal(n_out).astype(np.float32)))
        h = b.call(str(rng.choice(["nn.relu", "nn.gelu", "nn.silu", "tanh"])), h)
        h = b.call("nn.layer_norm", h, None, None)
        side = int(rng.choice([3, 5, 8]))
        img = b.call("reshape", b.call("matmul", h, b.const(
            rng.standard_normal((n_out, side * side)).astype(np.float32))),
                     shape=[batch, 1, side, side])
        k = b.const(rng.standard_normal((2, 1, 3, 3)).astype(np.float32))
        y = b.call("nn.conv2d", img, k, None, padding=[1, 1, 1, 1])
        mod = b.build(b.call("nn.softmax", b.call("flatten", y), axis=-1))
        inputs = random_inputs(mod, trial)
        got = legato.compile(mod, "c_kernels")(*inputs)
        assert rel_error(got, legato.reference(mod)(*inputs)) <= 1e-4, (trial, batch, n_in, n_out)


def test_results_that_alias_inputs_or_constants():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    same = b.call("clip", x)                              # decomposes to x itself
    view = b.call("reshape", x, shape=[3, 2])             # a view of the input
    const = b.call("reshape", b.const(np.arange(6, dtype=np.float32)), shape=[2, 3])
    mod = b.build(same, view, const, b.call("exp", x))
    c = legato.compile(mod, "c_kernels")
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = c(data)
    want = legato.reference(mod)(data)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert not any(np.shares_memory(g, data) for g in got)


TWICE = """
func @main(%x: float32[4, 5]) -> (float32[4, 5], float32[4, 5]) {
  %1 = call(%x) {"callee": "f"} : float32[4, 5]
  %2 = call(%1) {"callee": "f"} : float32[4, 5]
  %3 = call(%2, %x) {"callee": "g"} : float32[4, 5]
  return %3, %1
}

func @f(%a: float32[4, 5]) -> (float32[4, 5]) {
  %1 = exp(%a) : float32[4, 5]
  %2 = tanh(%1) : float32[4, 5]
  return %2
}

func @g(%a: float32[4, 5], %b: float32[4, 5]) -> (float32[4, 5]) {
  %1 = add(%a, %b) : float32[4, 5]
  return %a
}
"""


@pytest.mark.parametrize("how", ["fused", "partitioned", "called twice"])
def test_modules_with_functions_are_planned_whole(how):
    """Functions main calls are inlined into one plan (a copy per call site), not run by
    the interpreter; results that are a callee's parameter stay correct."""
    if how == "called twice":
        mod = legato.parse(TWICE)
    else:
        mod = transformer(seq=9, d_model=32, heads=4, ffn=64, blocks=1)
        mod = legato.fuse(mod) if how == "fused" else legato.partition(mod, ["c_kernels"])
        mod = getattr(mod, "module", mod)
    assert len(mod.functions) > 1
    c = legato.compile(mod, "c_kernels")
    stats = c._runner.stats()
    assert type(c._runner).__name__ == "PlannedExecutor" and stats["replayed"] == stats["steps"]
    x = random_inputs(mod, 3)
    for got, want in zip(legato.runtime.interpreter.as_tuple(c(*x)),
                         legato.runtime.interpreter.as_tuple(legato.reference(mod)(*x))):
        assert rel_error(got, want) <= 1e-5


def _boundary_module(fallback_reads_input: bool):
    b = legato.GraphBuilder()
    x = b.input("x", (4, 6))
    s = b.call("sigmoid", x)                       # a result a later step reads too
    t = b.call("tanh", b.call("multiply", s, x))   # a result only written
    view = b.call("reshape", t, shape=[6, 4])      # a view of a result
    results = [s, t, view, t]                      # t returned twice
    if fallback_reads_input:                       # cpu_ref reads x and s: both copied
        results.append(b.call("where", b.call("less", x, 0.0), x, s))
    return b.build(*results)


@pytest.mark.parametrize("fallback_reads_input", [False, True])
def test_inputs_and_results_passed_in_place_where_the_plan_allows(fallback_reads_input):
    """The caller's input is read in place and a result written straight into a fresh
    array when every step touching them does so through a declared C argument; the
    others are copied. Either way results are the reference's, never share memory, and
    the caller's input is never written."""
    mod = _boundary_module(fallback_reads_input)
    c = legato.compile(mod, "c_kernels")
    stats = c._runner.stats()
    assert stats["inputs_in_place"] == (0 if fallback_reads_input else 1), stats
    assert stats["results_in_place"] == (1 if fallback_reads_input else 2), stats  # s, t
    runs = []
    for seed in (1, 2):
        data = np.random.default_rng(seed).standard_normal((6, 4)).astype(np.float32).T
        kept = data.copy()  # a transposed view: not C-contiguous, passed as a copy
        got = c(data)
        np.testing.assert_array_equal(data, kept)
        for g, w in zip(got, legato.reference(mod)(kept)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
        assert not any(np.shares_memory(g, h) for i, g in enumerate(got) for h in got[i + 1:])
        runs.append(got)
    assert not any(np.shares_memory(g, h) for g in runs[0] for h in runs[1])
    np.testing.assert_array_equal(runs[0][1], runs[0][3])


def test_benchmark_models_pass_their_input_and_result_in_place():
    for mod in (mlp(batch=4, sizes=(16, 32, 8)), transformer(seq=8, d_model=16, heads=2,
                                                              ffn=32, blocks=1)):
        stats = legato.compile(mod, "c_kernels")._runner.stats()
        assert stats["inputs_in_place"] == 1 and stats["results_in_place"] == 1, stats
