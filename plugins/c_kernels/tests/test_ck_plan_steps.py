"""What the planned executor turns into steps: views of constants are no steps, and
nothing writes into a constant through them."""
import numpy as np
import pytest

import legato


def test_a_reshaped_constant_is_a_view_of_its_data_not_a_step():
    weights = np.arange(12, dtype=np.float32)
    b = legato.GraphBuilder()
    x = b.input("x", (3, 4))
    w = b.call("reshape", b.const(weights.copy()), shape=[3, 4])
    y = b.call("exp", b.call("add", w, x))  # elementwise: may run in place on a dying input
    mod = b.build(b.call("multiply", y, x))
    c = legato.compile(mod, "c_kernels")
    ops = [step.call.op for step in c._runner.prototype.steps]
    assert "reshape" not in ops and ops[0] == "add", ops
    x_in = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = legato.reference(mod)(x_in)
    for _ in range(3):  # a run that wrote into the constant would change the next one
        np.testing.assert_allclose(c(x_in), want, rtol=1e-6)
    const = next(v for call in c.module.main.calls for v in call.inputs
                 if isinstance(v, legato.ir.Const))
    np.testing.assert_array_equal(const.data.reshape(-1), weights)


def test_every_c_program_entry_matches_its_prototype():
    """An entry whose signature letters disagree with the function's prototype would be
    left out of programs silently: name it here instead."""
    from legato_c_kernels import program
    from legato_c_kernels._lib import ffi, lib
    names = [ffi.string(lib.lgk_program_call_name(c)).decode()
             for c in range(lib.lgk_program_call_count())]
    assert sorted(program.FUNCTIONS) == sorted(names)
    assert {"lgk_binary", "lgk_layer_norm", "lgk_sgemm_prepacked"} <= set(names)


def test_merged_steps_compute_what_the_steps_compute():
    from legato_c_kernels.executor import PlannedExecutor
    from legato.frontends.examples import random_inputs, transformer
    mod = transformer(seq=8, d_model=16, heads=2, ffn=32, blocks=2)
    x = random_inputs(mod)
    merged = legato.compile(mod, "c_kernels")
    separate = PlannedExecutor(merged.module, merged.backend, None, merged.fallback_calls,
                               legato.context().registry, merge_steps=False)
    stats = merged._runner.stats()
    assert stats["merged"] >= stats["steps"] // 2 and stats["calls"] < stats["steps"], stats
    assert separate.stats()["merged"] == 0
    for _ in range(2):
        np.testing.assert_array_equal(merged(*x), separate(*x))


def test_a_failing_call_in_a_program_is_named():
    from legato.ir.errors import ExecutionError
    from legato_c_kernels import program
    from legato_c_kernels.kernels import elementwise
    from legato_c_kernels._lib import lib
    x, y = np.ones(8, np.float32), np.empty(8, np.float32)
    good = elementwise.KERNELS["exp"].bind(x, out=y).call
    bad = good._replace(op="nn.relu", args=(999, *good.args[1:]))  # no such unary op
    run = program.Program([good, bad], program.encode(good) + program.encode(bad))
    with pytest.raises(ExecutionError, match="nn.relu"):
        run()
    assert run.failed == 1
    assert program.encode(good._replace(fn=lib.lgk_strerror)) is None  # not a program call


@pytest.mark.parametrize("op, weight_shape, attrs", [
    ("nn.conv2d", (8, 4, 1, 3), dict(padding=[0, 1, 0, 1])),  # a conv1d made a conv2d
    ("matmul", (6, 8), {}),
])
def test_a_reshaped_constant_weight_is_packed_once(op, weight_shape, attrs):
    """A weight reaching its GEMM through a reshape (a view of the constant, no step) is
    packed at planning like a constant weight, not packed again by every call."""
    rng = np.random.default_rng(1)
    weights = rng.standard_normal(int(np.prod(weight_shape))).astype(np.float32)
    b = legato.GraphBuilder()
    x = b.input("x", (1, 4, 1, 16) if op == "nn.conv2d" else (5, 6))
    w = b.call("reshape", b.const(weights), shape=list(weight_shape))
    mod = b.build(b.call(op, x, w, **attrs))
    c = legato.compile(mod, "c_kernels")
    runner = c._runner.prototype
    step = next(s for s in runner.steps if s.call.op == op)
    call = step.run.call  # the prepared C call: a packed weight's entry point
    assert "prepacked" in call.fn.__name__ or "direct" in call.fn.__name__, call.fn
    assert len(runner._packed) == 1
    x_in = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(c(x_in), legato.reference(mod)(x_in), rtol=1e-5, atol=1e-5)


def test_steps_on_constants_only_are_computed_once_when_planned():
    """A causal mask built from constant tables (as a decoder repeats it per layer) is
    computed by the backend's kernels when the plan is made, not on every run, into a
    buffer no later step writes over; results and steps reading inputs still run."""
    rng = np.random.default_rng(2)
    b = legato.GraphBuilder()
    x = b.input("x", (4, 4))
    rows = b.call("reshape", b.const(np.arange(4, dtype=np.float32)), shape=[4, 1])
    cols = b.const(np.arange(4, dtype=np.float32).reshape(1, 4))
    mask = b.call("where", b.call("less_equal", cols, rows), b.const(np.zeros(1, np.float32)),
                  b.const(np.full(1, -1e9, np.float32)))
    scaled = b.call("multiply", mask, 0.5)
    y = b.call("exp", b.call("add", x, scaled))  # may reuse a dying buffer in place
    mod = b.build(b.call("add", y, scaled))
    c = legato.compile(mod, "c_kernels")
    runner = c._runner.prototype
    ops = [step.call.op for step in runner.steps]
    assert ops == ["add", "exp", "add"], ops
    assert runner.stats()["computed_once"] == 3
    want = legato.reference(mod)
    for _ in range(3):  # a step writing over the mask would change the next run
        x_in = rng.standard_normal((4, 4)).astype(np.float32)
        np.testing.assert_allclose(c(x_in), want(x_in), rtol=1e-6)


def test_an_empty_constant_step_is_planned():
    """A constant step with an empty result has nothing to compute, at planning or after."""
    b = legato.GraphBuilder()
    x = b.input("x", (4, 4))
    empty = b.call("multiply", b.const(np.zeros((0, 4), np.float32)),
                   b.const(np.full(1, 2.0, np.float32)))
    mod = b.build(b.call("concat", empty, x, axis=0))
    c = legato.compile(mod, "c_kernels")
    x_in = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(c(x_in), x_in)
