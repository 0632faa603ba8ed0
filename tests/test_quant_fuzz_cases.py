"""Cases the quantized fuzz target (tests/fuzz/target_quant.py) found, each against
onnxruntime: the op alone where one op was wrong, and the generated program by its seed."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from tests.fuzz import target_quant  # noqa: E402
from tests.test_qnn_ops import BACKENDS, MS, against_ort, const, node_model  # noqa: E402


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, shape", [("uint8", (4, 4)), ("int8", (3, 1)),
                                          ("uint8", (2, 20))])
def test_qlinear_softmax_of_short_rows_at_a_fine_output_scale(backend, dtype, shape):
    # e * floor(1 / out_scale) passed float32's range in a row of 4 at out_scale 0.00165
    # (e reaches float32's max / 4 / e^5): 255 where onnxruntime gives 221; it divides by
    # the sum first (fuzz seed 333: a softmax of a softmax, 59 steps off)
    rng = np.random.default_rng(1)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    feeds = {"x": rng.integers(lo, hi, shape).astype(dtype)}
    consts = {"xs": const(0.003921569, "float32"), "xz": const(lo if lo else 0, dtype),
              "ys": const(0.0016491466, "float32"), "yz": const(lo, dtype)}
    model = node_model("QLinearSoftmax", feeds, consts, ["x", "xs", "xz", "ys", "yz"], dtype,
                       domain=MS, axis=-1, opset=13)
    against_ort(model, feeds, backend)


@pytest.mark.parametrize("seed", [333, 356, 523])
def test_fuzz_programs_with_softmax_chains_match_onnxruntime(seed):
    assert target_quant.run(seed) == "ok"
