"""The executor's input and kernel checks, and the command line."""
import numpy as np
import pytest

import legato
from legato.cli.commands import main


def mlp_and_inputs():
    mod = legato.load_model("example:mlp")
    return mod, np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)


def test_wrong_runtime_inputs_name_the_input():
    mod, x = mlp_and_inputs()
    c = legato.compile(mod, "cpu_ref")
    with pytest.raises(legato.ExecutionError, match=r"input 'x' must be float32\[8, 64\], "
                                                    r"got float64\[8, 64\]"):
        c(x.astype(np.float64))
    with pytest.raises(legato.ExecutionError, match=r"got float32\[8, 63\]"):
        c(x[:, :63])
    with pytest.raises(legato.ExecutionError, match="expected 1 inputs"):
        c(x, x)
    with pytest.raises(legato.ExecutionError, match="unknown input 'y'"):
        c(y=x)
    np.testing.assert_array_equal(c(x=x), c(x))


def test_kernel_errors_name_the_failing_call(backend_factory):
    def broken_exp(a):
        raise FloatingPointError("overflow in exp")

    def wrong_shape(a):
        return np.zeros(3, np.float32)

    backend_factory({"backend": "flaky", "legal": {"exp": {}, "tanh": {}}},
                    kernels={"exp": broken_exp, "tanh": wrong_shape})
    b = legato.GraphBuilder()
    x = b.input("x", (2, 2))
    c = legato.compile(b.build(b.call("exp", x)), "flaky")
    with pytest.raises(legato.ExecutionError,
                       match=r"@main call 0: exp\(float32\[2, 2\]\).*FloatingPointError"):
        c(np.ones((2, 2), np.float32))
    b = legato.GraphBuilder()
    x = b.input("x", (2, 2))
    c = legato.compile(b.build(b.call("tanh", x)), "flaky")
    with pytest.raises(legato.ExecutionError, match=r"kernel returned float32\[3\], "
                                                    r"expected float32\[2, 2\]"):
        c(np.ones((2, 2), np.float32))


def test_missing_kernel_is_reported_at_registration(backend_factory):
    with pytest.raises(legato.RegistrationError,
                       match="backend nokernel: legal op exp without a kernel"):
        backend_factory({"backend": "nokernel", "legal": {"exp": {}}})
    assert "nokernel" not in legato.list_backends()


def test_emitting_backend_cannot_be_called(backend_factory):
    backend_factory({"backend": "emitter", "executes": False, "legal_levels": [0]},
                    emitter=lambda module: f"{len(module.main.calls)} calls")
    c = legato.compile("example:layernorm", "emitter")
    assert c.artifact == "11 calls"
    with pytest.raises(legato.LegatoError, match="emits code and does not execute"):
        c(np.ones((4, 4), np.float32))


def test_cli_backends_and_ops(capsys):
    assert main(["backends"]) == 0
    assert "cpu_ref" in capsys.readouterr().out
    assert main(["ops", "--level", "2"]) == 0
    out = capsys.readouterr().out
    assert "nn.attention(q, k, v, mask?, scale=None, causal=False)" in out
    assert "add(" not in out


def test_cli_compile_writes_the_legalized_module(tmp_path, capsys):
    src = tmp_path / "model.txt"
    src.write_text(str(legato.load_model("example:layernorm")))
    out = tmp_path / "low.txt"
    assert main(["compile", str(src), "--backend", "cpu_ref", "-o", str(out)]) == 0
    low = legato.parse(out.read_text())
    assert {legato.get_op(c.op).level for c in low.main.calls} == {0}
    assert "1 calls -> 11 calls" in capsys.readouterr().err
    assert main(["compile", "example:cnn", "--explain"]) == 0
    err = capsys.readouterr().err
    assert "nn.conv2d" in err and "decomposed" in err and "cpu_ref does not list" in err


