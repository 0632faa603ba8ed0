"""One compile of a model with symbolic dims, planned per binding of its symbols on
c_kernels: the packed constant weights are made once and shared by every binding's
plan, calls from several threads at mixed sizes are safe and correct, and the plan
cache counts its hits and misses."""
from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.frontends import onnx as onnx_frontend  # noqa: E402
from legato.runtime.specialize import ShapeSpecializing  # noqa: E402

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((16, 32)).astype(np.float32)
B1 = RNG.standard_normal(32).astype(np.float32)
W2 = RNG.standard_normal((8, 32)).astype(np.float32)  # Gemm's transB: (out, in)
B2 = RNG.standard_normal(8).astype(np.float32)
TABLE = RNG.standard_normal((64, 16)).astype(np.float32)
SIZES = [3, 8, 17, 1, 33, 8, 3, 64]


def mlp_model():
    """y = relu(x @ W1 + B1) @ W2.T + B2 for x of `rows` x 16 rows, `rows` symbolic: a
    MatMul weight and a Gemm (transB) weight, both packed by c_kernels."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((W1, "w1"), (B1, "b1"), (W2, "w2"), (B2, "b2"))]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def positions_model():
    """x + TABLE[positions[:rows]] into the same MLP: the slice of a position table by
    the symbolic length is folded, and its gather_elements legalized, per binding (as in
    an exported BERT)."""
    model = mlp_model()
    graph = model.graph
    graph.node[0].input[0] = "x2"
    graph.node.insert(0, helper.make_node("Shape", ["x"], ["shape"]))
    graph.node.insert(1, helper.make_node("Gather", ["shape", "i0"], ["n"], axis=0))
    graph.node.insert(2, helper.make_node("Slice", ["pos", "zero", "n", "zero"], ["p"]))
    graph.node.insert(3, helper.make_node("GatherElements", ["pos", "p"], ["g"], axis=0))
    graph.node.insert(4, helper.make_node("Gather", ["table", "g"], ["emb"], axis=0))
    graph.node.insert(5, helper.make_node("Add", ["x", "emb"], ["x2"]))
    graph.initializer.extend([numpy_helper.from_array(np.arange(64), "pos"),
                              numpy_helper.from_array(TABLE, "table"),
                              numpy_helper.from_array(np.array([0]), "i0"),
                              numpy_helper.from_array(np.array([0]), "zero")])
    return model


def reference(x):
    return np.maximum(x.astype(np.float64) @ W1 + B1, 0) @ W2.T.astype(np.float64) + B2


@pytest.fixture()
def pack_counts(monkeypatch):
    """How often each weight (by its shape) is packed for the float GEMM (the MatMul's
    may reach it as an nn.linear weight)."""
    from legato_c_kernels import kernels
    from legato_c_kernels.kernels import gemm
    counts: Counter = Counter()
    original = gemm.pack_weight

    def counting(b, transposed=False):
        counts[np.shape(b)] += 1
        return original(b, transposed)
    monkeypatch.setattr(gemm, "pack_weight", counting)  # matmul's pack
    monkeypatch.setattr(kernels, "pack_weight", counting)  # nn.linear's
    return counts


def test_a_new_binding_packs_no_weight_again(pack_counts):
    compiled = legato.compile(onnx_frontend.load(mlp_model()), "c_kernels")
    runner = compiled._runner
    assert isinstance(runner, ShapeSpecializing)
    assert sorted(pack_counts.values()) == [1, 1]  # at compile time, as a static compile
    for rows in SIZES:
        x = RNG.standard_normal((rows, 16)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), reference(x), rtol=1e-4, atol=1e-4)
    assert sorted(pack_counts.values()) == [1, 1]  # each weight once, for 6 bindings
    plans = list(runner.plans.values())
    assert len(plans) == len(set(SIZES))
    packed = [p.prototype._packed for p in plans]
    assert all(p is packed[0] for p in packed)  # one store of packed weights for all


def test_a_model_legalized_in_part_per_binding_packs_its_weights_once(pack_counts):
    compiled = legato.compile(onnx_frontend.load(positions_model()), "c_kernels")
    assert any("need their symbolic dims bound" in note for note in compiled.report.notes)
    for rows in SIZES:
        x = RNG.standard_normal((rows, 16)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), reference(x + TABLE[:rows]), rtol=1e-4,
                                   atol=1e-4)
    assert sorted(pack_counts.values()) == [1, 1]


def test_a_binding_whose_deferred_calls_fold_away_is_not_legalized_again(monkeypatch):
    from legato import api
    compiled = legato.compile(onnx_frontend.load(positions_model()), "c_kernels")
    legalized = []
    original = api.legalize_module
    monkeypatch.setattr(api, "legalize_module",
                        lambda module, *a, **k: legalized.append(module) or
                        original(module, *a, **k))
    for rows in SIZES:  # the gather_elements that waited for rows folds into a constant
        x = RNG.standard_normal((rows, 16)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), reference(x + TABLE[:rows]), rtol=1e-4,
                                   atol=1e-4)
    assert legalized == []


def test_calls_from_threads_at_mixed_sizes_match_numpy():
    compiled = legato.compile(onnx_frontend.load(mlp_model()), "c_kernels")
    threads, rounds = 4, 6
    inputs = {rows: RNG.standard_normal((rows, 16)).astype(np.float32) for rows in SIZES}
    start = threading.Barrier(threads)
    failures: list = []

    def work(offset: int) -> None:
        start.wait()
        try:
            for k in range(rounds * len(SIZES)):
                x = inputs[SIZES[(k + offset) % len(SIZES)]]
                np.testing.assert_allclose(compiled(x), reference(x), rtol=1e-4, atol=1e-4)
        except Exception as err:  # noqa: BLE001 - reported by the main thread
            failures.append(err)
    workers = [threading.Thread(target=work, args=(i * 3,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures, failures[0]
    stats = compiled.plan_stats
    assert stats["misses"] == len(set(SIZES))  # each binding planned once, racing or not
    assert stats["hits"] + stats["misses"] == threads * rounds * len(SIZES)
    assert stats["plan_s"] > 0
    static = legato.compile(onnx_frontend.load(mlp_model(), {"rows": 3}), "c_kernels")
    assert static.plan_stats is None  # planned once, when compiled


class _Unsafe:
    """A runner that is not thread safe: it records calls that overlap."""

    def __init__(self, log):
        self.log, self.busy = log, False

    def __call__(self, x):
        self.log.append(self.busy)
        self.busy = True
        threading.Event().wait(0.002)  # long enough for another thread to come in
        self.busy = False
        return x


def test_runners_that_are_not_thread_safe_run_one_call_at_a_time():
    module = onnx_frontend.load(mlp_model())
    overlapped: list = []
    made: list = []

    def plan(concrete, _fallback_calls):
        made.append(concrete.main.params[0].type.shape)
        return _Unsafe(overlapped)
    runner = ShapeSpecializing(module, (), plan, legato.context().registry)
    x = np.zeros((5, 16), np.float32)
    workers = [threading.Thread(target=lambda: [runner(x) for _ in range(5)])
               for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert made == [(5, 16)] and len(overlapped) == 20 and not any(overlapped)
    assert runner.stats["misses"] == 1 and runner.stats["hits"] == 19


def test_a_binding_is_checked_as_the_verifier_checks_it():
    from legato.ir.errors import IRError
    from legato.ir import Attrs, Call, Function, Module, TensorType, Value
    from legato.runtime.specialize import check_types, specialize
    registry = legato.context().registry
    module = onnx_frontend.load(mlp_model())
    concrete, calls = specialize(module, {"rows": 5}, registry)
    assert legato.verify(concrete, registry) is concrete
    assert [str(c.outputs[0].type) for c in concrete.main.calls][-1] == "float32[5, 8]"
    x = Value(TensorType((2, 4), "float32"), "x")
    wrong = Value(TensorType((3, 4), "float32"))  # what a bad evaluation could give
    relu = Call("nn.relu", (x,), Attrs({}), (wrong,))
    bad = Module({"main": Function((x,), (relu,), (wrong,))})
    with pytest.raises(IRError, match=r"call 0 \(nn.relu\): result types float32\[3, 4\] "
                                      r"differ from the inferred float32\[2, 4\]"):
        check_types(bad, registry, set())
    with pytest.raises(IRError, match="differ from the inferred"):
        legato.verify(bad, registry)  # the verifier agrees


def _relu_chain(rows, count: int, wrong_at: int = -1):
    """`count` relus over x: [rows, 4] plus one call with no symbol (relu of a constant);
    the relu at `wrong_at` claims a result of the wrong size."""
    from legato.ir import EMPTY_ATTRS, Call, Const, Function, Module, TensorType, Value
    value, calls = Value(TensorType((rows, 4), "float32"), "x"), []
    params = (value,)
    for i in range(count):
        dims = (rows + 1, 4) if i == wrong_at else (rows, 4)
        out = Value(TensorType(dims, "float32"))
        calls.append(Call("nn.relu", (value,), EMPTY_ATTRS, (out,)))
        value = out
    const = Const(TensorType((2,), "float32"), "c", np.ones(2, np.float32))
    fixed = Value(TensorType((2,), "float32"))
    calls.append(Call("nn.relu", (const,), EMPTY_ATTRS, (fixed,)))
    return Module({"main": Function(params, tuple(calls), (value, fixed))})


def test_a_binding_infers_each_distinct_call_once_and_still_checks_each(monkeypatch):
    from legato.ir.errors import IRError
    from legato.ops.registry import OpDef
    from legato.runtime.specialize import Specializer
    from legato.ir.symbols import symbol
    registry = legato.context().registry
    inferred: Counter = Counter()
    original = OpDef.infer_types

    def counting(self, types, attrs):
        inferred[tuple(map(str, types))] += 1
        return original(self, types, attrs)
    monkeypatch.setattr(OpDef, "infer_types", counting)
    module = _relu_chain(symbol("rows"), 5)
    specializer = Specializer(module, registry)
    assert [c.op for c in specializer.fixed] == ["nn.relu"]  # the constant's: no symbol
    modules = [specializer({"rows": rows})[0] for rows in (3, 7)]
    assert inferred == {("float32[3, 4]",): 1, ("float32[7, 4]",): 1}
    for concrete in modules:
        assert legato.verify(concrete, registry) is concrete
        assert concrete.main.calls[-1] is module.main.calls[-1]  # no symbol: shared
    bad = Specializer(_relu_chain(symbol("rows"), 5, wrong_at=3), registry)
    with pytest.raises(IRError, match=r"call 3 \(nn.relu\): result types float32\[4, 4\] "
                                      r"differ from the inferred float32\[3, 4\]"):
        bad({"rows": 3})  # its (op, attributes, input types) was inferred for call 0
    with pytest.raises(legato.ShapeError, match=r"float32\[rows-2, 4\] has a negative "
                                                "dimension when rows=1"):
        Specializer(_relu_chain(symbol("rows") - 2, 2), registry)({"rows": 1})
