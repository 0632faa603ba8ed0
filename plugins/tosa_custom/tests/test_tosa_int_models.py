"""What the quantized models at their published sizes (benchmarks/tosa_int.py: BERT-base,
ResNet-50, MobileNetV2 from onnxruntime's quantizer) needed of tosa_custom_int, each on a
small program: validated for pro_fp+pro_int, run on the TOSA reference model against
cpu_ref."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato import GraphBuilder

INT = "tosa_custom_int"


def run_both(tools, module, inputs):
    """(TOSA reference model's results, cpu_ref's, the MLIR text) of `module`."""
    text = legato.compile(module, INT).artifact
    got = tools.run_reference(text, inputs, validate=True)
    want = legato.compile(module, "cpu_ref")(*inputs)
    want = want if isinstance(want, (list, tuple)) else [want]
    return got, [np.asarray(w) for w in want], str(text)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_max_pool_of_int8_and_uint8_is_one_tosa_max_pool(tools, dtype):
    """ResNet-50's stem pool (3x3, stride 2, padding 1) after the QDQ fold pools the 8-bit
    values: MAX_POOL2D of int8 (uint8 as int8, `x - 128`, and back). It was refused
    ('not for dtype int8'), and the rule re-made the same call (rewrite loop)."""
    g = GraphBuilder()
    x = g.input("x", (1, 4, 12, 12), dtype)
    y = g.call("nn.max_pool2d", x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])
    info = np.iinfo(dtype)
    data = np.random.default_rng(0).integers(info.min, info.max + 1, (1, 4, 12, 12))
    (got,), (want,), text = run_both(tools, g.build(y), [data.astype(dtype)])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, _max_pool(data).astype(dtype))
    assert text.count('"tosa.max_pool2d"') == 1 and "f32" not in text


def _max_pool(data):
    """3x3 windows, stride 2, padding 1 (never the maximum), in numpy."""
    padded = np.pad(data.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)],
                    constant_values=-np.inf)
    out = data.shape[2] // 2
    return np.array([[[[padded[n, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max()
                        for j in range(out)] for i in range(out)]
                      for c in range(data.shape[1])] for n in range(data.shape[0])])
