"""legato.testing: samples from op definitions, backend conformance, `legato init` and
`legato check-backend`."""
import importlib.util

import numpy as np
import pytest

import legato
from legato.cli.commands import main
from legato.ir import TensorType
from legato.legalization.backend import Backend, Condition
from legato.testing import Sample, SampleError, check_backend, samples, table
from legato.testing.plugins import installed_plugins, plugin_module
from legato.testing.scaffold import ScaffoldError, scaffold

# --- samples ------------------------------------------------------------------------------


def test_samples_are_deterministic_by_seed():
    def arrays(seed):
        return [(s.attrs, [None if a is None else a.tolist() for a in s.inputs])
                for s in samples("nn.conv2d", seed=seed)]
    assert arrays(3) == arrays(3)
    assert arrays(3) != arrays(4)


def test_elementwise_samples_include_the_edge_shapes():
    shapes = {tuple(a.shape for a in s.inputs) for s in samples("add")}
    assert {((), ()), ((0, 3), (0, 3)), ((1, 1), (1, 1)), ((2, 3), (3,)),
            ((2, 1), (1, 3))} <= shapes
    unary = {s.inputs[0].shape for s in samples("exp")}
    assert {(), (0, 3), (1, 1)} <= unary


def test_samples_keep_the_value_domain_of_the_op():
    for s in samples("log") + samples("sqrt"):
        assert (s.inputs[0] > 0).all(), s.describe()
    for s in samples("divide"):
        assert (s.inputs[1] != 0).all(), s.describe()


def test_samples_carry_normalized_attributes_and_inferred_types():
    for s in samples("nn.softmax"):
        assert set(s.attrs) == {"axis"}
        assert s.outputs == (TensorType(s.inputs[0].shape, s.inputs[0].dtype.name),)
    gelu = {s.attrs["approximate"] for s in samples("nn.gelu")}
    assert gelu == {"none", "tanh"}


def _square_infer(types, attrs):
    return types[0]


def test_a_new_elementwise_primitive_gets_samples_without_an_edit(install_plugins):
    def ops(register):
        register("acme.square", "a", _square_infer, "elemwise")
        register("acme.blend", "a, b", _square_infer, "broadcast",
                 attrs={"mode": ("str:fast|exact", "fast")})
        register("acme.opaque", "a", _square_infer, "opaque")

    install_plugins({"acme": plugin_module(legato_register_ops=ops)})
    square = samples("acme.square")
    assert len(square) > 12 and all(s.inputs[0].dtype.kind == "f" for s in square)
    assert {s.attrs["mode"] for s in samples("acme.blend")} == {"fast", "exact"}
    with pytest.raises(SampleError, match="op acme.opaque has no samples"):
        samples("acme.opaque")


def test_a_samples_hook_is_used_and_checked(install_plugins):
    def good(rng):
        return [Sample("acme.hooked", (rng.standard_normal((2, 2)).astype("float32"),))]

    def bad(rng):
        return [Sample("acme.badhook", (np.zeros((2, 2), "float32"), np.zeros(1)))]

    def ops(register):
        register("acme.hooked", "a", _square_infer, "opaque", samples=good)
        register("acme.badhook", "a", _square_infer, "opaque", samples=bad)

    install_plugins({"acme": plugin_module(legato_register_ops=ops)})
    (s,) = samples("acme.hooked")
    assert s.inputs[0].shape == (2, 2) and s.outputs == (TensorType((2, 2), "float32"),)
    with pytest.raises(SampleError, match="acme.badhook: its samples hook made an invalid "
                                          "call.*takes 1 inputs, got 2"):
        samples("acme.badhook")


# --- backend conformance --------------------------------------------------------------

def _copy_add(a, b):
    return np.asarray(np.add(a, b), a.dtype)


BROKEN_KERNELS = {
    "add": lambda a, b: np.add(a, b),                         # 0-d inputs: a numpy scalar
    "subtract": lambda a, b: np.asarray(np.subtract(a, b), "float64"),  # wrong dtype
    "multiply": lambda a, b, scale: a * b,                    # a required extra argument
    "negative": lambda a: np.negative(a, out=a),              # writes its input
    "exp": lambda a: np.asarray(np.exp(a) * 1.01),            # wrong values
    "abs": lambda a: np.asarray(np.abs(a)),                   # right
}


def test_check_backend_reports_each_kind_of_problem_per_op(monkeypatch):
    # built directly: registration would refuse the kernel of the wrong signature already
    legal = {op: Condition(dtypes=frozenset({"float32"})) for op in BROKEN_KERNELS}
    backend = Backend("broken_npu", legal, fallback="cpu_ref", kernels=BROKEN_KERNELS)
    monkeypatch.setitem(legato.context().backends, "broken_npu", backend)
    results = {r.op: r for r in check_backend("broken_npu")}
    assert set(results) == set(BROKEN_KERNELS)
    assert set(results["add"].problems) == {"scalar"}
    assert results["add"].passed > 0  # only the rank-0 samples fail
    assert set(results["subtract"].problems) == {"dtype/shape"}
    assert set(results["multiply"].problems) == {"signature"}
    assert set(results["negative"].problems) == {"wrote input"}
    assert set(results["exp"].problems) == {"mismatch"}
    assert results["abs"].ok and results["abs"].ran > 10
    text = table("broken_npu", list(results.values()))
    assert "total: 6 ops, 5 failing" in text
    assert "add: scalar: add(float32[], float32[])" in text


