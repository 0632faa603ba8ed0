"""External validation of tosa_custom output with the official TOSA tools (tosa-tools on
PyPI, installed by `make test` into .venv-tosa, see mk/tosa.mk):

- every emitted module passes `tosa-opt --tosa-attach-target="profiles=pro_fp level=8k
  specification_version=1.0" --tosa-validate` (with strict op-spec alignment);
- modules without custom ops are serialized with `tosa-opt --tosa-serialize` and run on
  the TOSA reference model, matching cpu_ref within 1e-5 relative.

Without the tools these tests skip, and say so in the warnings summary.
"""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.frontends.examples import random_inputs
from legato_tosa_custom import emit_mlir
from legato_tosa_custom.cases import KEEP, MODEL_KEEPS, assert_matches, assert_within_bound, \
    core_ops, keep, lowered_ops, sample_module


def compile_tosa(model, config=None):
    return legato.compile(model, backend=KEEP, config=config)


@pytest.mark.parametrize("kept", [False, True], ids=["standard", "custom"])
@pytest.mark.parametrize("model", sorted(MODEL_KEEPS))
def test_example_models_validate(tools, model, kept):
    compiled = compile_tosa(f"example:{model}", keep(*MODEL_KEEPS[model]) if kept else None)
    assert ('"tosa.custom"' in compiled.artifact) == kept
    tools.validate(compiled.artifact)


@pytest.mark.parametrize("model", sorted(MODEL_KEEPS))
def test_example_models_match_cpu_ref_on_the_reference_model(tools, model):
    compiled = compile_tosa(f"example:{model}")
    feeds = random_inputs(compiled.source, seed=1)
    assert_matches(tools.run_reference(compiled.artifact, feeds),
                   legato.reference(compiled.source)(*feeds))


def test_nchw_cnn_without_the_layout_pass(tools):
    """legalize() alone: the conv/pool rules' own transposes, validated and run."""
    module = legato.load_model("example:cnn")
    text = emit_mlir(legato.legalize(module, backend=KEEP).module)
    assert text.count('"tosa.transpose"') >= 8
    tools.validate(text)
    feeds = random_inputs(module, seed=2)
    assert_matches(tools.run_reference(text, feeds), legato.reference(module)(*feeds))


@pytest.mark.parametrize("op", lowered_ops())
def test_every_lowered_op_validates_and_runs(tools, op):
    module, feeds = sample_module(op)
    compiled = compile_tosa(module)
    tools.validate(compiled.artifact)
    assert_within_bound(op, tools.run_reference(compiled.artifact, feeds),
                        legato.reference(module)(*feeds))


@pytest.mark.parametrize("op", core_ops())
def test_every_op_kept_as_custom_validates(tools, op):
    """Keep each core op (but `custom`, the tunnel itself) on its own: the module with it
    as tosa.custom (or native, where TOSA has the op as is) still validates."""
    module, _ = sample_module(op)
    tools.validate(compile_tosa(module, keep(op)).artifact)
    call = module.main.calls[0]
    custom = legato.encode_custom(call, "legato", legato.context().registry)
    tunnelled = legato.Module({"main": module.main.with_calls([custom], custom.outputs)})
    text = emit_mlir(tunnelled)
    assert text.count('"tosa.custom"') == 1
    tools.validate(text)


def test_invalid_modules_are_rejected(tools):
    """The validator is really consulted: a float64 op is not TOSA 1.0 (the emitter refuses
    to print one, so the text is edited)."""
    b = legato.GraphBuilder()
    text = emit_mlir(b.build(b.exp(b.input("x", (2,)))))
    tools.validate(text)
    with pytest.raises(legato.LegatoError, match="f64"):
        tools.validate(text.replace("f32", "f64"))


def test_reference_model_really_runs(tools):
    b = legato.GraphBuilder()
    x = b.input("x", (3,))
    text = emit_mlir(b.build(b.add(x, x)))
    (out,) = tools.run_reference(text, [np.array([1, 2, 3], np.float32)])
    np.testing.assert_array_equal(out, [2, 4, 6])
