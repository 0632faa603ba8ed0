"""Symbolic dimensions: a dim is an int or an expression of named symbols.

A model exported with dynamic axes names them (ONNX `dim_param` "batch", torch.export's
`Dim("seq")`), and inferred shapes hold expressions of those names: `seq`, `2*seq`,
`seq+1`, `seq//2`, `batch*seq` after a reshape. The algebra here is small and closed on
purpose: integer polynomials over symbols, with floor division and remainder by positive
integers as opaque atoms. That is every expression shape inference produces (windows,
slices, reshapes, concatenations), each has one canonical form, so two equal shapes
compare equal and hash alike, and building one costs microseconds. A general computer
algebra system (sympy, as torch uses) would bring a second of import time and
simplification whose cost and result are hard to predict, for shapes that never need it.

Anything whose answer depends on the symbols' values (is `s - 4` positive?) is not guessed:
comparisons and `int()` of an expression raise ShapeError naming it.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import ClassVar, Iterator, Mapping, Union

from .errors import ShapeError

Dim = Union[int, "Expr"]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
MAX_NAME = 200
MAX_NESTING = 32


@dataclass(frozen=True, slots=True)
class Floor:
    """`num // den`, kept whole when `den` does not divide `num`."""
    num: "Expr"
    den: int
    OP: ClassVar[str] = "//"

    def __str__(self):
        return f"{_operand(self.num)}{self.OP}{self.den}"


class Mod(Floor):
    """`num % den`, kept whole when it does not reduce to a constant."""
    __slots__ = ()
    OP: ClassVar[str] = "%"


def _operand(num: "Expr") -> str:
    """`num` as the left operand of // or %: bare only when it is one symbol."""
    return str(num) if lone_symbol(num) is not None else f"({num})"


def _atom_key(atom) -> tuple:
    return (0, atom) if isinstance(atom, str) else (1, str(atom))


