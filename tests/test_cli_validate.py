"""`legato validate FILE.mlir` and `legato compile --validate`: tosa_custom's validator
(tosa-opt, the TOSA reference model) reached from the command line, found through the
`legato_register_validators` hook; and a plugin's own validator for its own files."""
from __future__ import annotations

import pathlib
import warnings

import numpy as np
import pytest

import legato
from legato.cli.commands import main
from legato.ir.builder import GraphBuilder
from legato.testing.plugins import installed_plugins, plugin_module

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tosa_tools():
    """The TOSA tools where the tosa_custom tests find them (.venv-tosa, mk/tosa.mk, or
    $LEGATO_TOSA_VENV); without them these tests skip and say so, as those tests do."""
    from legato_tosa_custom.tools import TosaTools
    found = TosaTools.find(REPO / ".venv-tosa")
    if found is None:
        message = ("TOSA TOOLS NOT FOUND: the `legato validate` tests that run tosa-opt are "
                   "SKIPPED. Run `make .venv-tosa/.installed` or set LEGATO_TOSA_VENV.")
        warnings.warn(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def exp_model(tmp_path_factory):
    """exp of a float32[4, 5] as a text-form model, and its TOSA emitted by tosa_custom."""
    folder = tmp_path_factory.mktemp("validate")
    b = GraphBuilder()
    module = b.build(b.call("exp", b.input("x", (4, 5), "float32")))
    model = folder / "exp.txt"
    model.write_text(str(module))
    mlir = folder / "exp.mlir"
    mlir.write_text(legato.compile(module, "tosa_custom").artifact)
    return model, mlir


def edited(path: pathlib.Path, old: str, new: str, name: str) -> pathlib.Path:
    text = path.read_text()
    assert old in text
    out = path.with_name(name)
    out.write_text(text.replace(old, new))
    return out


def test_a_valid_file_passes(tosa_tools, exp_model, capsys):
    _, mlir = exp_model
    assert main(["validate", str(mlir)]) == 0
    assert f"{mlir}: valid (tosa validator of tosa_custom)" in capsys.readouterr().out


def test_an_invalid_file_names_the_line_and_the_error(tosa_tools, exp_model, capsys):
    _, mlir = exp_model
    bad = edited(mlir, '"tosa.exp"', '"tosa.expp"', "bad.mlir")
    line = next(i for i, text in enumerate(bad.read_text().splitlines(), 1) if "expp" in text)
    assert main(["validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: INVALID" in err
    assert f"{bad}:{line}:" in err and "error: unregistered operation 'tosa.expp'" in err


def test_missing_tools_say_how_to_install_them(exp_model, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LEGATO_TOSA_VENV", str(tmp_path))  # an empty venv: no tools
    assert main(["validate", str(exp_model[1])]) == 2
    err = capsys.readouterr().err
    assert f"LEGATO_TOSA_VENV={tmp_path} has no bin/tosa-opt" in err
    assert "make .venv-tosa/.installed" in err and "legato-tosa-custom[tools]" in err


def test_run_compares_the_reference_model_with_cpu_ref(tosa_tools, exp_model, capsys):
    model, mlir = exp_model
    assert main(["validate", str(mlir), "--run", "--model", str(model)]) == 0
    assert "result 0: float32[4, 5]  max rel. error vs cpu_ref" in capsys.readouterr().out
    # valid TOSA computing something else: abs where the model says exp
    wrong = edited(mlir, '"tosa.exp"', '"tosa.abs"', "abs.mlir")
    assert main(["validate", str(wrong), "--run", "--model", str(model)]) == 1
    out = capsys.readouterr().out
    assert f"{wrong}: valid" in out and "MISMATCH" in out


def test_run_needs_the_model(exp_model, capsys):
    assert main(["validate", str(exp_model[1]), "--run"]) == 1
    assert "--run needs --model MODEL" in capsys.readouterr().err


def test_compile_validate(tosa_tools, capsys, tmp_path):
    out = tmp_path / "mlp.mlir"
    assert main(["compile", "example:mlp", "-b", "tosa_custom", "-o", str(out),
                 "--validate-run"]) == 0
    text = capsys.readouterr().out
    assert f"{out}: valid (tosa validator of tosa_custom)" in text
    assert "result 0: float32[8, 10]" in text and "MISMATCH" not in text
    assert main(["compile", "example:mlp", "-b", "tosa_custom", "--validate"]) == 0
    assert "<tosa_custom artifact>: valid" in capsys.readouterr().out
    assert main(["compile", "example:mlp", "--validate"]) == 1  # cpu_ref executes
    assert "backend cpu_ref executes" in capsys.readouterr().err


def test_a_plugin_validator_for_its_own_files(tmp_path, capsys):
    """The core runs any plugin's validator by suffix, and checks what it registers."""
    def validate(text, name):
        if "bad" in text:
            raise legato.LegatoError(f"{name}:1: bad word")

    def run(text, inputs):
        return [np.exp(inputs[0])]

    def good(register):
        register("npu_bin", validate, run=run, suffixes=[".npubin"], backends=[])

    def broken(register):
        register("npu bin", validate)

    plugins = {"npu_validator": plugin_module(legato_register_validators=good),
               "broken_validator": plugin_module(legato_register_validators=broken)}
    with installed_plugins(plugins) as host:
        ok, bad = tmp_path / "ok.npubin", tmp_path / "bad.npubin"
        ok.write_text("fine")
        bad.write_text("bad")
        assert main(["validate", str(ok)]) == 0
        assert main(["validate", str(bad)]) == 1
        assert f"{bad}:1: bad word" in capsys.readouterr().err
        assert any(p == "broken_validator" and "validator 'npu bin': name must be an "
                   "identifier" in m for p, m in host.problems)
    assert main(["validate", str(ok)]) == 1  # uninstalled: nothing takes .npubin
    assert "no installed validator takes" in capsys.readouterr().err