def test_check_backend_command_exit_codes(backend_factory, capsys):
    backend_factory({"backend": "good_npu", "legal": {"add": {"dtypes": ["float32"]}},
                     "fallback": "cpu_ref"}, kernels={"add": _copy_add})
    backend_factory({"backend": "bad_npu", "legal": {"exp": {"dtypes": ["float32"]}},
                     "fallback": "cpu_ref"}, kernels={"exp": BROKEN_KERNELS["exp"]})
    assert main(["check-backend", "good_npu"]) == 0
    assert "total: 1 ops, 0 failing" in capsys.readouterr().out
    assert main(["check-backend", "bad_npu"]) == 1
    assert "exp: mismatch: exp(float32" in capsys.readouterr().out
    assert main(["check-backend", "no_such_npu"]) == 1
    assert "no backend named 'no_such_npu'" in capsys.readouterr().err


def test_check_backend_onnx_runs_the_node_tests_for_the_backend(capsys):
    pytest.importorskip("onnx")
    assert main(["check-backend", "c_kernels", "--op", "nn.relu", "--onnx",
                 "--onnx-op", "Relu"]) == 0
    out = capsys.readouterr().out
    assert "\nRelu                    c_kernels" in out and "total: " in out


def test_emitting_backends_are_checked_by_compiling():
    results = check_backend("tosa_custom", ["exp", "add"])
    assert [r.how for r in results] == ["emitted", "emitted"]
    assert all(r.ok and r.ran > 3 for r in results), table("tosa_custom", results)


# --- legato init ----------------------------------------------------------------------

def test_init_scaffolds_a_plugin_that_passes_its_own_test(tmp_path, monkeypatch):
    assert main(["init", "demo_npu", "--dir", str(tmp_path)]) == 0
    root = tmp_path / "demo_npu"
    assert {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} == {
        "pyproject.toml", "README.md", "src/demo_npu/__init__.py",
        "src/demo_npu/capability.yaml", "src/demo_npu/kernels.py", "src/demo_npu/plugin.py",
        "tests/test_conformance.py"}
    assert 'demo_npu = "demo_npu.plugin"' in (root / "pyproject.toml").read_text()
    monkeypatch.syspath_prepend(str(root / "src"))
    with installed_plugins({"demo_npu": "demo_npu.plugin"}) as host:
        assert "demo_npu" in host.backends, host.problems
        results = check_backend("demo_npu")
        assert results and all(r.ok and r.ran for r in results), table("demo_npu", results)
        spec = importlib.util.spec_from_file_location(
            "demo_npu_test_conformance", root / "tests" / "test_conformance.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        mark, = module.test_conformance.pytestmark
        assert sorted(mark.args[1]) == ["add", "exp", "multiply", "nn.relu"]
        for op in mark.args[1]:
            module.test_conformance(op)
        assert main(["check-backend", "demo_npu"]) == 0
    assert "demo_npu" not in legato.list_backends()


@pytest.mark.parametrize("name, message", [
    ("Demo", "not valid"), ("9npu", "not valid"), ("my-npu", "not valid"),
    ("class", "not valid"), ("cpu_ref", "taken"), ("legato_x", "taken")])
def test_init_refuses_invalid_names(tmp_path, name, message):
    with pytest.raises(ScaffoldError, match=message):
        scaffold(name, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_init_refuses_a_directory_in_use(tmp_path, capsys):
    (tmp_path / "npu").mkdir()
    (tmp_path / "npu" / "notes.txt").write_text("mine")
    assert main(["init", "npu", "--dir", str(tmp_path)]) == 1
    assert "is not an empty directory" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "npu").iterdir()] == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert scaffold("empty", tmp_path).is_dir()  # an empty directory is fine


# --- the third-party plugin of the session -------------------------------------------

def test_the_third_party_plugin_is_present_and_conforms(third_party_plugin):
    if third_party_plugin is None:
        pytest.skip("LEGATO_TEST_NO_THIRD_PARTY is set")
    assert {"acme3p.softsign", "acme3p.scaled_tanh"} <= set(legato.list_ops())
    results = check_backend("acme3p_npu")
    assert all(r.ok and r.ran for r in results), table("acme3p_npu", results)
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    compiled = legato.compile(b.build(b.call("acme3p.softsign", x)), "c_kernels")
    data = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(compiled(data), data / (1 + np.abs(data)), rtol=1e-6)
