"""Region keys (legato.passes.recovery): a region is keyed by what it computes, so that
repeated layers recover alike; a small constant counts by its contents, read once per
constant and kept on the registry with the constant (each try at a matmul copied and
hashed its weight again)."""
import numpy as np

import legato
from legato.passes.flatten import build_view
from legato.passes.rearranged import Rearranged
from legato.passes.recovery import region_key

REGISTRY = legato.context().registry


def _view():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 4), "float32")
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    outs = [b.matmul(x, b.const(data)) for data in (w, w.copy(), w + 1)]
    fn = b.build(*outs).main
    return build_view(REGISTRY, list(fn.calls), fn.params, fn.results, lambda op: False), x


def test_regions_reading_equal_constants_share_a_key_and_the_contents_are_read_once():
    view, x = _view()
    contents = {}
    keys = [region_key(view, [i], [x], contents) for i in range(3)]
    assert keys[0] == keys[1] != keys[2]  # equal contents, other constants
    assert len(contents) == 3
    again = region_key(view, [0], [x], contents)
    assert again == keys[0]
    read = [k for k in again[0][0][1] if isinstance(k, tuple) and isinstance(k[2], bytes)]
    first = [k for k in keys[0][0][0][1] if isinstance(k, tuple) and isinstance(k[2], bytes)]
    assert read[0][2] is first[0][2]  # the kept bytes (hashed once), not a new copy
    assert region_key(view, [0], [x]) == keys[0]  # no cache given: the same key


def test_a_rearranged_inputs_type_key_is_its_types_shape_and_dtype():
    view, x = _view()
    const = view.calls[0].inputs[1]
    for r in (Rearranged(const, None, (1, 0)), Rearranged(const, (2, 8), None),
              Rearranged(const, (2, 2, 4), (2, 0, 1))):
        assert r.type_key == (r.type.shape, r.type.dtype)
        assert region_key(view, [0], [x, r])[1][1] == (r.type.shape, r.type.dtype)


def test_a_small_constants_scalar_value_is_kept_on_the_registry_with_it_and_a_weight_is_not():
    """The canonical form asks each constant whether all its elements are one number (a
    `* 1`, `+ 0`, a divisor): a small constant's answer is kept on the registry with the
    constant (so its id stays its own), read again by the next view; a weight larger
    than a broadcast scalar is told at once and not held."""
    from legato.passes.canonical import SCALAR_LIMIT, canonical
    values = REGISTRY.derived("recompose.scalars")
    values.clear()
    b = legato.GraphBuilder()
    x = b.input("x", (2, SCALAR_LIMIT + 1), "float32")
    ones = b.const(np.ones(SCALAR_LIMIT + 1, np.float32))          # a weight: not held
    half = b.const(np.full((1,), 0.5, np.float32))
    fn = b.build(b.divide(b.multiply(x, ones), half)).main
    calls, owners = list(fn.calls), [(i,) for i in range(len(fn.calls))]
    first = canonical(REGISTRY, calls, owners, fn.results)
    kept = {k: v for k, v in values.items()}
    assert [v[1] for v in kept.values()] == [0.5] and kept[id(half)][0] is half
    assert id(ones) not in values
    again = canonical(REGISTRY, calls, owners, fn.results)
    assert [c.op for c in again[0]] == [c.op for c in first[0]] == ["multiply", "multiply"]
    assert values[id(half)] is kept[id(half)]  # read, not worked out again
