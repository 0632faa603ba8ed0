"""A 1x1 conv's residual add (ResNet's shortcut) and the activation after it fused into
the conv's C call: a primitive function in the compiled module with `residual` set, one
plan step, the results those of the separate calls on cpu_ref."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato_c_kernels.fusion import FUSION

NO_RECOMPOSE = {"backends": {"c_kernels": {"recompose": False}}}
RNG = np.random.default_rng(24)


def _w(*shape):
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _conv(b, x, c_in, c_out, k=1, stride=1, pad=0):
    return b.call("nn.conv2d", x, b.const(_w(c_out, c_in, k, k)),
                  b.const(RNG.standard_normal(c_out).astype(np.float32)),
                  strides=[stride, stride], padding=[pad] * 4)


def _fused(module) -> list:
    return [fn for fn in module.functions.values()
            if fn.kind == "primitive" and fn.attrs.get("fusion") == FUSION]


def _check(mod, *shapes):
    c = legato.compile(mod, "c_kernels", config=NO_RECOMPOSE)
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    np.testing.assert_allclose(c(*xs), legato.reference(mod)(*xs), rtol=1e-5, atol=1e-5)
    return c


@pytest.mark.parametrize("hw,stride,act", [(9, 1, "nn.relu"), (2, 1, "nn.relu"),
                                           (11, 2, None), (40, 1, "nn.relu")])
def test_a_pointwise_conv_takes_its_residual_add_and_activation(hw, stride, act):
    """Maps with filters as the GEMM's rows (9^2 and 40^2) and
    pixels as rows (2^2), and a strided 1x1 conv."""
    b = legato.GraphBuilder()
    x, shortcut = b.input("x", (1, 8, hw, hw)), b.input("s", (1, 96, *[(hw - 1) // stride + 1] * 2))
    y = b.call("add", shortcut, _conv(b, x, 8, 96, stride=stride))
    mod = b.build(b.call(act, y) if act else y)
    c = _check(mod, (1, 8, hw, hw), (1, 96, (hw - 1) // stride + 1, (hw - 1) // stride + 1))
    (fn,) = _fused(c.module)
    assert fn.attrs["residual"] is True and fn.attrs["bias"] is False
    assert [call.op for call in fn.calls] == ["nn.conv2d", "add"] + ([act] if act else [])
    assert [call.op for _, call, _ in c._runner.steps] == ["nn.conv2d"]  # one C call


def test_the_sum_of_two_convs_fuses_into_one_of_them():
    """ResNet's first block of a stage: the main branch's last 1x1 conv plus the
    shortcut's strided 1x1 conv; the add goes with one conv, the other is its input."""
    b = legato.GraphBuilder()
    x = b.input("x", (1, 16, 14, 14))
    main = _conv(b, b.call("nn.relu", _conv(b, x, 16, 8, k=3, stride=2, pad=1)), 8, 32)
    mod = b.build(b.call("nn.relu", b.call("add", main, _conv(b, x, 16, 32, stride=2))))
    c = _check(mod, (1, 16, 14, 14))
    assert sum(bool(fn.attrs.get("residual")) for fn in _fused(c.module)) == 1
    assert "nn.conv2d + add + nn.relu x1" in c.report.summary()


def test_a_3x3_conv_or_a_broadcast_add_is_not_a_residual():
    b = legato.GraphBuilder()
    x, s = b.input("x", (1, 4, 10, 10)), b.input("s", (1, 6, 10, 10))
    y = b.call("add", _conv(b, x, 4, 6, k=3, pad=1), s)  # the direct conv: no residual
    z = b.call("add", _conv(b, y, 6, 6), b.const(np.ones((1, 6, 1, 1), np.float32)))
    c = _check(b.build(b.call("nn.relu", z)), (1, 4, 10, 10), (1, 6, 10, 10))
    assert not any(fn.attrs.get("residual") for fn in _fused(c.module))


def _written_over_residual(c) -> list[bool]:
    """Per fused residual conv of the plan: is its output buffer its residual's?"""
    from legato_c_kernels._lib import ffi
    calls = [run.call for run, _, _ in c._runner.steps
             if "residual" in getattr(getattr(run, "call", None), "fn", print).__name__]
    address = lambda arg: int(ffi.cast("intptr_t", arg))  # noqa: E731
    return [address(call.args[7]) == address(call.args[9]) for call in calls]


@pytest.mark.parametrize("hw", [9, 2, 40])
def test_a_residual_that_dies_at_the_conv_is_written_over(hw):
    """The shortcut is a value of the model read by nothing after the conv: the conv
    writes its result over it, adding onto it (filters as the GEMM's rows at 9^2 and
    40^2, pixels as rows at 2^2); the results are those of cpu_ref."""
    b = legato.GraphBuilder()
    x = b.input("x", (1, 8, hw, hw))
    shortcut = b.call("nn.relu", _conv(b, x, 8, 96))
    y = b.call("nn.relu", b.call("add", _conv(b, b.call("nn.relu", _conv(b, x, 8, 16)), 16, 96),
                                 shortcut))
    c = _check(b.build(y), (1, 8, hw, hw))
    assert _written_over_residual(c) == [True]


def test_a_residual_read_later_or_by_the_conv_itself_keeps_its_buffer():
    """The shortcut is read again after the fused conv (it must survive it), and a conv
    of r plus r itself (the conv reads what it would write over): neither in place."""
    b = legato.GraphBuilder()
    x = b.input("x", (1, 8, 12, 12))
    s = b.call("nn.relu", _conv(b, x, 8, 32))
    y = b.call("nn.relu", b.call("add", _conv(b, b.call("nn.relu", _conv(b, x, 8, 16)), 16, 32),
                                 s))
    r = b.call("nn.relu", _conv(b, y, 32, 32))
    z = b.call("add", _conv(b, r, 32, 32), r)
    c = _check(b.build(b.call("add", z, s)), (1, 8, 12, 12))
    assert _written_over_residual(c) == [False, False]
