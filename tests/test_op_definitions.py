"""Each op is defined in one place: the docs, the importers' simple converters and the
tolerances derive from its definition, and a piece missing for an op fails here by name."""
from pathlib import Path

import pytest

import legato
from legato.frontends.onnx import convert as onnx_convert
from legato.frontends.torch import ops as torch_ops
from legato.ops import docgen
from legato.ops import REGISTRY
from legato.ops.registry import OpDef, Registry

ROOT = Path(__file__).resolve().parents[1]

# ONNX and ATen have no one-to-one op for these; the reason is the importer's converter.
NOT_ONE_TO_ONE_ONNX = {
    "power": "Pow casts a mixed-type exponent first",
    "maximum": "ONNX Max is variadic", "minimum": "ONNX Min is variadic",
    "rsqrt": "ONNX has no Rsqrt",
    "fmod": "ONNX Mod with fmod=1 (fmod=0 is remainder)",
}


def _elementwise_primitives():
    """The elementwise math of the core: level 0, no attributes."""
    return [d for d in docgen.core_ops() if d.level == 0 and d.elementwise and
            not d.attr_specs]


def test_docs_ops_md_is_generated_from_the_definitions():
    path = ROOT / "docs" / "ops.md"
    current = path.read_text(encoding="utf-8")
    assert docgen.render(current, docgen.ops_tables(docgen.core_ops())) == current, \
        "docs/ops.md is out of date: run `make docs` (python -m legato.ops.docgen docs/ops.md)"


def test_docs_check_command_reports_a_stale_file(tmp_path):
    stale = tmp_path / "ops.md"
    stale.write_text(f"# ops\n{docgen.BEGIN}\nold\n{docgen.END}\n")
    assert docgen.main([str(stale), "--check"]) == 1
    assert docgen.main([str(stale)]) == 0 and docgen.main([str(stale), "--check"]) == 0
    assert "`erf`" in stale.read_text()


@pytest.mark.parametrize("opdef", docgen.core_ops(), ids=lambda d: d.name)
def test_every_core_op_has_a_one_line_doc(opdef):
    assert opdef.doc and "\n" not in opdef.doc, f"{opdef.name}: no one-line doc"


@pytest.mark.parametrize("opdef", _elementwise_primitives(), ids=lambda d: d.name)
def test_every_elementwise_primitive_has_its_pieces(opdef):
    name = opdef.name
    assert opdef.tolerance is not None, f"{name}: no tolerance in its definition"
    assert opdef.onnx or name in NOT_ONE_TO_ONE_ONNX, \
        f"{name}: no ONNX mapping (onnx=...) and no reason in NOT_ONE_TO_ONE_ONNX"
    for op_type in opdef.onnx:
        assert op_type in onnx_convert.CONVERTERS, f"{name}: ONNX {op_type} has no converter"
    assert opdef.aten, f"{name}: no ATen mapping (aten=...)"
    for packet in opdef.aten:
        assert f"aten.{packet}.default" in torch_ops.ATEN, f"{name}: aten.{packet} unmapped"
    kernels = legato.get_backend("cpu_ref")
    assert kernels.has_kernel(name), f"{name}: cpu_ref has no reference kernel"


def test_definitions_register_in_any_order_and_validate_once():
    registry = Registry()
    from legato.ir import TensorType
    t = (TensorType((2,), "float32"),)

    def twice(b, x):
        return b.call("double", x)
    with registry.deferred():
        registry.register(OpDef("quad", "x", {}, lambda ts, a: ts[0], "elemwise", 2, twice,
                                [(t, {})]))  # uses 'double', registered after it
        registry.register(OpDef("double", "x", {}, lambda ts, a: ts[0], "elemwise", 1,
                                lambda b, x: b.call("add", x, x), [(t, {})]))
        registry.register(OpDef("add", "a, b", {}, lambda ts, a: ts[0], "broadcast"))
    assert {"quad", "double", "add"} <= set(registry.names())


def test_a_failing_deferred_definition_is_removed_and_named():
    from legato.ir.errors import RegistrationError
    from legato.ir import TensorType
    registry = Registry()
    t = (TensorType((2,), "float32"),)
    with pytest.raises(RegistrationError, match="bad"):
        with registry.deferred():
            registry.register(OpDef("bad", "x", {}, lambda ts, a: ts[0], "elemwise", 1,
                                    lambda b, x: b.call("missing", x), [(t, {})]))
    assert "bad" not in registry


def test_op_facts_are_validated():
    from legato.ir.errors import RegistrationError
    with pytest.raises(RegistrationError, match="tolerance"):
        OpDef("x", "a", {}, lambda ts, a: ts[0], "elemwise", tolerance=-1)
    with pytest.raises(RegistrationError, match="onnx"):
        OpDef("x", "a", {}, lambda ts, a: ts[0], "elemwise", onnx=[3])


def test_layout_rules_are_part_of_the_definitions():
    assert REGISTRY.get("nn.conv2d").layout_rule is not None
    assert REGISTRY.get("sum").layout_rule is REGISTRY.get("mean").layout_rule


def test_layout_propagation_reads_a_scalar_operand_in_its_converted_form():
    """A rank-0 operand of an op whose other operand carries a perm is the value the
    conversion made for it, not the original (DeBERTa: x / sqrt(const) after a transpose;
    the converted module read the dropped sqrt's result)."""
    import numpy as np
    from legato.ir import Const
    from legato.passes.layout import convert_layout
    from legato.ir.verify import verify

    b = legato.GraphBuilder()
    x = b.input("x", (1, 2, 3, 4))
    t = b.call("permute_dims", x, axes=[0, 2, 3, 1])
    scale = b.call("sqrt", Const.of(np.array(16.0, np.float32)))
    y = b.call("divide", t, scale)
    module = b.build(b.call("exp", y))
    converted = convert_layout(module, "NHWC")
    verify(converted, REGISTRY)
    defined = set(converted.functions["main"].params)
    for call in converted.functions["main"].calls:
        assert all(v is None or isinstance(v, Const) or v in defined for v in call.inputs)
        defined.update(call.outputs)
    data = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
    want = np.exp(np.transpose(data, (0, 2, 3, 1)) / 4.0)
    np.testing.assert_allclose(legato.compile(converted, "cpu_ref")(data), want, rtol=1e-6)
