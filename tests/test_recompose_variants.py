"""The attribute variants traced into templates cover every combination an op's examples
name: an op with more enumerable combinations than are traced keeps its examples' own."""
from __future__ import annotations

import numpy as np

import legato
from legato.ir.verify import verify
from legato.passes.patterns import variants
from legato.passes.recompose import recompose

REGISTRY = legato.context().registry


def test_the_examples_own_attributes_are_among_the_variants():
    opdef = REGISTRY.get("nn.grid_sample")
    for _, attrs in opdef.examples:
        own = opdef.normalize_attrs(dict(attrs))
        assert any(opdef.normalize_attrs(v) == own for v in variants(opdef, dict(attrs)))


def test_bicubic_grid_sample_with_reflection_is_recovered_from_its_legalized_form():
    """mode and padding_mode have 3 values each, align_corners 2: 18 combinations, of
    which 16 were traced, never bicubic with reflection padding ("structure differs")."""
    b = legato.GraphBuilder()
    data = b.input("data", (1, 2, 4, 5), "float32")
    grid = b.input("grid", (1, 3, 2, 2), "float32")
    module = b.build(b.call("nn.grid_sample", data, grid, mode="bicubic",
                            padding_mode="reflection"))
    low = legato.legalize(module, max_level=0).module
    back, _ = recompose(low, ops=["nn.grid_sample"])
    verify(back)
    assert [c.op for c in back.main.calls] == ["nn.grid_sample"]
    rng = np.random.default_rng(5)
    feeds = [rng.standard_normal((1, 2, 4, 5)).astype(np.float32),
             rng.uniform(-1.2, 1.2, (1, 3, 2, 2)).astype(np.float32)]
    expect = np.asarray(legato.reference(low)(*feeds))
    np.testing.assert_allclose(np.asarray(legato.reference(back)(*feeds)), expect,
                               rtol=2e-4, atol=2e-5)
