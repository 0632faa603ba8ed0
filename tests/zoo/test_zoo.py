"""The public model zoo: Hugging Face architectures (tests/zoo/models.py) imported through
torch.export and through ONNX, compiled for cpu_ref and c_kernels and compared with eager
(1e-4 relative), emitted as TOSA and validated with tosa-opt when the tools are installed;
the full run (`make zoo`) also runs the TOSA module on the TOSA reference model and matches
it with cpu_ref (1e-4).

`make zoo` runs every model by both routes and prints the table (`python -m
tests.zoo.report` writes it to tests/zoo/STATUS.md); a model that does not get through fails
with the first unsupported op or error. `make test` runs the cheap part: every model's build
and eager forward, and the model/route pairs listed in QUICK.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

from tests.zoo import check, export, models  # noqa: E402

pytestmark = pytest.mark.zoo

# The model/route pairs `make test` runs: pairs that pass, within its time budget (about
# 30 s warm): every core model through ONNX (the export is cached; legato's import is ms)
# and a spread of them through torch.export (~1-2 s each). The wider zoo (tests/zoo/wide.py) is
# `make zoo`'s alone, its builds too; `make zoo` runs every pair.
QUICK = {
    *((name, "onnx") for name in models.CORE),
    ("clip_vision", "torch"), ("convnext", "torch"), ("efficientnet", "torch"),
    ("gpt2", "torch"), ("qwen2", "torch"), ("regnet", "torch"), ("resnet", "torch"),
    # called with their defaults (defaults.py): a decoder's cache, the default MoE path
    ("gpt2_defaults", "torch"), ("mixtral_defaults", "torch"),
}

PAIRS = [pytest.param(name, route, id=f"{name}-{route}",
                      marks=() if (name, route) in QUICK else pytest.mark.zoo_full)
         for name in models.NAMES for route in models.ZOO[name].routes]


def test_quick_pairs_are_zoo_pairs():
    assert QUICK <= {(n, r) for n in models.NAMES for r in models.ZOO[n].routes}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name in models.CORE else pytest.mark.zoo_full)
    for name in models.NAMES])
def test_builds_and_runs_eagerly(name):
    """Seeded and scaled: the same weights and inputs on every build, and an output that
    neither vanished nor exploded (what makes the 1e-4 comparison mean something)."""
    inputs, wants = export.eager(name)
    again_inputs, again = export.eager(name)
    assert all(np.array_equal(a, b) for a, b in zip(inputs, again_inputs))
    wants, again = (w if isinstance(w, list) else [w] for w in (wants, again))
    assert len(wants) == len(again) and all(map(np.array_equal, wants, again))
    want = wants[0]  # last_hidden_state (a decoder called with its defaults: then its cache)
    assert want.dtype == np.float32 and np.isfinite(want).all()
    assert 0.1 < float(want.std()) < 100.0, f"{name}: output std {want.std():.3g}"
    spec = models.ZOO[name]
    if spec.tokens:
        assert inputs[0].dtype == np.int64 and inputs[0].shape == (1, models.SEQ)
    else:
        assert inputs[0].dtype == np.float32


@pytest.mark.parametrize("name, route", PAIRS)
def test_imports_matches_eager_and_emits_tosa(name, route, tosa_tools, full_run, zoo_row):
    row = check.run(name, route, tosa_tools, reference=full_run)
    zoo_row(row)
    if not row.ok:
        pytest.fail(f"{name} via {route}: {row.failure}", pytrace=False)
    assert set(row.errors) == set(check.BACKENDS)
