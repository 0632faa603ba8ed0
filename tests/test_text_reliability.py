"""The text form under hostile input: linear time, LegatoErrors naming the line, and a
round trip of every module the library produces."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

import legato
from legato.frontends.examples import EXAMPLES
from legato.ir import Attrs, Call, Function, Module, TensorType, Value


def parse_seconds(text: str) -> float:
    start = time.perf_counter()
    legato.parse(text)
    return time.perf_counter() - start


# --- linear time -------------------------------------------------------------------------

def wide_header(params: int) -> str:
    args = ", ".join(f"%p{i}: float32[1, 2, 3]" for i in range(params))
    return f"func @main({args}) -> (float32[1, 2, 3]) {{\n  return %p0\n}}\n"


def many_results(n: int) -> str:
    outs = ", ".join(f"%{i + 1}" for i in range(n))
    types = ", ".join("float32[1, 1]" for _ in range(n))
    return (f"func @main(%x: float32[1, {n}]) -> (float32[1, 1]) {{\n"
            f"  {outs} = split(%x) {{\"sections\": {n}, \"axis\": 1}} : {types}\n"
            f"  return %1\n}}\n")


def long_constant(n: int) -> str:
    data = json.dumps([0.25] * n)
    return (f"func @main(%x: float32[{n}]) -> (float32[{n}]) {{\n"
            f"  %c = const float32[{n}] {data}\n"
            f"  %0 = add(%x, %c) : float32[{n}]\n  return %0\n}}\n")


def long_attribute(n: int) -> str:
    origin = json.dumps({"op": "x", "attrs": {"big": list(range(n))}, "source": "%0"})
    return ("func @main(%x: float32[2]) -> (float32[2]) {\n"
            f"  %0 = exp(%x) : float32[2] origin {origin}\n  return %0\n}}\n")


@pytest.mark.parametrize("make, n", [(wide_header, 100_000), (many_results, 100_000),
                                     (long_constant, 500_000), (long_attribute, 500_000)])
def test_long_lines_parse_in_linear_time(make, n):
    # ~2-4 MB on one line; a quadratic scan of such a line takes minutes. The bound is
    # over 10x what a linear parser needs on a slow, shared machine.
    small, big = make(n // 10), make(n)
    assert len(big) > 1_500_000
    parse_seconds(small)
    assert parse_seconds(big) < 30.0


@pytest.mark.parametrize("text", [
    "func @main(%x: float32[" + "1, " * 1_000_000 + "1]) -> (float32[1]) {\n return %x\n}",
    "func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = exp(%x) : " +
    "float32[2], " * 300_000 + "float32[2]\n  return %0\n}",
    "func @main(" + "%x: float32[2], " * 300_000 + ") -> (float32[2]) {\n  return %x\n}",
    "func @main(%x: float32[2]) -> (" + "float32[2" * 300_000 + ") {\n  return %x\n}",
    "func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = exp(%x) {\"a\": \"" +
    "\\\"" * 500_000 + "\"} : float32[2]\n  return %0\n}",
])
def test_malformed_long_lines_are_refused_quickly(text):
    start = time.perf_counter()
    with pytest.raises(legato.ParseError):
        legato.parse(text)
    assert time.perf_counter() - start < 30.0


# --- raw exceptions become ParseErrors naming the line ------------------------------------

def one_call(suffix: str) -> str:
    return ("func @main(%x: float32[2]) -> (float32[2]) {\n"
            f"  %0 = exp(%x) : float32[2]{suffix}\n  return %0\n}}\n")


def one_const(ttype: str, data: str) -> str:
    return ("func @main(%x: float32[2]) -> (float32[2]) {\n"
            f"  %c = const {ttype} {data}\n  return %x\n}}\n")


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text, message", [
    (one_call(" origin {}"), r"line 2.*'op' must be a string"),
    (one_call(" origin []"), r"line 2.*origin must be a JSON object"),
    (one_call(" origin 1"), r"line 2.*origin must be a JSON object"),
    (one_call(' origin {"op": "a"}'), r"line 2.*'source' must be a string"),
    (one_call(' origin {"op": 1, "source": "s"}'), r"line 2.*'op' must be a string"),
    (one_call(' origin {"op": "a", "source": "s", "attrs": []}'), "'attrs' must be"),
    (one_call(' origin {"op": "a", "source": "s", "rules": [1]}'), "'rules' must be"),
    (one_call(' origin {"op": "a", "source": "s", "attrs": {"k": {"x": 1}}}'),
     "not JSON-like"),
    (one_call(' origin {"op": "a", "source": "s", "extra": 1}'), "unknown key 'extra'"),
    (one_call(" origin " + DEEP), r"line 2: origin nests too deep"),
    (one_call(' origin {"op": "a", "source": "s", "attrs": {"k": ' + "[" * 40 + "]" * 40
              + "}}"), "nested more than"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = exp(%x) {\"a\": " + DEEP +
     "} : float32[2]\n  return %0\n}", r"line 2: attributes nests too deep"),
    ("func @main(%x: float32[2]) -> (float32[2]) attrs " + DEEP + " {\n  return %x\n}",
     r"line 1: function attributes nests too deep"),
    ("func @main(%x: float32[2]) -> (float32[2]) attrs [1] {\n  return %x\n}",
     r"line 1.*must be a JSON object"),
    (one_const("int32[1]", "[99999999999]"), r"line 2: bad constant data.*out of range"),
    (one_const("uint8[2]", "[1, -1]"), r"line 2: bad constant data.*-1 is out of range"),
    (one_const("int64[1]", "[" + "9" * 5000 + "]"), r"line 2: bad JSON"),
    (one_const("int64[1]", "[9223372036854775808]"), "out of range"),
    (one_const("bool[2]", "[true, 2]"), r"value 2 is not a bool"),
    (one_const("bool[1]", "[1]"), r"value 1 is not a bool"),
    (one_const("int32[2]", "[1, 1.5]"), r"value 1.5 is not a int32"),
    (one_const("int32[1]", "[NaN]"), r"value nan is not a int32"),
    (one_const("int8[1]", "[true]"), r"value True is not a int8"),
    (one_const("float32[1]", "[1e39]"), r"1e\+39 is out of range for float32"),
    (one_const("float16[1]", "[70000]"), r"70000 is out of range for float16"),
    (one_const("float32[1]", "[" + "1" * 400 + "]"), r"out of range for float32"),
    (one_const("float32[1]", '["a"]'), r"'a' is not a float32"),
    (one_const("float32[1]", "[[1.0]]"), r"\[1.0\] is not a float32"),
    (one_const("float32[1]", "{}"), r"expected a JSON list"),
    (one_const("float32[1]", "1.0"), r"expected a JSON list"),
    (one_const("float32[2]", "[1.0] [2.0]"), r"unexpected text after"),
    (one_const("bool[2]", 'b64"AAI="'), r"bytes other than 0 and 1"),
    (one_const("float32[1]", 'b64"AAAA'), r"must end with"),
    (one_const("float32[1]", 'b64"A"'), r"bad base64"),
    (one_const("float32[9223372036854775808]", "[]"), r"line 2.*too large"),
    (one_const("float32[99999999999999999999999]", "[]"), r"line 2.*too large"),
    (one_const("float32[4294967296, 4294967296]", "[]"), r"line 2.*too large"),
    (one_const("float32[0, 4294967296, 4294967296]", "[]"), r"line 2.*too large"),
    (one_const("float32[" + ", ".join(["1"] * 65) + "]", "[1.0]"), r"line 2.*rank"),
    ("func @main(%x: float32[" + ", ".join(["1"] * 65) + "]) -> (float32[1]) {\n"
     "  return %x\n}", r"line 1.*rank 65 is above the limit"),
    ("func @main(%x: float32[2]) -> (float32[3]) {\n  return %x\n}",
     r"declares results \['float32\[3\]'\] but returns \['float32\[2\]'\]"),
    ("func @main(%x: float32[2], %x: float32[2]) -> (float32[2]) {\n  return %x\n}",
     r"line 1.*%x is defined twice"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = exp(%x) : float32[2]\n"
     "  %0 = exp(%x) : float32[2]\n  return %0\n}", r"line 3.*%0 is defined twice"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  = call(%x) {\"callee\": \"f\"} :\n"
     "  return %x\n}", r"line 2.*expected '%'"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = nn.softmax(%x) "
     "{\"axis\": 0.0} : float32[2]\n  return %0\n}", r"line 2.*axis=0.0 must be of type int"),
    ("func @main(%x: float32[2]) -> (float32[2]) {\n  return %x\n  %0 = exp(%x) : "
     "float32[2]\n}", r"line 3.*nothing may follow 'return'"),
])
def test_bad_text_raises_parse_error_naming_the_line(text, message):
    with pytest.raises(legato.IRError, match=message) as info:
        legato.parse(text)
    assert len(str(info.value)) < 400


def test_bfloat16_constants_round_trip_or_are_refused():
    text = one_const("bfloat16[3]", "[1.5, -2.0, 3.00405527047391e+38]").replace(
        "return %x", "%0 = cast(%c) {\"dtype\": \"float32\"} : float32[3]\n  return %x")
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        with pytest.raises(legato.ParseError, match="bfloat16 constants need the ml_dtypes"):
            legato.parse(text)
        return
    mod = legato.parse(text)
    const = mod.main.calls[0].inputs[0]
    assert const.type == TensorType((3,), "bfloat16")
    assert const.data.astype(np.float32).tolist() == [1.5, -2.0, 3.00405527047391e+38]
    assert legato.structural_equal(legato.parse(str(mod)), mod)
    big = legato.GraphBuilder()
    x = big.input("x", (100,))
    data = np.linspace(-3, 3, 100).astype(ml_dtypes.bfloat16)  # printed as base64
    mod = big.build(big.call("add", x, big.call("cast", big.const(data), dtype="float32")))
    assert "b64\"" in str(mod)
    assert legato.structural_equal(legato.parse(str(mod)), mod)


# --- attribute validation does not depend on history -------------------------------------

def test_attribute_validation_does_not_depend_on_what_was_seen_before():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    for axis in (True, 1, True, 1.0, 1, 1.0):
        if type(axis) is int:
            b.call("nn.softmax", x, axis=axis)
        else:
            with pytest.raises(legato.OpError, match=f"axis={axis!r} must be of type int"):
                b.call("nn.softmax", x, axis=axis)
    b.call("sum", x, axes=[1])
    with pytest.raises(legato.OpError, match="must be of type ints"):
        b.call("sum", x, axes=[True])
    with pytest.raises(legato.OpError, match="must be of type ints"):
        b.call("sum", x, axes=[1.0])


def test_float_attributes_from_text_never_reach_inference():
    text = ("func @main(%x: float32[2, 3]) -> (float32[2, 3]) {\n"
            "  %0 = nn.softmax(%x) {\"axis\": 1} : float32[2, 3]\n  return %0\n}\n")
    assert legato.parse(text).main.calls[0].attrs["axis"] == 1
    with pytest.raises(legato.ParseError, match="axis=1.0 must be of type int"):
        legato.parse(text.replace('"axis": 1', '"axis": 1.0'))
    with pytest.raises(legato.ParseError, match="axis=True must be of type int"):
        legato.parse(text.replace('"axis": 1', '"axis": true'))
    # a float attribute given as an int is widened, so the module prints as it verifies
    eps = legato.parse(text.replace('nn.softmax(%x) {"axis": 1}',
                                    'nn.layer_norm(%x, None, None) {"epsilon": 1}'))
    assert type(eps.main.calls[0].attrs["epsilon"]) is float


def test_attrs_compare_types_as_well_as_values():
    assert Attrs({"a": 1}) != Attrs({"a": 1.0}) and Attrs({"a": 1}) != Attrs({"a": True})
    assert Attrs({"a": [1, 2], "b": 0}) == {"b": 0, "a": (1, 2)}
    assert Attrs({"a": float("nan")}) == Attrs({"a": float("nan")})
    x = Value(TensorType((2, 3), "float32"), "x")
    y = Value(TensorType((2, 3), "float32"))
    float_axis = Call("nn.softmax", (x,), Attrs({"axis": 1.0}), (y,))
    with pytest.raises(legato.IRError, match="axis=1.0 must be of type int"):
        legato.verify(Module({"main": Function((x,), (float_axis,), (y,))}))


# --- every module the library produces round-trips ----------------------------------------

def assert_round_trips(mod: Module) -> None:
    text = str(mod)
    again = legato.parse(text)
    assert legato.structural_equal(again, mod)
    assert str(again) == text


def edge_modules() -> list[Module]:
    b = legato.GraphBuilder()
    x, unused = b.input("x", (2, 3)), b.input("unused", (4,))  # noqa: F841
    s = b.call("sigmoid", x)
    b.call("exp", s)  # dead code
    first, second = b.call("split", x, sections=[1, 2], axis=1)
    several = b.build(s, first, second, x, b.const(np.arange(6, dtype=np.int64)), x)
    b = legato.GraphBuilder()
    odd = [b.input(name, (2,)) for name in ("0", "input:0", "", "c3", "x y")]
    total = b.call("add", b.call("add", odd[0], odd[1]), b.call("add", odd[2], odd[3]))
    named = b.build(b.call("add", total, b.call("add", odd[4], b.const(np.ones(2, "f4")))))
    b = legato.GraphBuilder()
    v = b.input("v", (3, 4))
    chain = b.call("nn.relu", b.call("exp", b.call("sigmoid", v)))
    views = b.build(chain, b.call("reshape", chain, shape=[12]))
    return [several, named, views]


STAGES = {
    "source": lambda m: m,
    "fuse": legato.fuse,
    "partition": lambda m: legato.partition(m, backends=["c_kernels"]),
    "partition2": lambda m: legato.partition(m, backends=["c_kernels", "cpu_ref"]),
    "layout": lambda m: legato.convert_layout(m, "NHWC"),
    "legalize": lambda m: legato.legalize(m, backend="cpu_ref").module,
    "lower1": lambda m: legato.legalize(m, max_level=1).module,
    "compile": lambda m: legato.compile(m, backend="c_kernels").module,
    "compile2": lambda m: legato.compile(m, backend=["c_kernels", "cpu_ref"]).module,
    "fuse+partition": lambda m: legato.fuse(legato.partition(m, backends=["c_kernels"])),
}
SOURCES = [f"example:{n}" for n in sorted(EXAMPLES)] + ["edge0", "edge1", "edge2"]


def source_module(name: str) -> Module:
    if name.startswith("edge"):
        return edge_modules()[int(name[4:])]
    return legato.load_model(name)


@pytest.mark.parametrize("stage", sorted(STAGES))
@pytest.mark.parametrize("source", SOURCES)
def test_every_produced_module_round_trips_through_text(source, stage):
    assert_round_trips(STAGES[stage](source_module(source)))


def test_partition_drops_dead_regions_instead_of_calls_without_results():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    s = b.call("sigmoid", x)
    b.call("exp", b.call("tanh", x))  # claimed by c_kernels, but nothing reads it
    part = legato.partition(b.build(s), backends=["c_kernels"])
    assert all(c.outputs for fn in part.functions.values() for c in fn.calls)
    assert all(fn.results for fn in part.functions.values())
    assert sorted(c.op for fn in part.functions.values() for c in fn.calls) == \
        sorted([legato.CALL_OP, "sigmoid"])
    assert_round_trips(part)


def test_verifier_refuses_calls_without_results():
    x = Value(TensorType((2,), "float32"), "x")
    empty = Call("exp", (x,), Attrs(), ())
    with pytest.raises(legato.IRError, match="needs at least one result"):
        legato.verify(Module({"main": Function((x,), (empty,), (x,))}))


def test_calls_between_functions_may_not_form_a_cycle():
    text = ("func @main(%x: float32[2]) -> (float32[2]) {\n"
            "  %0 = call(%x) {\"callee\": \"f\"} : float32[2]\n  return %0\n}\n\n"
            "func @f(%x: float32[2]) -> (float32[2]) {\n"
            "  %0 = call(%x) {\"callee\": \"%s\"} : float32[2]\n  return %0\n}\n")
    assert legato.parse(text.replace("%s", "g").replace(
        "func @f", "func @g(%x: float32[2]) -> (float32[2]) {\n  return %x\n}\n\nfunc @f"))
    for callee in ("f", "main"):
        with pytest.raises(legato.IRError, match="may not form a cycle"):
            legato.parse(text.replace("%s", callee))


def test_messages_quote_bounded_amounts_of_text():
    name = "x" * 100_000
    texts = [
        "func @main(%x: float32[2]) -> (float32[2]) {\n  return %" + name + "\n}",
        "func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = " + name + "(%x) : "
        "float32[2]\n  return %0\n}",
        "func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = exp(%x) {\"" + name +
        "\": 1} : float32[2]\n  return %0\n}",
        "func @main(%x: float32[2]) -> (float32[2]) {\n  %0 = reshape(%x) {\"shape\": [" +
        "1, " * 50_000 + "2]} : float32[2]\n  return %0\n}",
        "func @" + name + "(%x: float32[2]) -> (float32[2]) {\n  return %x\n}",
    ]
    for text in texts:
        with pytest.raises(legato.IRError) as info:
            legato.parse(text)
        assert len(str(info.value)) < 600


def test_plugin_ops_parse_and_build_in_a_fresh_process():
    # nothing but parse and the builder: they must load the plugins that register ops
    code = ("import legato\n"
            "text = 'func @main(%x: float32[2]) -> (float32[2]) {\\n"
            "  %0 = tosa.reciprocal(%x) : float32[2]\\n  return %0\\n}'\n"
            "assert legato.parse(text).main.calls[0].op == 'tosa.reciprocal'\n"
            "b = legato.GraphBuilder()\n"
            "b.call('tosa.reciprocal', b.input('x', (2,)))\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_many_builder_inputs_take_linear_time():
    def build(n):
        b = legato.GraphBuilder()
        start = time.perf_counter()
        for i in range(n):
            b.input(f"x{i}", (2,))
        return time.perf_counter() - start
    build(1000)
    assert build(50_000) < 10.0  # quadratic: minutes
    b = legato.GraphBuilder()
    b.input("x", (2,))
    with pytest.raises(legato.IRError, match="'x' is already defined"):
        b.input("x", (3,))


@pytest.mark.parametrize("array, dtype", [([1, 2], "float99"), ([300], "uint8"),
                                          ([[1], [2, 3]], "float32"), (["a"], "int32")])
def test_bad_constants_from_python_raise_ir_error(array, dtype):
    with pytest.raises(legato.IRError, match="cannot make a constant"):
        legato.Const.of(array, dtype=dtype)
