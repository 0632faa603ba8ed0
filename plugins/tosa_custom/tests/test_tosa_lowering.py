"""lowering.py is the one table: the backend's legal ops and rules and the emitter's
dispatch derive from it, and every float elementwise primitive of the core has a place in
it (a TOSA row, a lowering rule, or a reason in NOT_LOWERED)."""
from __future__ import annotations

from importlib.resources import files

import pytest
import yaml

import legato
import legato.testing
from legato.legalization.capability import parse_capability
from legato_tosa_custom import emit_mlir, lowering
from legato_tosa_custom.cases import KEEP, core_ops, own_ops
from legato_tosa_custom.emitter import FORMS, emit_function
from legato_tosa_custom.plugin import capability


def is_float_op(op: str) -> bool:
    """Some sample of the op takes a float tensor (the kit draws them from the definition)."""
    return any(t is not None and t.dtype.startswith(("float", "bfloat"))
               for s in legato.testing.samples(op) for t in s.input_types())


def float_elementwise_primitives() -> list[str]:
    registry = legato.context().registry
    return [op for op in core_ops(registry) if registry.get(op).level == 0
            and registry.get(op).elementwise and is_float_op(op)]


def test_every_float_elementwise_primitive_has_a_place_in_the_table():
    found = float_elementwise_primitives()
    assert {"add", "exp", "divide", "where"} <= set(found)  # the selection sees the core
    missing = [op for op in found if lowering.disposition(op) is None]
    assert not missing, (
        f"tosa_custom has no lowering for {', '.join(missing)}: add a row to lowering.TOSA "
        "(a 1:1 TOSA operator), a rule to lowering.RULES, or a reason to "
        "lowering.NOT_LOWERED")


def test_each_op_has_one_place():
    places = [set(lowering.TOSA), set(lowering.RULES), set(lowering.NOT_LOWERED)]
    for i, a in enumerate(places):
        for b in places[i + 1:]:
            assert not a & b, a & b


def test_the_backend_is_derived_from_the_table():
    backend = legato.get_backend(KEEP)
    assert set(backend.legal) == set(lowering.TOSA)
    assert set(backend._rules) == set(lowering.RULES) | set(lowering.INTEGER_RULES) | {
        op for op, row in lowering.TOSA.items() if row.rule is not None}
    for op, row in lowering.TOSA.items():
        cond = backend.legal[op]
        assert cond.check is row.check, op
        assert cond.dtypes == (None if row.dtypes is None else frozenset(row.dtypes)), op
    # capability.yaml keeps the backend-wide keys only: nothing per op to drift
    data = yaml.safe_load((files("legato_tosa_custom") / "capability.yaml").read_text())
    assert not {"legal", "rules", "kernels"} & set(data)
    assert capability()["backend"] == KEEP


def test_the_emitter_prints_every_row_and_says_so():
    assert emit_mlir.ops == set(lowering.TOSA) | {"custom"}
    int_rows = lowering.rows({"pro_fp", "pro_int"})
    assert set(int_rows) == set(lowering.TOSA) | set(lowering.INT_TOSA)
    assert {row.form for row in int_rows.values()} <= set(FORMS)
    assert set(int_rows) >= own_ops()  # the TOSA-only ops are printed as they are


def test_integer_rules_are_for_ops_whose_float_forms_are_not_lowered():
    assert set(lowering.INTEGER_RULES) <= set(lowering.NOT_LOWERED)


def test_not_lowered_ops_are_refused_with_a_reason():
    for op, why in lowering.NOT_LOWERED.items():
        assert op in core_ops() and len(why) > 10, op


def test_a_new_row_is_legal_and_printed(monkeypatch):
    """What adding a 1:1 op takes: one row, which makes the op legal and printed. (sqrt,
    today a rule, as a made-up tosa.sqrt: TOSA 1.0 has none, so nothing is validated.)"""
    monkeypatch.setitem(lowering.TOSA, "sqrt", lowering.unary("tosa.sqrt"))
    monkeypatch.delitem(lowering.RULES, "sqrt")
    tables = lowering.capability_tables()
    assert tables["legal"]["sqrt"]["dtypes"] == ["float32", "float16"]
    assert "sqrt" not in tables["rules"]
    b = legato.GraphBuilder()
    module = b.build(b.sqrt(b.input("x", (2, 3))))
    backend = parse_capability({**capability(), **tables}, legato.context().registry,
                               emitter=emit_mlir)
    text = "\n".join(emit_function("main", module.main, backend))
    assert '"tosa.sqrt"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>' in text


def test_the_printed_table_lists_every_op():
    text = lowering.table()
    for op in [*lowering.TOSA, *lowering.RULES, *lowering.NOT_LOWERED]:
        assert f"| `{op}` |" in text, op


def _rotary_with_nothing_passed_through():
    """x[..., :16] transformed, concatenated with the empty x[..., 16:] (a rotary
    embedding over the whole head, as Phi-3 exports)."""
    b = legato.GraphBuilder()
    x = b.input("x", (1, 2, 3, 16))
    rot = b.call("strided_slice", x, begin=[0], end=[16], strides=[1], axes=[3])
    rest = b.call("strided_slice", x, begin=[16], end=[16], strides=[1], axes=[3])
    return b.build(b.call("concat", b.call("exp", rot), b.call("negative", rest), axis=3))


def test_empty_intermediates_are_taken_out_and_the_rest_lowers(tools):
    import re

    import numpy as np
    module = _rotary_with_nothing_passed_through()
    text = legato.compile(module, "tosa_custom").artifact
    assert "tosa.concat" not in text and not re.search(r"[<x]0x", text)  # no empty tensor
    data = np.random.default_rng(0).standard_normal((1, 2, 3, 16)).astype(np.float32)
    got = tools.run_reference(text, [data], validate=True)[0]
    np.testing.assert_allclose(got, np.exp(data), rtol=1e-6)


def test_an_empty_function_result_is_still_refused():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    module = b.build(b.call("strided_slice", x, begin=[3], end=[3], strides=[1], axes=[1]))
    with pytest.raises(legato.ir.errors.LegatoError, match="empty"):
        legato.compile(module, "tosa_custom")
