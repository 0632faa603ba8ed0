"""The quantized slice of the zoo (tests/zoo/quant.py): zoo models quantized with
onnxruntime's quantize_static in the QDQ and QOperator formats, run on cpu_ref and
c_kernels against onnxruntime's int8 run of the same file. `make zoo` runs every pair and
prints the table; `make test` runs QUICK (small models, quantized files cached)."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

from tests.zoo import quant  # noqa: E402

pytestmark = pytest.mark.zoo

# a BERT-like encoder whose softmax onnxruntime fuses (u8s8), a QOperator CNN, and a QDQ
# ResNet with float biases (QuantizeBias off), about 2 s each once quantized
QUICK = {"bert-qdq-u8s8", "mobilenet_v2-qoperator-u8s8-pc", "resnet-qdq-u8s8-pc-fb"}


def test_quick_pairs_are_quantized_pairs():
    assert QUICK <= set(quant.QUANT)
    assert {q.fmt for q in quant.QUANT.values()} == {"QDQ", "QOperator"}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name in QUICK else pytest.mark.zoo_full)
    for name in quant.QUANT])
def test_quantized_model_matches_onnxruntime_int8(name, zoo_quant_row):
    row = quant.run(quant.QUANT[name])
    zoo_quant_row(row)
    if not row.ok:
        pytest.fail(f"{name}: {row.failure}", pytrace=False)
    assert set(row.within) == set(quant.BACKENDS)
    assert row.qnn_calls > 0   # folded or imported onto integer ops, not run in float


def test_figures_count_steps_of_the_output_grid():
    import numpy as np
    want = np.arange(1000, dtype=np.float32) * 0.5
    got = want.copy()
    got[3] += 1.0    # two steps
    got[4] -= 0.5    # one step
    assert quant.figures(got, want, 0.5) == (0.999, 2.0)
