"""The c_kernels tables derive from the C library's op lists (lgk_unary_name,
lgk_binary_name): a primitive elementwise op is added by one line in
csrc/elementwise.c, and these tests name what is missing when it is not."""
import numpy as np
import pytest

import legato
from legato.ir import TensorType
from legato.ir.builder import default_registry
from legato.ir.errors import LegatoError
from legato.ops import CORE_OPS
from legato.ops.registry import REQUIRED

from legato_c_kernels import kernels as K
from legato_c_kernels.kernels import elementwise

# Float elementwise primitives of the core that c_kernels leaves to its fallback, and why.
EXCLUDED: dict[str, str] = {}

C_TABLES = "LGK_UNARY_TABLE / LGK_BINARY_TABLE in plugins/c_kernels/csrc/elementwise.c"

# Ops whose C variants cover some attribute values only (not the default): the attributes
# of the variant, which capability.yaml names as the op's legal condition.
PARTIAL_VARIANTS = {"clip": {"min": 0.0, "max": 6.0}}  # relu6, a conv/GEMM epilogue too


def _float_elementwise_primitives() -> list[str]:
    """Level-0 elemwise/broadcast ops of the core (not of plugins) that infer float32
    results from float32 inputs with their default attributes (comparisons, logical
    ops, where and ops with required attributes are not)."""
    found = []
    for opdef in default_registry().ops():
        if opdef.name not in CORE_OPS or opdef.level != 0 or not opdef.elementwise or \
                opdef.variadic:
            continue
        inputs = [TensorType((2, 3), "float32") for spec in opdef.inputs if not spec.optional]
        try:
            outputs = opdef.infer_types(inputs, opdef.normalize_attrs({}))
        except LegatoError:
            continue
        if all(t.dtype == "float32" for t in outputs):
            found.append(opdef.name)
    return found


def _c_ops() -> dict[str, int]:
    """op -> arity, for every op the C library lists (variants folded)."""
    ops = {elementwise.split_variant(n)[0]: 1 for n in elementwise.UNARY_CODES}
    ops.update({elementwise.split_variant(n)[0]: 2 for n in elementwise.BINARY_CODES})
    return ops


def test_the_float_elementwise_primitives_are_found():
    found = _float_elementwise_primitives()
    assert {"add", "exp", "erf", "cast"} <= set(found)
    assert not {"less", "logical_and", "where", "broadcast_to"} & set(found)


@pytest.mark.parametrize("op", _float_elementwise_primitives())
def test_every_float_elementwise_primitive_has_a_c_kernel(op):
    if op in EXCLUDED:
        assert op not in K.KERNELS, f"{op} has a C kernel now: drop it from EXCLUDED"
        return
    if op == "cast":  # between dtypes: kernels/casts.py, tests/test_ck_integer.py
        assert op in K.KERNELS
        return
    assert op in _c_ops(), (
        f"{op}: a float elementwise primitive of the core has no C kernel; add its line to "
        f"{C_TABLES} (or to EXCLUDED in this file, with the reason)")
    assert op in K.KERNELS, f"{op}: the C library lists it but KERNELS has no kernel"


@pytest.mark.parametrize("op", sorted(_c_ops()))
def test_c_ops_are_core_ops_with_their_kind_arity_and_attributes(op):
    registry = default_registry()
    assert op in registry, f"{C_TABLES} names {op!r}, which is not a registered op"
    opdef = registry.get(op)
    assert opdef.elementwise, f"{op} is {opdef.kind}, not elementwise"
    assert len(opdef.inputs) == _c_ops()[op], f"{op} takes {len(opdef.inputs)} inputs"
    table = elementwise.UNARY_CODES if _c_ops()[op] == 1 else elementwise.BINARY_CODES
    variants = [dict(elementwise.split_variant(n)[1]) for n in table
                if elementwise.split_variant(n)[0] == op]
    for key in {k for v in variants for k in v}:
        spec = opdef.attr_specs.get(key)
        assert spec is not None, f"{op} has no attribute {key!r} (a C variant names it)"
        if spec.type.startswith("str:"):  # every choice has a variant: legal is legal
            assert sorted(v[key] for v in variants) == sorted(spec.type[4:].split("|")), op
        if spec.default is not REQUIRED and op not in PARTIAL_VARIANTS:
            assert str(spec.default) in {v[key] for v in variants}
    if op in PARTIAL_VARIANTS:
        legal = legato.get_backend("c_kernels").legal[op]
        assert dict(legal.attrs) == {k: (v,) for k, v in PARTIAL_VARIANTS[op].items()}, op


def test_kernels_and_legality_follow_the_c_lists():
    backend = legato.get_backend("c_kernels")
    for op in _c_ops():
        assert op in K.KERNELS and backend.has_kernel(op), op
        integers = elementwise.INTEGER_DTYPES if op in elementwise.INTEGER_UFUNCS else set()
        assert backend.legal[op].dtypes == {"float32"} | integers, op
    assert set(K.KERNELS) <= set(backend.legal)
    assert K.KERNELS["abs"] is K.abs_ and K.abs_.__name__ == "abs_"  # builtin names get _


def test_a_variant_is_chosen_by_its_attribute():
    x = np.linspace(-3, 3, 11, dtype=np.float32)
    exact, tanh = K.nn_gelu(x), K.nn_gelu(x, approximate="tanh")
    assert np.array_equal(exact, K.nn_gelu(x, approximate="none"))  # the registry default
    assert not np.array_equal(exact, tanh)
    with pytest.raises(LegatoError, match="nn.gelu"):
        K.nn_gelu(x, approximate="cubic")
    with pytest.raises(LegatoError, match="unknown attribute"):
        K.exp(x, approximate="none")


@pytest.mark.parametrize("op", sorted(o for o, n in _c_ops().items() if n == 1))
def test_every_unary_c_op_runs_in_place_in_a_plan(op):
    """In-place planning comes from the op's kind: a chain through any listed op needs
    one intermediate buffer, whatever the op."""
    b = legato.GraphBuilder()
    x = b.input("x", (16, 16))
    attrs = {k: legato.get_op(op).attr_specs[k].default for k in
             legato.get_op(op).attr_specs}
    attrs.update(PARTIAL_VARIANTS.get(op, {}))
    mod = b.build(b.call("exp", b.call(op, b.call("exp", x), **attrs)))
    compiled = legato.compile(mod, "c_kernels")
    stats = compiled._runner.stats()
    assert stats["steps"] == 3 and stats["arena_bytes"] == 16 * 16 * 4, stats
    data = np.random.default_rng(0).uniform(0.1, 1, (16, 16)).astype(np.float32)
    np.testing.assert_allclose(compiled(data), legato.reference(mod)(data), rtol=1e-5)