def test_cli_run_checks_against_reference(capsys, tmp_path):
    cfg = tmp_path / "keep.yaml"
    cfg.write_text("backends:\n  cpu_ref:\n    keep: [nn.layer_norm]\n")
    assert main(["run", "example:transformer", "--backend", "cpu_ref", "-c", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "kept: nn.layer_norm x2" in out and " ok" in out


def test_cli_errors_exit_nonzero_with_message(capsys, tmp_path):
    assert main(["compile", "example:transfomer"]) == 1
    assert "unknown example 'example:transfomer'" in capsys.readouterr().err
    assert main(["run", "example:mlp", "--backend", "gpu"]) == 1
    assert "no backend named 'gpu'" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("func @main(%x: float32[2]) -> (float32[2]) {\n  return %q\n}\n")
    assert main(["compile", str(bad)]) == 1
    assert f"{bad}: line 2: %q is not defined" in capsys.readouterr().err


def test_cli_demo_prints_report_and_passing_check(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "== example:transformer" in out and "== example:cnn" in out
    assert "decomposed: " in out and "PASS" in out and "FAIL" not in out
    assert "demo: all result checks passed" in out


@pytest.mark.parametrize("model, names", [
    (None, "got NoneType"), (5, "got int"), ("not-utf8", "is not UTF-8 text")])
def test_models_that_are_not_models_are_legato_errors(tmp_path, model, names):
    if model == "not-utf8":
        model = tmp_path / "m.txt"
        model.write_bytes(b"\xff\xfe\x00 func")
    with pytest.raises(legato.LegatoError, match=names):
        legato.compile(model)


@pytest.mark.parametrize("backend, names", [
    ([], "at least one backend"), (5, "got int"), ([None], "got NoneType"),
    (None, "got NoneType")])
def test_backends_that_are_not_backends_are_legato_errors(backend, names):
    mod, _ = mlp_and_inputs()
    with pytest.raises(legato.LegatoError, match=names):
        legato.compile(mod, backend=backend)


@pytest.mark.parametrize("max_level", ["1", 1.5, True])
def test_max_level_must_be_an_int(max_level):
    mod, _ = mlp_and_inputs()
    with pytest.raises(legato.LegatoError, match="max_level must be an int"):
        legato.compile(mod, backend="cpu_ref", max_level=max_level)
    with pytest.raises(legato.LegatoError, match="max_level must be an int"):
        legato.legalize(mod, max_level=max_level)



def test_random_inputs_for_bfloat16():
    from legato.frontends.examples import random_inputs
    b = legato.GraphBuilder()
    mod = b.build(b.call("abs", b.input("x", (2, 3), "bfloat16")))
    (x,) = random_inputs(mod)
    assert x.dtype.name == "bfloat16" and x.shape == (2, 3)


@pytest.mark.parametrize("argv, names", [
    (["run", "example:mlp", "--backend", ","], "names no backend"),
    (["compile", "example:mlp", "-o", "/nonexistent-dir/out.txt"], "cannot write"),
])
def test_cli_usage_errors_are_reported_not_raised(capsys, argv, names):
    assert main(argv) == 1
    assert names in capsys.readouterr().err


def test_cli_run_counts_nan_equal_to_nan(tmp_path, capsys):
    model = tmp_path / "m.txt"
    b = legato.GraphBuilder()
    x = b.input("x", (4,))
    model.write_text(str(b.build(b.call("sqrt", b.call("negative", b.call("abs", x))))))
    assert main(["run", str(model)]) == 0, capsys.readouterr().out


def test_an_executor_or_emitter_that_raises_is_named(backend_factory):
    def executor(*args):
        raise MemoryError("Unable to allocate 4.00 TiB")

    def emitter(module):
        raise KeyError("tosa.pow")

    backend_factory({"backend": "oom", "legal_levels": [0, 1, 2]}, executor=executor)
    backend_factory({"backend": "emits", "executes": False, "legal_levels": [0, 1, 2]},
                    emitter=emitter)
    mod, _ = mlp_and_inputs()
    with pytest.raises(legato.ExecutionError, match="backend oom's executor ran out of memory"):
        legato.compile(mod, "oom")
    with pytest.raises(legato.PluginError, match="backend emits's emitter raised KeyError"):
        legato.compile(mod, "emits")


def test_random_inputs_refuse_a_huge_declared_input(tmp_path, capsys):
    from legato.frontends.examples import random_inputs
    b = legato.GraphBuilder()
    mod = b.build(b.call("abs", b.input("big", (4, 2**30), "float32")))
    with pytest.raises(legato.ExecutionError, match=r"input 'big' \(float32\[4, 1073741824\], "
                                                    r"17,179,869,184 bytes\)"):
        random_inputs(mod)
    model = tmp_path / "big.txt"
    model.write_text(str(mod))
    assert main(["run", str(model)]) == 1
    assert "17,179,869,184 bytes" in capsys.readouterr().err
