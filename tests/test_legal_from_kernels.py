"""Capability key legal_from_kernels: the kernel table is the legal set, under one shared
condition; `legal:` entries keep their own condition; malformed values are ConfigErrors
naming the file and the key."""
from __future__ import annotations

import pytest
import yaml

import legato


def unary(data):
    return data


def binary(a, b):
    return a + b


def gelu(data, *, approximate):
    return data


def conv2d(data, weight, bias=None, *, strides, padding, dilation, groups, data_layout,
           kernel_layout):
    return data


KERNELS = {"exp": unary, "add": binary, "nn.conv2d": conv2d}


def call(op, *types, **attrs):
    b = legato.GraphBuilder()
    xs = [None if t is None else b.input(f"x{i}", *t) for i, t in enumerate(types)]
    module = b.build(b.call(op, *xs, **attrs))
    return module.main.calls[0]


def capability(**keys):
    return {"backend": "from_kernels", "executes": False, **keys}


def test_every_kernel_op_is_legal_under_the_shared_condition(backend_factory):
    backend = backend_factory(capability(legal_from_kernels={"dtypes": ["float32"],
                                                              "ranks": [2]}),
                              kernels=KERNELS)
    assert set(backend.legal) == set(KERNELS)
    assert backend.supports(call("exp", ((2, 3), "float32")))
    assert "dtype float16" in backend.why_not(call("exp", ((2, 3), "float16")))
    assert "rank 3" in backend.why_not(call("exp", ((2, 3, 4), "float32")))
    assert "does not list" in backend.why_not(call("negative", ((2, 3), "float32")))


def test_an_empty_condition_makes_every_kernel_op_legal_always(backend_factory):
    backend = backend_factory(capability(legal_from_kernels={}), kernels=KERNELS)
    assert backend.supports(call("exp", ((2, 3, 4, 5), "float16")))


def test_without_the_key_the_kernel_table_adds_nothing_to_legal(backend_factory):
    backend = backend_factory(capability(legal={"exp": {}}), kernels=KERNELS)
    assert set(backend.legal) == {"exp"}


def test_an_op_listed_under_legal_takes_its_own_condition(backend_factory):
    backend = backend_factory(capability(legal={"add": {"dtypes": ["int32"]}},
                                         legal_from_kernels={"dtypes": ["float32"]}),
                              kernels=KERNELS)
    assert backend.supports(call("add", ((2,), "int32"), ((2,), "int32")))
    assert "dtype float32" in backend.why_not(call("add", ((2,), "float32"),
                                                   ((2,), "float32")))
    assert backend.supports(call("exp", ((2,), "float32")))


def test_yaml_kernel_table_and_kernels_argument_both_count(backend_factory):
    backend = backend_factory(
        capability(kernels={"negative": "operator:neg"},
                   legal_from_kernels={"dtypes": ["float32"]}),
        kernels={"exp": unary})
    assert set(backend.legal) == {"negative", "exp"}


def test_attrs_constrain_only_the_ops_that_have_the_attribute(backend_factory):
    backend = backend_factory(capability(legal_from_kernels={
        "dtypes": ["float32"], "attrs": {"data_layout": "NCHW"}}), kernels=KERNELS)
    assert backend.supports(call("exp", ((2,), "float32")))
    shapes = (((1, 2, 5, 5), "float32"), ((3, 2, 3, 3), "float32"))
    assert backend.supports(call("nn.conv2d", *shapes, None))
    nhwc = call("nn.conv2d", ((1, 5, 5, 2), "float32"), ((3, 2, 3, 3), "float32"), None,
                data_layout="NHWC")
    assert "data_layout='NHWC'" in backend.why_not(nhwc)


def test_legalization_keeps_kernel_ops_and_decomposes_the_rest(backend_factory):
    backend_factory({"backend": "from_kernels_run", "fallback": "cpu_ref",
                     "legal_from_kernels": {"dtypes": ["float32"]}},
                    kernels={"exp": unary, "add": binary, "nn.gelu": gelu})
    b = legato.GraphBuilder()
    x = b.input("x", (4,), "float32")
    module = b.build(b.call("nn.gelu", b.call("nn.softmax", b.call("exp", x))))
    low = legato.legalize(module, backend="from_kernels_run")
    ops = [c.op for c in low.module.main.calls]
    assert ops[0] == "exp" and ops[-1] == "nn.gelu" and "nn.softmax" not in ops


@pytest.mark.parametrize("value, match", [
    (5, r"legal_from_kernels: expected a mapping of conditions"),
    ([], r"legal_from_kernels: expected a mapping of conditions"),
    ({"dtype": ["float32"]}, r"unknown key legal_from_kernels.'dtype' \(did you mean "
                             r"'dtypes'\?\)"),
    ({"dtypes": "float32"}, r"legal_from_kernels.dtypes: expected a list of dtypes"),
    ({"dtypes": ["float23"]}, r"legal_from_kernels.dtypes: unknown dtype 'float23'"),
    ({"ranks": 2}, r"legal_from_kernels.ranks: expected a list of ranks"),
    ({"attrs": [1]}, r"legal_from_kernels.attrs: expected a mapping of attribute values"),
    ({"attrs": {"data_layot": "NCHW"}}, r"legal_from_kernels.attrs: no op of the kernel "
                                        r"table has an attribute 'data_layot' \(did you "
                                        r"mean 'data_layout'\?\)"),
    ({"attrs": {"groups": "one"}}, r"legal_from_kernels.attrs.groups: nn.conv2d: "
                                   r"attribute groups='one' must be of type int"),
    ({"check": "no colon"}, r"legal_from_kernels.check: expected 'module:function'"),
])
def test_malformed_values_are_config_errors_naming_file_and_key(tmp_path, value, match):
    with pytest.raises(legato.ConfigError, match=r"<capability file dict>: " + match):
        legato.register_backend(capability(legal_from_kernels=value), kernels=KERNELS)
    path = tmp_path / "cap.yaml"
    path.write_text(yaml.safe_dump(capability(legal_from_kernels=value)))
    with pytest.raises(legato.ConfigError, match="cap.yaml: " + match):
        legato.register_backend(str(path), kernels=KERNELS)
