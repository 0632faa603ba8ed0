"""Recomposition keeps the program well formed: every call after its inputs' definitions,
and a match whose op call would be ill-typed declined as a miss, never raised."""
from __future__ import annotations

import numpy as np

import legato
from legato.ir.verify import verify
from legato.passes.recompose import RecomposePass, recompose


def run(module, *inputs):
    out = legato.reference(module)(*inputs)
    return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else [out])]


def attention_module(k_heads: int, zero_adds: int):
    """Attention as exported: scores = q @ k^T, then `zero_adds` additions of a zero
    bias (a folded position bias), softmax, @ v; k may have fewer heads than q, left to
    matmul's broadcasting (multi-query attention)."""
    b = legato.GraphBuilder()
    q = b.input("q", (1, 4, 6, 8), "float32")
    k = b.input("k", (1, k_heads, 6, 8), "float32")
    v = b.input("v", (1, k_heads, 6, 8), "float32")
    scores = b.matmul(b.multiply(q, 0.125), b.permute_dims(k, axes=[0, 1, 3, 2]))
    for _ in range(zero_adds):
        scores = b.add(scores, b.const(np.zeros((1, 1, 6, 6), np.float32)))
    module = b.build(b.matmul(b.nn_softmax(scores, axis=-1), v))
    rng = np.random.default_rng(7)
    feeds = [rng.standard_normal(s).astype(np.float32)
             for s in [(1, 4, 6, 8), (1, k_heads, 6, 8), (1, k_heads, 6, 8)]]
    return module, feeds


def test_a_chain_of_zero_additions_inside_a_recovered_attention_goes_whole():
    """mt5's export adds two zero biases to the scores; the first stayed behind, reading
    the removed q @ k^T ("input ... is not defined before use")."""
    module, feeds = attention_module(k_heads=4, zero_adds=2)
    back, _ = recompose(module)
    verify(back)
    assert [c.op for c in back.main.calls].count("nn.attention") == 1
    for a, b in zip(run(module, *feeds), run(back, *feeds)):
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-5)


def test_multi_query_attention_left_to_matmul_broadcasting_is_a_miss_not_an_error():
    """falcon's k and v have one head for q's four, broadcast by matmul; nn.attention
    needs k's heads to equal q's, so the match is declined with its reason (make_call
    raised a ShapeError out of recompose)."""
    module, feeds = attention_module(k_heads=1, zero_adds=1)
    recomposer = RecomposePass(["nn.attention"])
    back = recomposer(module).module
    verify(back)
    assert "nn.attention" not in [c.op for c in back.main.calls]
    assert "refuses" in str(recomposer.report.misses)
    for a, b in zip(run(module, *feeds), run(back, *feeds)):
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-5)