class Expr:
    """An integer polynomial: `terms` are (monomial, coefficient) with monomials sorted
    tuples of atoms (symbol names, Floor, Mod; repeated for powers), plus `const`.
    Arithmetic returns an int whenever no symbol is left."""

    __slots__ = ("terms", "const", "_hash")

    def __init__(self, terms: tuple, const: int = 0):
        self.terms, self.const = terms, const
        self._hash = hash((terms, const))

    # --- construction and canonical form ---------------------------------------------------

    @staticmethod
    def _make(table: dict, const: int) -> Dim:
        terms = tuple(sorted(((m, c) for m, c in table.items() if c),
                             key=lambda mc: [_atom_key(a) for a in mc[0]]))
        return Expr(terms, const) if terms else const

    def _table(self) -> dict:
        return dict(self.terms)

    # --- arithmetic ------------------------------------------------------------------------

    def __add__(self, other) -> Dim:
        other = as_expr(other)
        table = self._table()
        for mono, coeff in other.terms:
            table[mono] = table.get(mono, 0) + coeff
        return Expr._make(table, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Expr._make({m: -c for m, c in self.terms}, -self.const)

    def __sub__(self, other) -> Dim:
        return self + (-as_expr(other) if isinstance(other, Expr) else -_int(other))

    def __rsub__(self, other) -> Dim:
        return -self + other

    def __mul__(self, other) -> Dim:
        other = as_expr(other)
        table: dict = {}
        left = self.terms + (((), self.const),)
        right = other.terms + (((), other.const),)
        const = 0
        for m1, c1 in left:
            for m2, c2 in right:
                mono = tuple(sorted(m1 + m2, key=_atom_key))
                if mono:
                    table[mono] = table.get(mono, 0) + c1 * c2
                else:
                    const += c1 * c2
        return Expr._make(table, const)

    __rmul__ = __mul__

    def __floordiv__(self, other) -> Dim:
        den = _positive(other, "//")
        if den == 1:
            return self
        if all(c % den == 0 for _, c in self.terms):  # (den*k + c) // den == k + c // den
            return Expr._make({m: c // den for m, c in self.terms}, self.const // den)
        return Expr._make({((Floor(self, den),)): 1}, 0)

    def __mod__(self, other) -> Dim:
        den = _positive(other, "%")
        if den == 1:
            return 0
        if all(c % den == 0 for _, c in self.terms):
            return self.const % den
        return Expr._make({((Mod(self, den),)): 1}, 0)

    def __rfloordiv__(self, other):
        _positive(self, "//")

    __rmod__ = __rfloordiv__

    def exact_div(self, other) -> Dim | None:
        """`self / other` when `other` (an int or a single term) divides every term, else
        None: what a reshape's -1 needs (`(s*768) / (12*64)` is `s`)."""
        if isinstance(other, int):
            if other > 0 and all(c % other == 0 for _, c in self.terms) and \
                    self.const % other == 0:
                return Expr._make({m: c // other for m, c in self.terms}, self.const // other)
            return None
        other = as_expr(other)
        if other.const or len(other.terms) != 1:
            return self._term_quotient(other)
        (mono, coeff), = other.terms
        table = {}
        if self.const:
            return None
        for m, c in self.terms:
            rest = list(m)
            for atom in mono:
                if atom not in rest:
                    return None
                rest.remove(atom)
            if c % coeff:
                return None
            table[tuple(rest)] = c // coeff
        const = table.pop((), 0)
        return Expr._make(table, const)

    def _term_quotient(self, other: "Expr") -> Dim | None:
        """The polynomial q with `q * other == self` (`(2*s-4) / (s-2)` is 2, `(b*s-b) / (s-1)`
        is b, `(7*s+7)*(b+1) / (7*s+7)` is b+1), else None: long division by other's
        greatest term (by degree, then atoms), checked by multiplying back."""
        def order(mono):
            return len(mono), [_atom_key(a) for a in mono]

        divisor = {**dict(other.terms), (): other.const}
        divisor = {m: c for m, c in divisor.items() if c}
        lead = max(divisor, key=order)
        rest, quotient = {**dict(self.terms), (): self.const}, {}
        for _ in range(MAX_NESTING):
            rest = {m: c for m, c in rest.items() if c}
            if not rest:
                break
            top = max(rest, key=order)
            left = list(top)
            if rest[top] % divisor[lead] or any(left.count(a) < lead.count(a) for a in lead):
                return None
            for atom in lead:
                left.remove(atom)
            step, coeff = tuple(left), rest[top] // divisor[lead]
            quotient[step] = quotient.get(step, 0) + coeff
            for mono, c in divisor.items():
                product = tuple(sorted(step + mono, key=_atom_key))
                rest[product] = rest.get(product, 0) - coeff * c
        const = quotient.pop((), 0)
        result = Expr._make(quotient, const)
        return result if result * other == self else None

    # --- values ----------------------------------------------------------------------------

    def symbols(self) -> frozenset[str]:
        names: set[str] = set()
        for mono, _ in self.terms:
            for atom in mono:
                names |= {atom} if isinstance(atom, str) else atom.num.symbols()
        return frozenset(names)

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The value with every symbol bound; ShapeError naming a symbol left unbound."""
        total = self.const
        for mono, coeff in self.terms:
            product = coeff
            for atom in mono:
                product *= _atom_value(atom, bindings)
            total += product
        return total

    # --- comparison and display ------------------------------------------------------------

    def __eq__(self, other) -> bool:
        if isinstance(other, Expr):
            return self._hash == other._hash and self.terms == other.terms and \
                self.const == other.const
        return False  # an int is never a polynomial with a symbol left

    def __hash__(self):
        return self._hash

    def _unknown(self, *_):
        raise ShapeError(f"the value of symbolic dimension {self} is not known here")

    __lt__ = __le__ = __gt__ = __ge__ = __index__ = __int__ = __bool__ = _unknown

    def __str__(self) -> str:
        parts = []
        for mono, coeff in self.terms:
            alone = len(mono) == 1 and coeff == 1  # else a // or % atom needs parentheses
            body = "*".join(a if isinstance(a, str) else str(a) if alone else f"({a})"
                            for a in mono)
            text = body if abs(coeff) == 1 else f"{abs(coeff)}*{body}"
            parts.append(("-" if coeff < 0 else "+", text))
        if self.const:
            parts.append(("-" if self.const < 0 else "+", str(abs(self.const))))
        sign, first = parts[0]
        return ("-" if sign == "-" else "") + first + "".join(s + t for s, t in parts[1:])

    def __repr__(self) -> str:
        return f"Expr({self})"


def _atom_value(atom, bindings) -> int:
    if isinstance(atom, str):
        if atom not in bindings:
            raise ShapeError(f"symbol {atom} is not bound")
        return int(bindings[atom])
    num = atom.num.evaluate(bindings)
    return num % atom.den if isinstance(atom, Mod) else num // atom.den


def _int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShapeError(f"a dimension is an int or a symbolic expression, not {value!r}")
    return value


def _positive(value, op: str) -> int:
    if isinstance(value, Expr) or _int(value) <= 0:
        raise ShapeError(f"symbolic dimensions divide ({op}) by positive integers only, "
                         f"not by {value}")
    return value


def as_expr(value) -> Expr:
    """`value` (an int or an Expr) as an Expr."""
    return value if isinstance(value, Expr) else Expr((), _int(value))


def symbol(name: str) -> Expr:
    """The dimension named `name` (an identifier: letters, digits, '_' and '.')."""
    if not isinstance(name, str) or len(name) > MAX_NAME or not _NAME.match(name):
        raise ShapeError(f"symbol name {name!r} is not an identifier (letters, digits, '_', "
                         f"'.', at most {MAX_NAME} characters)")
    return Expr((((name,), 1),), 0)


def lone_symbol(dim) -> str | None:
    """The symbol's name when `dim` is one symbol alone (`seq`, not `2*seq` or `seq+1`)."""
    if isinstance(dim, Expr) and not dim.const and len(dim.terms) == 1:
        (mono, coeff), = dim.terms
        if coeff == 1 and len(mono) == 1 and isinstance(mono[0], str):
            return mono[0]
    return None


def symbolic_dims(values) -> list[str]:
    """The symbolic dims of `values`' shapes, as text, sorted: what a user must bind."""
    return sorted({str(d) for v in values for d in v.shape if isinstance(d, Expr)})


def is_symbolic(dim) -> bool:
    return isinstance(dim, Expr)


def evaluate(dim: Dim, bindings: Mapping[str, int]) -> int:
    return dim.evaluate(bindings) if isinstance(dim, Expr) else dim


# --- guards: what shape inference relied on about the symbols' values -------------------------

_GUARDS: ContextVar[list | None] = ContextVar("legato_symbol_guards", default=None)
GUARDS = "guards"  # the main function's attribute that keeps them with the model


@contextmanager
def collecting_guards() -> Iterator[list[str]]:
    """Inside, `assume_le` records its conditions in the yielded list (as text, `seq<=512`)
    instead of refusing: an importer keeps them with the model, and each binding of the
    symbols is checked against them before it runs."""
    token = _GUARDS.set([])
    try:
        yield _GUARDS.get()
    finally:
        _GUARDS.reset(token)


def assume_le(small: Dim, large: Dim, why: str) -> None:
    """`small <= large`, which `why` relies on: checked now when it is decidable, else
    recorded as a guard (ShapeError where nothing collects guards)."""
    difference = large - small
    if isinstance(difference, int) or never_negative(difference):
        if isinstance(difference, int) and difference < 0:
            raise ShapeError(f"{why} needs {small} <= {large}")
        return
    guards = _GUARDS.get()
    if guards is None:
        raise ShapeError(f"{why} needs {small} <= {large}, which is not known here")
    text = f"{small}<={large}"
    if text not in guards:
        guards.append(text)


def never_negative(value) -> bool:
    """An expression that no binding makes negative: non-negative coefficients and
    constant (a size, or a sum and product of sizes)."""
    return isinstance(value, Expr) and value.const >= 0 and all(c > 0 for _, c in value.terms)


def check_guard(text: str, bindings: Mapping[str, int]) -> bool:
    small, large = text.split("<=")
    return evaluate(parse_dim(small), bindings) <= evaluate(parse_dim(large), bindings)


# --- the text form: ints, names, + - * // % and parentheses -----------------------------------

_TOKEN = re.compile(r"\s*(?:(\d{1,19})|([A-Za-z_][A-Za-z0-9_.]*)|(//|[-+*%()]))")


def parse_dim(text: str) -> Dim:
    """A dimension as printed: `4`, `seq`, `2*seq+1`, `(s+1)//2`."""
    tokens, pos = [], 0
    text = text.strip()
    if text.count("(") > MAX_NESTING:  # the parser recurses per parenthesis
        raise ShapeError(f"dimension {text[:40]!r}... nests more than {MAX_NESTING} parentheses")
    while pos < len(text):
        found = _TOKEN.match(text, pos)
        if found is None:
            raise ShapeError(f"bad dimension {text!r} at {text[pos:pos + 10]!r}")
        tokens.append(found.group(1) or found.group(2) or found.group(3))
        pos = found.end()
    if not tokens:
        raise ShapeError("empty dimension")
    value, rest = _sum(tokens)
    if rest:
        raise ShapeError(f"bad dimension {text!r}: unexpected {rest[0]!r}")
    return value


def _sum(tokens):
    value, tokens = _product(tokens)
    while tokens and tokens[0] in "+-":
        op, (right, tokens) = tokens[0], _product(tokens[1:])
        value = value + right if op == "+" else value - right
    return value, tokens


def _product(tokens):
    value, tokens = _factor(tokens)
    while tokens and tokens[0] in ("*", "//", "%"):
        op, (right, tokens) = tokens[0], _factor(tokens[1:])
        if op != "*":
            right = _positive(right, op)  # (an int // or % an expression, or by 0: refused)
        value = value * right if op == "*" else value // right if op == "//" else value % right
    return value, tokens


def _factor(tokens):
    if not tokens:
        raise ShapeError("a dimension expression ends early")
    head, rest = tokens[0], tokens[1:]
    if head == "-":
        value, rest = _factor(rest)
        return -value, rest
    if head == "(":
        value, rest = _sum(rest)
        if not rest or rest[0] != ")":
            raise ShapeError("a '(' in a dimension is not closed")
        return value, rest[1:]
    if head.isdigit():
        return int(head), rest
    if head[0].isalpha() or head[0] == "_":
        return symbol(head), rest
    raise ShapeError(f"unexpected {head!r} in a dimension")
