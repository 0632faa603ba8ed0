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
    read = [k for k in again[0][0][3] if isinstance(k, tuple) and isinstance(k[2], bytes)]
    first = [k for k in keys[0][0][0][3] if isinstance(k, tuple) and isinstance(k[2], bytes)]
    assert read[0][2] is first[0][2]  # the kept bytes (hashed once), not a new copy
    assert region_key(view, [0], [x]) == keys[0]  # no cache given: the same key


def test_a_rearranged_inputs_type_key_is_its_types_shape_and_dtype():
    view, x = _view()
    const = view.calls[0].inputs[1]
    for r in (Rearranged(const, None, (1, 0)), Rearranged(const, (2, 8), None),
              Rearranged(const, (2, 2, 4), (2, 0, 1))):
        assert r.type_key == (r.type.shape, r.type.dtype)
        assert region_key(view, [0], [x, r])[1][1] == (r.type.shape, r.type.dtype)
