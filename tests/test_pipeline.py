"""legato.compile as a pipeline of declared passes: the order checked from what each pass
requires and ensures, the report listing the passes, and a backend's own passes run on
the legal module (what they leave must still be legal)."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.ir import Call
from legato.legalization.capability import parse_capability
from legato.legalization.config import load_config
from legato.passes.manager import ModulePass, PassManager, PassResult
from legato.passes.pipeline import Lowering, compile_pipeline

CAPABILITY = {"backend": "pipeline_test", "fallback": "cpu_ref",
              "legal": {op: {"kernel": "fallback"} for op in ("nn.relu", "add", "multiply",
                                                              "matmul")}}


def _model():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 4))
    w = b.const(np.arange(16, dtype=np.float32).reshape(4, 4) / 10)
    return b.build(b.call("nn.relu", b.call("add", b.call("matmul", x, w), x)))


class Needs(ModulePass):
    def __init__(self, name, requires=(), ensures=()):
        self.name, self.requires, self.ensures = name, requires, ensures

    def run(self, module):
        return PassResult(module, False)


def test_the_pass_order_is_checked_when_the_pipeline_is_built():
    PassManager([Needs("a", ensures=("legal",)), Needs("b", requires=("legal",))])
    with pytest.raises(legato.LegatoError, match=r"pass b requires legal, which no pass "
                                                 r"before it ensures \(before it: a\)"):
        PassManager([Needs("a"), Needs("b", requires=("legal",))])
    inner = PassManager([Needs("a", requires=("x",)), Needs("b", ensures=("y",))])
    assert inner.requires == ("x",) and "y" in inner.ensures  # nested: its own needs


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels", "tosa_custom"])
def test_compile_runs_the_declared_passes_in_order(backend):
    compiled = legato.compile(_model(), backend)
    names = [name for name, _ in compiled.report.passes]
    final = ["emit"] if backend == "tosa_custom" else ["plan"]
    assert names[:4] == ["qdq-fold", "recompose", "fold-pads", "layout"]
    assert names[-2:] == ["place", *final]
    assert "legalize" in names
    assert ("constant-fold" in names) == (backend == "tosa_custom")
    assert "passes: qdq-fold" in str(compiled.report)


def test_a_partitioned_build_runs_the_same_first_passes_then_partitions():
    """A build over several backends folds and recomposes through the compile pipeline's
    own passes (what the first backend keeps), then partitions: its report lists them."""
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    compiled = legato.compile(_model(), ["c_kernels", "cpu_ref"])
    names = [name for name, _ in compiled.report.passes]
    assert names[:3] == ["qdq-fold", "recompose", "partition"]
    assert sum(compiled.report.before.values()) == 3
    want = legato.compile(_model(), "cpu_ref")(x)
    np.testing.assert_allclose(compiled(x), want, rtol=1e-6)


def test_a_pipeline_built_by_hand_gives_the_same_module():
    host = legato.context()
    be = host.backend("cpu_ref")
    lowering = Lowering(host, be, load_config(None, be.name, host.registry, host.backends))
    module, _ = compile_pipeline(lowering)(_model())
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    assert legato.structural_equal(module, legato.compile(_model(), "cpu_ref").module)
    np.testing.assert_allclose(lowering.runner(x), legato.reference(_model())(x), rtol=1e-6)
    lowered = lowering.lowered(module)
    assert lowered.executor_args()[:2] == (module, be)


class SwapAddForMultiply(ModulePass):
    """A backend pass rewriting add into multiply (legal) or into nn.gelu (not legal)."""

    name = "swap"

    def __init__(self, lowering, op="multiply"):
        self.lowering, self.op = lowering, op

    def run(self, module):
        main = module.main
        calls = tuple(Call(self.op, c.inputs, c.attrs if self.op == "multiply" else
                           legato.Attrs({"approximate": "none"}), c.outputs, c.origin)
                      if c.op == "add" else c for c in main.calls)
        if self.op != "multiply":  # nn.gelu takes one input
            calls = tuple(Call(c.op, c.inputs[:1], c.attrs, c.outputs, c.origin)
                          if c.op == self.op else c for c in calls)
        self.lowering.notes.append("swapped")
        return PassResult(module.replace(main=legato.Function(main.params, calls,
                                                              main.results)), True)


@pytest.fixture
def backend_with_passes():
    def register(*passes):
        return legato.register_backend(CAPABILITY, replace=True, passes=list(passes))
    yield register
    legato.unregister_backend("pipeline_test")


def test_a_backend_pass_runs_on_the_legal_module_and_shows(backend_with_passes):
    backend_with_passes(SwapAddForMultiply)
    compiled = legato.compile(_model(), "pipeline_test")
    ops = [c.op for c in compiled.module.main.calls]
    assert "multiply" in ops and "add" not in ops
    passes = dict(compiled.report.passes)
    names = list(passes)
    assert names.index("pipeline_test.swap") == names.index("legalize") + 1
    assert passes["pipeline_test.swap"].startswith("changed")
    assert "swapped" in compiled.report.summary()
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 10
    np.testing.assert_allclose(compiled(x), np.maximum((x @ w) * x, 0), rtol=1e-6)


def test_a_backend_pass_that_leaves_an_illegal_call_is_named(backend_with_passes):
    backend_with_passes(lambda low: SwapAddForMultiply(low, "nn.gelu"))
    with pytest.raises(legato.PluginError, match=r"pass pipeline_test.swap left a call its "
                                                 r"backend does not run: nn.gelu"):
        legato.compile(_model(), "pipeline_test")


def test_a_backend_pass_that_raises_is_named(backend_with_passes):
    class Broken(ModulePass):
        name = "broken"

        def __init__(self, lowering):
            pass

        def run(self, module):
            raise KeyError("oops")
    backend_with_passes(Broken)
    with pytest.raises(legato.PluginError, match=r"pass pipeline_test.broken raised KeyError"):
        legato.compile(_model(), "pipeline_test")


@pytest.mark.parametrize("passes", ["not a list", [42]])
def test_passes_that_are_not_pass_factories_are_refused(passes):
    host = legato.context()
    with pytest.raises(legato.ConfigError, match="passes argument: expected a list of pass"):
        parse_capability(CAPABILITY, host.registry, passes=passes)
