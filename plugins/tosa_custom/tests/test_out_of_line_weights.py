"""Large constants out of line (resources.py): `dense_resource` handles in the MLIR text,
the arrays beside it, and the resource section in the file that tosa-opt validates and
serializes for the TOSA reference model; small models keep every constant inline."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import legato  # noqa: E402
from legato.cli import main as cli_main  # noqa: E402
from legato_tosa_custom import TosaArtifact, Weights, backend  # noqa: E402
from legato_tosa_custom.buckets import bucket_text, functions  # noqa: E402

RNG = np.random.default_rng(0)
W1 = (RNG.standard_normal((256, 256)) / 16).astype(np.float32)   # 256 KiB
B1 = RNG.standard_normal(256).astype(np.float32)                 # 1 KiB: at the threshold
W2 = (RNG.standard_normal((256, 64)) / 16).astype(np.float32)    # 64 KiB
OUT_OF_LINE = Weights("auto", auto_bytes=100_000)  # this model is over it


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """tanh(x @ W1 + B1) @ W2 over x float32[batch, 256]: 321 KiB of weights."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["a"]),
             helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("MatMul", ["t", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(B1, "b1"),
         numpy_helper.from_array(W2, "w2")])
    path = tmp_path_factory.mktemp("weights") / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def numpy_mlp(x):
    return np.tanh(x @ W1 + B1) @ W2


def blobs_hold(artifact: TosaArtifact, *arrays) -> bool:
    """The artifact's blobs are `arrays`' bytes, whatever shape legalization gave them."""
    held = sorted(a.tobytes() for a in artifact.resources.values())
    return held == sorted(a.tobytes() for a in arrays)


def test_large_constants_go_out_of_line_validate_and_run(model, tools):
    compiled = legato.compile(str(model), backend("pro_fp", weights=OUT_OF_LINE),
                              input_shapes={"batch": 4})
    artifact = compiled.artifact
    assert isinstance(artifact, TosaArtifact)
    assert artifact.text.count("dense_resource<") == 2
    assert blobs_hold(artifact, W1, W2)  # B1 (1 KiB, not over it) stays inline
    assert len(artifact.text) < 8000 < W2.nbytes
    assert str(artifact).startswith(artifact.text + "{-#\n  dialect_resources: {")
    tools.validate(artifact)
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    (got,) = tools.run_reference(artifact, [x])
    np.testing.assert_allclose(got, numpy_mlp(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, legato.reference(compiled.source)(x), rtol=1e-5,
                               atol=1e-5)


def test_small_models_stay_inline(model, monkeypatch):
    """Under auto (the default) 321 KiB is small: a str, as inline prints it."""
    monkeypatch.delenv("LEGATO_TOSA_WEIGHTS", raising=False)
    text = legato.compile(str(model), "tosa_custom", input_shapes={"batch": 4}).artifact
    assert isinstance(text, str) and "dense_resource" not in text
    inline = legato.compile(str(model), backend("pro_fp", weights="inline"),
                            input_shapes={"batch": 4}).artifact
    assert text == inline
    assert W2[:1, :4].tobytes().hex().upper() in text


def test_only_large_varied_constants_go_out_of_line():
    """Mode resources: constants over 1 KiB go; one at 1 KiB, a splat and a bool mask
    stay inline."""
    b = legato.GraphBuilder()
    x = b.input("x", (512,))
    large = RNG.standard_normal(512).astype(np.float32)
    y = b.add(b.multiply(b.add(x, b.const(large)), b.const(np.full(512, 2.5, np.float32))),
              b.const(np.arange(512, dtype=np.float32)))
    small = b.add(b.input("z", (256,)), b.const(RNG.standard_normal(256).astype(np.float32)))
    mask = b.where(b.const(RNG.random(512) > 0.5), y, b.const(np.float32(1.0)))
    module = b.build(mask, small)
    artifact = legato.compile(module, backend("pro_fp", weights="resources")).artifact
    assert isinstance(artifact, TosaArtifact)
    assert blobs_hold(artifact, large, np.arange(512, dtype=np.float32))
    assert artifact.text.count("dense_resource<") == 2


def test_shape_buckets_share_each_blob(model, tools):
    """Two functions of one module use one blob per weight; the reference model runs the
    bucket of the inputs' shape with its blobs."""
    artifact = legato.compile(str(model), backend("pro_fp", weights=OUT_OF_LINE),
                              shape_buckets={"batch": [1, 3]}).artifact
    assert artifact.text.count("dense_resource<") == 4 and blobs_hold(artifact, W1, W2)
    x = np.random.default_rng(2).standard_normal((3, 256)).astype(np.float32)
    (got,) = tools.run_reference(artifact, [x], validate=True)
    np.testing.assert_allclose(got, numpy_mlp(x), rtol=1e-5, atol=1e-5)
    # the text of a file (as `legato validate FILE` reads it) keeps its blobs when cut
    cut = bucket_text(str(artifact), [x])
    assert list(functions(cut)) == ["main"] and cut.count("dense_resource<") == 2
    assert cut.endswith(str(artifact)[len(artifact.text):])


def test_the_cli_writes_a_file_that_validates_and_runs(model, tools, tmp_path, monkeypatch,
                                                       capsys):
    """`legato compile -o out.mlir` writes the text and its resource section; `legato
    validate out.mlir --run` reads it back and runs it against cpu_ref."""
    monkeypatch.setenv("LEGATO_TOSA_WEIGHTS", "resources")
    out = tmp_path / "out.mlir"
    shape = ["--shape", "batch=4"]
    assert cli_main(["compile", str(model), "-b", "tosa_custom", *shape, "-o", str(out)]) == 0
    text = out.read_text()
    head, section, blobs = text.partition("{-#\n  dialect_resources: {")
    assert section and head.count("dense_resource<") == 2 and len(head) < 8000
    assert W2.tobytes().hex() in blobs
    capsys.readouterr()
    assert cli_main(["validate", str(out), "--run", "--model", str(model), *shape]) == 0
    assert f"{out}: valid" in capsys.readouterr().out


def test_unknown_modes_are_refused(monkeypatch):
    with pytest.raises(legato.LegatoError, match="mode 'hex' is not one of auto, inline"):
        backend("pro_fp", weights="hex")
    with pytest.raises(legato.LegatoError, match="threshold must be a number of bytes"):
        Weights("resources", threshold=-1)
    monkeypatch.setenv("LEGATO_TOSA_WEIGHTS", "external")
    b = legato.GraphBuilder()
    with pytest.raises(legato.LegatoError, match=r"\$LEGATO_TOSA_WEIGHTS='external'"):
        legato.compile(b.build(b.tanh(b.input("x", (4,)))), "tosa_custom")
