"""The command line as a shell user meets it: output streams, pipes, --shape, --verbose,
--help, descriptions and docs, and `legato run` naming the call where results diverge."""
import subprocess
import sys

import numpy as np
import pytest

import legato
from legato.cli.commands import main
from legato.cli.model import parse_shapes
from legato.cli.progress import Progress, timer
from legato.ir.errors import size_text


def test_compile_prints_the_summary_not_the_module(capsys, tmp_path):
    assert main(["compile", "example:mlp"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "cpu_ref: " in err and "calls ->" in err and "-o FILE" in err
    assert main(["compile", "example:mlp", "--print-ir"]) == 0
    out, _ = capsys.readouterr()
    assert legato.parse(out).main.calls  # the legalized module's text, parseable
    target = tmp_path / "mlp.txt"
    assert main(["compile", "example:mlp", "-o", str(target)]) == 0
    assert legato.parse(target.read_text()).main.calls
    assert f"wrote {target} (" in capsys.readouterr().err


def test_compile_writes_an_emitters_artifact(capsys, tmp_path):
    target = tmp_path / "ln.mlir"
    assert main(["compile", "example:layernorm", "-b", "tosa_custom", "-o", str(target)]) == 0
    assert target.read_text() == legato.compile("example:layernorm", "tosa_custom").artifact
    assert " KB)" in capsys.readouterr().err or " B)" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly():
    cmd = f"{sys.executable} -m legato.cli ops --doc | head -n 2"
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert len(done.stdout.splitlines()) == 2
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_help_names_the_default_backend(capsys):
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    assert "default: cpu_ref" in capsys.readouterr().out


def test_backends_show_descriptions_and_ops_their_docs(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "numpy reference kernels for every op" in out  # cpu_ref's description
    assert main(["ops", "--level", "1", "--doc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    gelu = next(i for i, line in enumerate(lines) if "nn.gelu(" in line)
    assert lines[gelu + 1].strip() == legato.get_op("nn.gelu").doc != ""


def test_verbose_shows_the_traceback(capsys, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("func @main(%x: float32[2]) -> (float32[2]) {\n  return %q\n}\n")
    assert main(["compile", str(bad)]) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert main(["compile", str(bad), "--verbose"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "%q is not defined" in err


def test_verbose_backends_show_why_a_plugin_failed(capsys, monkeypatch):
    host = legato.context()
    monkeypatch.setattr(host, "problems", [("ghost_plugin", "failed to load 'ghost:x'")])
    assert main(["backends", "-v"]) == 0
    err = capsys.readouterr().err
    assert "problem in plugin ghost_plugin" in err and "no entry point named ghost_plugin" in err


@pytest.mark.parametrize("text, shapes", [
    (["batch=1,seq=128"], {"batch": 1, "seq": 128}),
    (["batch=2", "x=1x3x8"], {"batch": 2, "x": (1, 3, 8)})])
def test_shape_arguments(text, shapes):
    assert parse_shapes(text) == shapes


@pytest.mark.parametrize("text", ["batch", "batch=", "=3", "batch=two", "x=1x"])
def test_bad_shape_arguments_say_the_form(text):
    with pytest.raises(legato.LegatoError, match="expected NAME=SIZE"):
        parse_shapes([text])


def symbolic_onnx(path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_symbolic_onnx_dims_from_the_command_line(tmp_path, capsys):
    path = str(symbolic_onnx(tmp_path / "sym.onnx"))
    assert main(["run", path]) == 1  # random inputs need sizes
    err = capsys.readouterr().err
    assert "float32[batch, seq]) has symbolic dimensions (batch, seq)" in err
    assert "--shape batch=SIZE" in err
    assert main(["compile", path]) == 0  # compiles over the symbols
    assert "decomposed: nn.relu x1" in capsys.readouterr().err
    assert main(["run", path, "--shape", "batch=2,seq=5"]) == 0
    assert "float32[2, 5]" in capsys.readouterr().out
    assert main(["compile", "example:mlp", "--shape", "batch=2"]) == 1
    assert "is not an .onnx file" in capsys.readouterr().err


def test_run_names_the_first_call_that_diverges(backend_factory, capsys):
    backend_factory({"backend": "badexp", "fallback": "cpu_ref", "legal": {"exp": {}}},
                    kernels={"exp": lambda a: (np.exp(a) + 0.05).astype(a.dtype)})
    assert main(["run", "example:transformer", "--backend", "badexp"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out
    first = out.split("first differing call: ")[1].splitlines()[0]
    assert first.split(": ", 1)[1].startswith("exp(") and "part of nn.softmax" in first


def test_progress_draws_only_on_a_terminal(capsys):
    import io
    quiet = io.StringIO()
    with Progress(3, "checking", stream=quiet) as progress:
        for op in ("a", "b", "c"):
            progress.step(op)
    assert quiet.getvalue() == ""  # not a terminal
    shown = io.StringIO()
    with Progress(2, "checking", stream=shown, enabled=True) as progress:
        progress.step("exp")
    assert "checking [" in shown.getvalue() and "1/2 exp" in shown.getvalue()
    ticking = io.StringIO()
    with timer("compiling", after=0.0, stream=ticking, enabled=True):
        import time
        time.sleep(0.5)
    assert "compiling... " in ticking.getvalue()


@pytest.mark.parametrize("n, text", [(512, "512 B"), (42_188, "41.2 KB"),
                                     (421_888, "412 KB"), (3 * 2**20, "3.0 MB")])
def test_sizes_read_as_people_read_them(n, text):
    assert size_text(n) == text


def test_report_counts_calls_per_backend_with_the_fallback(backend_factory):
    backend_factory({"backend": "exponly", "fallback": "cpu_ref", "legal": {"exp": {}}},
                    kernels={"exp": np.exp})
    b = legato.GraphBuilder()
    x = b.input("x", (4, 6))
    y = b.call("concat", b.call("exp", x), b.call("where", b.call("less", x, 0.0), x, 1.0),
               axis=0)
    c = legato.compile(b.build(y), "exponly")
    assert c.report.per_backend == {"exponly": {"exp": 1},
                                    "cpu_ref": {"concat": 1, "where": 1, "less": 1}}
    assert c.report.fallback == "cpu_ref"
    assert "on exponly: 1 calls; on cpu_ref (fallback): 3 calls" in c.report.summary()
    single = legato.compile("example:mlp", "cpu_ref").report
    assert single.per_backend == {"cpu_ref": dict(single.after)}


def test_custom_calls_on_the_fallback_say_so(backend_factory):
    backend_factory({"backend": "tunnel", "fallback": "cpu_ref", "custom_ops": True,
                     "legal": {"exp": {}}}, kernels={"exp": np.exp})
    config = {"backends": {"tunnel": {"keep": ["nn.gelu"]}}}
    b = legato.GraphBuilder()
    mod = b.build(b.call("nn.gelu", b.call("exp", b.input("x", (3,)))))
    report = legato.compile(mod, "tunnel", config).report
    assert report.per_backend == {"tunnel": {"exp": 1}, "cpu_ref": {"custom nn.gelu": 1}}
    assert "custom nn.gelu: custom calls that run on the fallback cpu_ref" in str(report)


def test_explain_has_one_row_per_op_decision_and_reason():
    report = legato.compile("example:transformer", "cpu_ref").report
    rows = [line.split()[:2] for line in str(report).splitlines()[1:]
            if line.startswith("  ") and not line.lstrip().startswith(("result", "on "))]
    assert len(rows) == len({tuple(r) for r in rows})
    add = next(line for line in str(report).splitlines() if line.split()[:2] == ["add", "legal"])
    assert "in the model" in add and "from " in add  # where the calls came from


def test_run_names_the_partitioned_region_that_diverges(backend_factory, capsys):
    def softmax(x, axis=-1):
        e = np.exp(x - x.max(axis, keepdims=True))
        return (1.1 * e / e.sum(axis, keepdims=True)).astype(x.dtype)

    backend_factory({"backend": "badsoftmax", "fallback": "cpu_ref",
                     "legal": {"nn.softmax": {}}}, kernels={"nn.softmax": softmax})
    assert main(["run", "example:transformer", "-b", "badsoftmax,cpu_ref"]) == 1
    out = capsys.readouterr().out
    assert "first differing call: main#" in out and '{"callee": "badsoftmax_0"}' in out
    assert "(@badsoftmax_0 runs on badsoftmax: nn.softmax)" in out


def test_reasons_read_as_sentences(backend_factory):
    backend_factory({"backend": "f32npu", "fallback": "cpu_ref",
                     "legal": {"exp": {"dtypes": ["float32"]}}}, kernels={"exp": np.exp})
    b = legato.GraphBuilder()
    mod = b.build(b.call("exp", b.input("x", (3,), "float64")))
    text = str(legato.compile(mod, "f32npu").report)
    assert "f32npu lists exp as legal, but float64 is not among float32" in text
    assert "not in [" not in text
