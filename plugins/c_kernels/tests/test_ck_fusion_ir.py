"""The GEMM epilogue as IR: c_kernels' fusion pass makes primitive functions that
compiled.module, the report, `legato compile --explain` and `legato show` see, and the
planner runs each as one C call; custom calls run on the planned executor."""
from __future__ import annotations

import json

import numpy as np
import pytest

import legato
from legato.cli import main as cli
from legato_c_kernels.executor import PlannedExecutor, make_executor
from legato_c_kernels.fusion import FUSION
from legato_c_kernels.plugin import KERNELS

NO_RECOMPOSE = {"backends": {"c_kernels": {"recompose": False}}}


def _chain(*, second_reader=False, width=9):
    rng = np.random.default_rng(0)
    b = legato.GraphBuilder()
    x = b.input("x", (5, 7))
    w = b.const(rng.standard_normal((7, width)).astype(np.float32))
    bias = b.const(rng.standard_normal(width).astype(np.float32))
    product = b.call("matmul", x, w)
    y = b.call("nn.relu", b.call("add", product, bias))
    if second_reader:  # the product is read twice: no fusion may hide it
        y = b.call("add", y, product)
    return b.build(y)


def _epilogues(module) -> dict:
    return {name: fn for name, fn in module.functions.items()
            if fn.kind == "primitive" and fn.attrs.get("fusion") == FUSION}


def test_the_epilogue_is_a_primitive_function_in_the_compiled_module():
    mod = _chain()
    c = legato.compile(mod, "c_kernels", config=NO_RECOMPOSE)
    (fn,) = _epilogues(c.module).values()
    assert [call.op for call in fn.calls] == ["matmul", "add", "nn.relu"]
    assert fn.attrs["activation"] == "nn.relu" and fn.attrs["bias"] is True
    assert [call.op for call in c.module.main.calls] == ["call"]
    assert [call.op for _, call, _ in c._runner.steps] == ["matmul"]  # one C call
    assert "c_kernels.gemm-epilogue (changed" in str(c.report)
    assert "fused 1 GEMM epilogues: matmul + add + nn.relu x1" in c.report.summary()
    assert c.report.per_backend == {"c_kernels": {"matmul": 1, "add": 1, "nn.relu": 1}}
    x = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(c(x), legato.reference(mod)(x), rtol=1e-5, atol=1e-6)
    # the text form carries it: parse(print(module)) is the same module
    assert legato.structural_equal(legato.parse(str(c.module)), c.module)


def test_a_value_read_twice_is_not_fused_away():
    mod = _chain(second_reader=True)
    c = legato.compile(mod, "c_kernels", config=NO_RECOMPOSE)
    assert not _epilogues(c.module)
    x = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(c(x), legato.reference(mod)(x), rtol=1e-5, atol=1e-6)


def test_explain_and_show_name_the_fusion(tmp_path, capsys):
    path = tmp_path / "chain.txt"
    path.write_text(str(_chain()))
    assert cli(["compile", str(path), "--backend", "c_kernels", "--explain"]) == 0
    err = capsys.readouterr().err
    assert "(c_kernels.gemm_epilogue): nn.linear, nn.relu" in err  # recomposed first
    out = tmp_path / "chain.dot"
    assert cli(["show", str(path), "--backend", "c_kernels", "-o", str(out)]) == 0
    assert "c_kernels.gemm_epilogue" in out.read_text()


def test_a_symbolic_model_fuses_and_runs_at_every_size():
    rng = np.random.default_rng(3)
    text = str(_chain()).replace("[5, 7]", "[batch, 7]").replace("[5, 9]", "[batch, 9]")
    mod = legato.parse(text)
    c = legato.compile(mod, "c_kernels", config=NO_RECOMPOSE)
    assert len(_epilogues(c.module)) == 1 and c.plan_stats is not None
    reference = legato.compile(mod, "cpu_ref")
    for batch in (1, 3, 17):
        xv = rng.standard_normal((batch, 7)).astype(np.float32)
        np.testing.assert_allclose(c(xv), reference(xv), rtol=1e-5, atol=1e-6)


@pytest.fixture
def tunnelling_backend():
    """A backend that runs c_kernels' kernels on its planned executor and tunnels the
    layer norm it keeps as a custom call (an accelerator bring-up's usual first step);
    the custom call's op runs with the fallback's kernel."""
    capability = {"backend": "ck_tunnel", "fallback": "cpu_ref", "custom_ops": True,
                  "legal": {op: {} for op in ("matmul", "nn.relu", "add")}}
    kernels = {op: KERNELS[op] for op in ("matmul", "nn.relu", "add")}
    yield legato.register_backend(capability, kernels=kernels, executor=make_executor,
                                  replace=True)
    legato.unregister_backend("ck_tunnel")


def test_custom_calls_run_on_the_planned_executor(tunnelling_backend):
    rng = np.random.default_rng(4)
    b = legato.GraphBuilder()
    x = b.input("x", (4, 16))
    w = b.const(rng.standard_normal((16, 16)).astype(np.float32))
    h = b.call("nn.relu", b.call("matmul", x, w))
    mod = b.build(b.call("nn.relu", b.call("nn.layer_norm", h, None, None, axes=[-1])))
    config = {"backends": {"ck_tunnel": {"keep": ["nn.layer_norm"]}}}
    c = legato.compile(mod, "ck_tunnel", config=config)
    customs = [call for call in c.module.main.calls if call.op == "custom"]
    assert [json.loads(call.attrs["implementation_attrs"])["attrs"]["axes"]
            for call in customs] == [[-1]]
    assert isinstance(c._runner, PlannedExecutor)  # was: the interpreter, whole model
    assert "nn.layer_norm" in [call.op for _, call, _ in c._runner.steps]
    xv = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(c(xv), legato.reference(mod)(xv), rtol=1e-5, atol=1e-5)
