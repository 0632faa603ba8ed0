"""The tosa_custom backend without the TOSA tools: legalization to TOSA forms, the MLIR
printer, the tosa.custom contract and its decoder. (test_tosa_tools.py runs the official
validator and reference model on the same modules.)"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import legato
from legato.cli.commands import main as cli_main
from legato.ir.errors import LegalizationError
from legato.testing import backend_conformance
from legato_tosa_custom import decode_tosa_custom, emit_mlir
from legato_tosa_custom.kernels import simulate

from legato_tosa_custom.cases import KEEP, MODEL_KEEPS, assert_matches, assert_within_bound, \
    core_ops, keep, lowered_ops, op_module, sample_module

OP_LINE = re.compile(r'^%\d+(:\d+)? = "tosa\.\w+"\((%[\w#]+(, %[\w#]+)*)?\)( <\{.*\}>)? : '
                     r'\(.*\) -> .+$')
STRUCTURE = ('"builtin.module"() ({', '"func.func"() <{', '^bb0(', '"func.return"(',
             '}) : () -> ()')
TENSOR = re.compile(r"tensor<((?:\d+x)*)([a-z]+\d*)>")


# legato.testing's kit: every legal op on its samples, emitted, against cpu_ref
test_conformance = backend_conformance(KEEP)


def compile_tosa(model, config=None):
    return legato.compile(model, backend=KEEP, config=config)


def op_lines(text, op=None):
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines if '"tosa.' in line and (op is None or f'"tosa.{op}"' in line)]


def operand_ranks(line):
    operand_types = line.rsplit(" : (", 1)[1].split(") -> ")[0]
    return [dims.count("x") for dims, _ in TENSOR.findall(operand_types)]


@pytest.fixture(scope="module", params=sorted(MODEL_KEEPS))
def model_texts(request):
    name = request.param
    return name, compile_tosa(f"example:{name}").artifact, \
        compile_tosa(f"example:{name}", keep(*MODEL_KEEPS[name])).artifact


def test_backend_is_an_emitter_that_tunnels_custom_ops():
    backend = legato.get_backend(KEEP)
    assert KEEP in legato.list_backends()
    assert not backend.executes and backend.custom_ops and backend.domain == "legato"
    compiled = compile_tosa("example:layernorm")
    assert isinstance(compiled.artifact, str)
    with pytest.raises(legato.LegatoError, match="read .artifact"):
        compiled(np.zeros((4, 4), np.float32))


def test_output_is_the_generic_op_form(model_texts):
    for text in model_texts[1:]:
        for line in (line.strip() for line in text.splitlines()):
            assert line.startswith(STRUCTURE) or OP_LINE.match(line), line


def test_f32_models_emit_f32_only(model_texts):
    for text in model_texts[1:]:
        element_types = {t for _, t in TENSOR.findall(text)}
        assert element_types <= {"f32", "i1", "i8", "index"}, element_types
        assert {d for d, t in TENSOR.findall(text) if t == "i8"} <= {"1x"}  # mul's shift


def test_elementwise_operands_have_equal_ranks(model_texts):
    for text in model_texts[1:]:
        for op in ("add", "sub", "mul", "maximum", "minimum", "pow", "select", "greater"):
            for line in op_lines(text, op):
                ranks = operand_ranks(line)
                tensor_ranks = ranks[:2] if op == "mul" else ranks  # mul's shift is 1-D
                assert len(set(tensor_ranks)) == 1, line


def test_2d_matmul_becomes_reshapes_around_a_3d_matmul():
    low = legato.legalize("example:mlp", backend=KEEP)
    matmuls = [c for c in low.module.main.calls if c.op == "matmul"]
    assert matmuls and all(v.rank == 3 for c in matmuls for v in c.inputs)
    assert all(c.origin.rules[-1] == "lower:matmul" for c in matmuls)
    for line in op_lines(compile_tosa("example:mlp").artifact, "matmul"):
        assert operand_ranks(line) == [3, 3, 1, 1]  # a, b and their zero points


def test_nchw_convolutions_and_pools_get_transposes():
    """legalize() alone (no layout pass): the rules make the NHWC / OHWI forms."""
    low = legato.legalize("example:cnn", backend=KEEP)
    calls = low.module.main.calls
    windows = [c for c in calls if c.op in ("nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d")]
    assert len(windows) == 4
    assert all(c.attrs["data_layout"] == "NHWC" for c in windows)
    assert all(c.attrs["kernel_layout"] == "OHWI" for c in windows if c.op == "nn.conv2d")
    assert sum(c.op == "permute_dims" for c in calls) >= 8
    # the stride-2 conv's bottom/right padding row is never read: dropped for TOSA
    assert [list(c.attrs["padding"]) for c in windows if c.op == "nn.conv2d"] == \
        [[1, 1, 1, 1], [1, 1, 0, 0]]
    text = emit_mlir(low.module)
    assert 'pad = array<i64: 1, 0, 1, 0>, stride = array<i64: 2, 2>' in text


@pytest.mark.parametrize("op", lowered_ops())
def test_every_op_lowers_to_tosa_forms_that_compute_the_same(op):
    """The TOSA-form module, run with cpu_ref kernels (plus numpy TOSA-only ops), matches
    the reference; test_tosa_tools.py repeats this on the TOSA reference model."""
    module, feeds = sample_module(op)
    compiled = compile_tosa(module)
    assert_within_bound(op, simulate(compiled.module)(*feeds), legato.reference(module)(*feeds))
    assert "tosa.custom" not in compiled.artifact


RULE_CASES = {
    "strided_slice negative": ("strided_slice", {"begin": [3, -1], "end": [-6, 0],
                                                 "strides": [-2, -1], "axes": [2, 0]}),
    "strided_slice step 2": ("strided_slice", {"begin": [1], "end": [4], "strides": [2],
                                               "axes": [2]}),
    "pad reflect": ("pad", {"pads": [0, 2, 1, 0, 1, 2], "mode": "reflect"}),
    "pad edge": ("pad", {"pads": [1, 0, 0, 0, 3, 1], "mode": "edge"}),
    "pad constant": ("pad", {"pads": [0, 1, 0, 1, 0, 2], "value": -1.5}),
    "sum two axes": ("sum", {"axes": [0, 2]}),
    "max all": ("max", {}),
    "round ties": ("round", {}),
    "cast to int": ("cast", {"dtype": "int32"}),
    "cast to bool": ("cast", {"dtype": "bool"}),
}


@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_rules_keep_semantics(name):
    op, attrs = RULE_CASES[name]
    x = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5) / 2  # has .5 ties and 0
    module, feeds = op_module(op, (x,), attrs)
    assert_matches(simulate(compile_tosa(module).module)(*feeds),
                   legato.reference(module)(*feeds))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op, attrs", [
    ("nn.conv2d", {"strides": [2, 3], "padding": [1, 2, 2, 1], "dilation": [2, 1]}),
    ("nn.max_pool2d", {"pool_size": [3, 2], "strides": [2, 2], "padding": [1, 0, 1, 1]}),
    ("nn.avg_pool2d", {"pool_size": [3, 3], "strides": [2, 1], "padding": [1, 1, 1, 1]}),
    ("nn.avg_pool2d", {"pool_size": [2, 2], "ceil_mode": True}),  # generic decomposition
])
def test_windows_fit_exactly(op, attrs, layout):
    x = np.random.default_rng(0).standard_normal((1, 3, 7, 8)).astype(np.float32)
    if layout == "NHWC":
        x = x.transpose(0, 2, 3, 1)
    inputs = (x, np.random.default_rng(1).standard_normal((4, 3, 3, 2)).astype(np.float32),
              np.arange(4, dtype=np.float32)) if op == "nn.conv2d" else (x,)
    module, feeds = op_module(op, inputs, {**attrs, "data_layout": layout})
    assert_matches(simulate(compile_tosa(module).module)(*feeds),
                   legato.reference(module)(*feeds))


def test_calls_without_a_tosa_form_fail_with_reasons():
    """An integer-to-integer cast has no pro_fp form (int64 <-> int32 aside: one type)."""
    b = legato.GraphBuilder()
    module = b.build(b.cast(b.input("x", (2,), "int32"), dtype="int8"))
    with pytest.raises(LegalizationError, match="cast.*tosa_custom.*\n.*native.*int32 to int8"):
        compile_tosa(module)


# --- custom ops ---------------------------------------------------------------------------

def custom_props(line):
    return {k: v for k, v in re.findall(r'(\w+) = "((?:[^"\\]|\\.)*)"', line)}


def test_kept_op_becomes_one_tosa_custom_with_json_attributes():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 4))
    y = b.call("nn.layer_norm", x, None, b.const(np.zeros(4, np.float32)), axes=[-1],
               epsilon=1e-3)
    text = compile_tosa(b.build(y), keep("nn.layer_norm")).artifact
    (line,) = op_lines(text, "custom")
    props = custom_props(line)
    assert props["domain_name"] == "legato" and props["operator_name"] == "nn.layer_norm"
    payload = json.loads(props["implementation_attrs"].replace('\\"', '"'))
    assert payload == {"attrs": {"axes": [-1], "epsilon": 0.001}, "inputs": [True, False, True]}
    assert '"tosa.custom"(%arg0, %0)' in line  # tensors in order; the absent gamma dropped


def test_custom_op_with_several_results_and_string_attributes():
    b = legato.GraphBuilder()
    x = b.input("x", (4, 6))
    first, second = b.call("split", x, sections=[1, 3], axis=0)
    text = compile_tosa(b.build(b.call("nn.gelu", first, approximate="tanh"), second),
                        keep("split", "nn.gelu")).artifact
    split_line, gelu_line = op_lines(text, "custom")
    assert re.match(r'%\d+:2 = "tosa.custom"', split_line)
    assert split_line.endswith("-> (tensor<1x6xf32>, tensor<3x6xf32>)")
    assert '\\"approximate\\": \\"tanh\\"' in gelu_line
    assert re.search(r'"func.return"\(%\d+, %\d+#1\)', text)


def test_layer_norm_readme_example(repo):
    compiled = compile_tosa("example:layernorm", repo / "configs/tosa_keep_layer_norm.yaml")
    ops = [re.search(r'"(tosa\.\w+)"', line)[1] for line in op_lines(compiled.artifact)]
    assert ops == ["tosa.const", "tosa.const", "tosa.custom"]
    (call,) = decode_tosa_custom(compiled.artifact)
    assert call.op == "nn.layer_norm" and call.attrs["epsilon"] == 1e-5


def original_call(module):
    (call,) = [c for c in module.main.calls]
    return call


def assert_same_call(decoded, original):
    assert decoded.op == original.op
    assert decoded.attrs == original.attrs
    assert [None if v is None else v.type for v in decoded.inputs] == \
        [None if v is None else v.type for v in original.inputs]
    assert [v.type for v in decoded.outputs] == [v.type for v in original.outputs]


@pytest.mark.parametrize("op", core_ops())
def test_every_op_round_trips_through_tosa_custom(op):
    """Keep each op: if it is tunnelled, decoding the printed tosa.custom gives it back; and
    encoding it directly always does (also for ops TOSA runs natively)."""
    module, _ = sample_module(op)
    call = original_call(module)
    text = emit_mlir(legato.legalize(module, backend=KEEP, config=keep(op)).module)
    decoded = decode_tosa_custom(text)
    assert len(decoded) <= 1
    for d in decoded:
        assert_same_call(d, call)
    custom = legato.encode_custom(call, "legato", legato.context().registry)
    direct = legato.Module({"main": module.main.with_calls([custom], custom.outputs)})
    (again,) = decode_tosa_custom(emit_mlir(direct))
    assert_same_call(again, call)


def test_cli_writes_the_mlir(tmp_path, repo):
    out, config = tmp_path / "ln.mlir", repo / "configs/tosa_keep_layer_norm.yaml"
    assert cli_main(["compile", "example:layernorm", "--backend", KEEP, "--config",
                     str(config), "-o", str(out)]) == 0
    assert out.read_text() == compile_tosa("example:layernorm",
                                           config).artifact


def test_decoder_reads_escapes_and_rejects_malformed_lines():
    line = ('%0 = "tosa.custom"(%arg0) <{domain_name = "legato", implementation_attrs = '
            '"{\\22attrs\\22: {\\22dtype\\22: \\22int32\\22}, \\22inputs\\22: [true]}", '
            'operator_name = "cast"}> : (tensor<2xf32>) -> tensor<2xi32>')
    (call,) = decode_tosa_custom(line)
    assert call.op == "cast" and call.attrs["dtype"] == "int32"
    with pytest.raises(legato.LegatoError, match="cannot read"):
        decode_tosa_custom('%0 = "tosa.custom"(%arg0) garbage')


GOOD_CUSTOM = ('%0 = "tosa.custom"(%arg0) <{domain_name = "legato", implementation_attrs = '
               '"{\\22attrs\\22: {\\22dtype\\22: \\22int32\\22}, \\22inputs\\22: [true]}", '
               'operator_name = "cast"}> : (tensor<2xf32>) -> tensor<2xi32>')


@pytest.mark.parametrize("broken, message", [
    (GOOD_CUSTOM.replace("operator_name", "operatorname"), "without operator_name"),
    (GOOD_CUSTOM.replace("\\22dtype", "\\2gdtype"), "bad escape"),
    (GOOD_CUSTOM.replace("tensor<2xf32>", "tensor<?xf32>"), "not a static tensor shape"),
    (GOOD_CUSTOM.replace("\\22int32", "\\FFint32"), "not UTF-8"),
])
def test_decoder_refuses_edited_lines_with_legato_errors(broken, message):
    """Found by fuzzing (tests/fuzz/target_tosa_decode.py): these raised KeyError or
    ValueError."""
    decode_tosa_custom(GOOD_CUSTOM)
    with pytest.raises(legato.LegatoError, match=message):
        decode_tosa_custom(broken)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_elements_include_self(reduction, include_self):
    """Without include_self a position hit by updates reduces over them alone; positions no
    update hits keep their data either way."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    indices = np.array([[0, 2], [1, 1], [3, 0]], dtype=np.int64)
    updates = np.array([[2.0, -1.5], [0.5, 3.0], [-2.0, 4.0]], dtype=np.float32)
    module, feeds = op_module("scatter_elements", (data, indices, updates),
                              {"axis": 1, "reduction": reduction, "include_self": include_self})
    got = simulate(compile_tosa(module).module)(*feeds)
    want = legato.reference(module)(*feeds)
    assert_matches(got, want)
    if not include_self:  # row 1 position 1 gets 0.5 and 3.0 only
        combined = {"add": 3.5, "mul": 1.5, "max": 3.0, "min": 0.5}[reduction]
        assert np.asarray(got[0] if isinstance(got, (list, tuple)) else got)[1, 1] == combined
