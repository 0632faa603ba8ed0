"""Symbolic dimensions (legato.ir.symbols): canonical forms, evaluation, the text form, and
tensor types that hold them."""
from __future__ import annotations

import random

import pytest

import legato
from legato.ir import TensorType
from legato.ir.errors import ParseError, ShapeError
from legato.ir.symbols import Expr, evaluate, parse_dim, symbol
from legato.ir.text import parse_type

s, b = symbol("seq"), symbol("batch")


def test_equal_expressions_have_one_form():
    assert s + s == 2 * s and hash(s + s) == hash(2 * s)
    assert (s + 1) * (s - 1) == s * s - 1
    assert b * s * 768 == 768 * (s * b)
    assert s - s == 0 and type(s - s) is int
    assert (2 * s + 1) // 2 == s and (4 * s + 6) // 2 == 2 * s + 3
    assert (2 * s) % 2 == 0 and (2 * s + 3) % 2 == 1
    assert str((s + 1) // 2) == "(seq+1)//2" and str(s % 3) == "seq%3"
    assert (b * s * 768).exact_div(5) is None and (b * s * 768).exact_div(12 * 64) == b * s
    assert (b * s * 768).exact_div(768) == b * s
    assert (b * s * 768).exact_div(b * s) == 768
    assert (b * s + s).exact_div(s) == b + 1
    assert (b * s + 1).exact_div(s) is None


def _random_pair(rng, depth):
    """(expression, the same over ints) for bindings seq=7, batch=3."""
    if depth == 0 or rng.random() < 0.3:
        choice = rng.randrange(3)
        return [(s, 7), (b, 3), (rng.randrange(-5, 9),) * 2][choice]
    (x, xv), (y, yv) = _random_pair(rng, depth - 1), _random_pair(rng, depth - 1)
    op = rng.choice(["+", "-", "*", "//", "%"])
    if op in ("//", "%"):
        den = rng.randrange(1, 6)
        return (x // den, xv // den) if op == "//" else (x % den, xv % den)
    return {"+": (x + y, xv + yv), "-": (x - y, xv - yv), "*": (x * y, xv * yv)}[op]


def test_arithmetic_agrees_with_integers_and_round_trips_as_text():
    rng = random.Random(0)
    for _ in range(2000):
        expr, value = _random_pair(rng, 4)
        assert evaluate(expr, {"seq": 7, "batch": 3}) == value, expr
        assert parse_dim(str(expr)) == expr, str(expr)


def test_what_depends_on_the_values_is_not_guessed():
    with pytest.raises(ShapeError, match="seq-4 is not known"):
        _ = s - 4 > 0
    with pytest.raises(ShapeError, match="not known"):
        int(s)
    with pytest.raises(ShapeError, match="symbol batch is not bound"):
        (b * s).evaluate({"seq": 2})
    with pytest.raises(ShapeError, match="by positive integers only"):
        _ = s // b
    with pytest.raises(ShapeError, match="not an identifier"):
        symbol("2x")
    for bad in ("seq+", "(seq", "seq $ 2", ""):
        with pytest.raises(ShapeError):
            parse_dim(bad)


def test_tensor_types_hold_symbols_and_print_and_parse_them():
    t = TensorType((b, 2 * s + 1, 768), "float32")
    assert t.symbolic and not TensorType((2, 3), "float32").symbolic
    assert t.size == 768 * b * (2 * s + 1)
    assert str(t) == "float32[batch, 2*seq+1, 768]" and parse_type(str(t)) == t
    with pytest.raises(Exception, match="negative dimension"):
        TensorType((s, -1), "float32")
    with pytest.raises(ParseError, match="bad dimension"):
        parse_type("float32[seq+, 4]")


def test_a_module_with_symbolic_dims_prints_and_parses_back():
    text = ("func @main(%x: float32[batch, seq]) -> (float32[batch, seq]) {\n"
            "  %1 = add(%x, %x) : float32[batch, seq]\n  return %1\n}\n")
    mod = legato.parse(text)
    assert mod.main.params[0].type.shape == (b, s)
    assert legato.parse(str(mod)).main.results[0].type == mod.main.results[0].type
    assert isinstance(mod.main.results[0].type.shape[1], Expr)


def test_assumptions_are_checked_recorded_or_refused():
    from legato.ir.symbols import assume_le, check_guard, collecting_guards
    assume_le(s, s + 1, "trivially")  # decidable: no guard
    with pytest.raises(ShapeError, match="needs 5 <= 4"):
        assume_le(5, 4, "a constant slice")
    with pytest.raises(ShapeError, match="needs seq <= 64, which is not known"):
        assume_le(s, 64, "a slice")
    with collecting_guards() as guards:
        assume_le(s, 64, "a slice")
        assume_le(s, 64, "the same slice again")
    assert guards == ["seq<=64"]
    assert check_guard("seq<=64", {"seq": 64}) and not check_guard("seq<=64", {"seq": 65})


def test_a_function_whose_shapes_assume_an_undeclared_guard_is_refused():
    text = ("func @main(%x: int64[1, 64], %y: float32[seq]) -> (int64[1, seq]) {\n"
            '  %1 = strided_slice(%x) {"axes": [1], "begin": [0], "end": [{"$dim": "seq"}]}'
            " : int64[1, seq]\n  return %1\n}\n")
    with pytest.raises(legato.IRError, match="needs seq <= 64, which is not known"):
        legato.parse(text)
    mod = legato.parse(text.replace(") {", ') attrs {"guards": ["seq<=64"]} {', 1))
    assert list(mod.main.attrs["guards"]) == ["seq<=64"]
    assert legato.parse(str(mod)).main.attrs["guards"] == mod.main.attrs["guards"]


def test_malformed_dims_are_shape_errors():
    for bad in ("2%seq", "4//0", "seq%0", "3//seq", "(" * 40 + "seq" + ")" * 40):
        with pytest.raises(ShapeError):
            parse_dim(bad)
    with pytest.raises(ShapeError, match="positive integers only"):
        _ = 3 // s
