"""Fuzz target: mutated text form for `legato.parse`.

Each case takes a printed module (a built-in example, the same after fusion, partitioning
or legalization, or a small random program) and damages it from the seed: character
edits, token swaps, deletions and duplications, numbers replaced by huge, negative,
fractional or NaN values, JSON nested deep, lines made very long, dtypes swapped, names
duplicated, lines moved. `legato.parse` must then return a Module or raise a LegatoError;
a Module must print and parse back to a structurally equal module with the same text.
"""
from __future__ import annotations

import json
import re

import numpy as np

import legato
from tests.fuzz import InvalidOutput

QUICK_CASES = 300
CASE_TIMEOUT = 20.0

DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
          "uint8", "bool", "float8", "int4", "")
NUMBERS = ("0", "-1", "1", "2", "63", "64", "65", "-0", "1.0", "0.5", "-2.5", "1e39",
           "1e-400", "NaN", "Infinity", "-Infinity", "true", "false", "null", "255", "256",
           "-129", "2147483648", "9223372036854775807", "9223372036854775808",
           "18446744073709551616", "99999999999", "1" * 30, "1" * 5000, "4294967296")
TOKEN = re.compile(r'%"[^"\n]*"|b64"[^"\n]*"|"(?:[^"\\\n]|\\.)*"|[%@]?[\w.]+|\s+|.')
NUMBER = re.compile(r"(?<![\w.%])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_corpus: list[str] = []
PASSES = (legato.fuse, lambda m: legato.partition(m, backends=["c_kernels"]),
          lambda m: legato.legalize(m, backend="cpu_ref").module,
          lambda m: legato.compile(m, backend="tosa_custom").module)


def corpus() -> list[str]:
    """Printed modules to mutate, built once per process."""
    if not _corpus:
        from legato.frontends.examples import EXAMPLES
        for name in sorted(EXAMPLES):
            mod = legato.load_model(f"example:{name}")
            _corpus.append(str(mod))
            for make in PASSES:
                try:
                    _corpus.append(str(make(mod)))
                except legato.LegatoError:
                    pass
        _corpus.append(_handmade())
    return _corpus


def _handmade() -> str:
    """Constants of every dtype, several results, an origin, external and primitive
    functions: the text features the examples lack."""
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    b.input("input:0", (4,))  # printed quoted
    first, second = b.call("split", x, sections=[1, 2], axis=1)
    ints = b.call("cast", b.const(np.array([[1, -2, 3]], np.int8)), dtype="float32")
    flags = b.call("cast", b.const(np.array([True, False, True])), dtype="float32")
    big = b.const(np.arange(100, dtype=np.float16).reshape(4, 25))
    mod = b.build(b.call("add", x, b.call("add", ints, flags)), first, second,
                  b.call("sum", big, axes=[1]), x)
    low = legato.legalize(mod, backend="cpu_ref").module
    return str(legato.fuse(legato.partition(low, backends=["c_kernels"])))


def random_program(seed: int) -> str | None:
    from tests.fuzz.target_programs import build, results_of
    ctx = build(seed)
    if ctx is None:
        return None
    module = ctx.b.build(*results_of(ctx))
    if ctx.chance(0.5):  # what passes make of it: origins, external and primitive functions
        try:
            module = ctx.choice(PASSES)(module)
        except legato.LegatoError:
            pass
    return str(module)


# --- mutations ----------------------------------------------------------------------------

def char_edit(rng, text):
    # at a place in a random line: base64 weights would take most uniform positions
    lines = text.split("\n")
    row = int(rng.integers(len(lines)))
    before = sum(len(line) + 1 for line in lines[:row])
    for _ in range(int(rng.integers(1, 6))):
        at = before + int(rng.integers(len(lines[row]) + 1))
        what = rng.integers(3)
        char = chr(int(rng.choice([rng.integers(32, 127), rng.integers(0, 0x3000)])))
        if what == 0:
            text = text[:at] + char + text[at:]
        elif what == 1:
            text = text[:at] + text[at + 1:]
        else:
            text = text[:at] + char + text[at + 1:]
    return text


def token_edit(rng, text):
    if len(text) > 300_000:  # an unclosed quote makes TOKEN scan to the end from each quote
        return char_edit(rng, text)
    tokens = TOKEN.findall(text)
    for _ in range(int(rng.integers(1, 4))):
        if not tokens:
            break
        i, j = (int(k) for k in rng.integers(len(tokens), size=2))
        what = rng.integers(4)
        if what == 0:
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif what == 1:
            del tokens[i]
        elif what == 2:
            tokens.insert(i, tokens[j])
        else:
            tokens[i] = ""
            tokens.insert(j, "")
    return "".join(tokens)


def number_edit(rng, text):
    found = list(NUMBER.finditer(text))
    if not found:
        return char_edit(rng, text)
    for _ in range(int(rng.integers(1, 4))):
        if not found:
            break
        match = found[int(rng.integers(len(found)))]
        new = str(rng.choice(NUMBERS))
        text = text[:match.start()] + new + text[match.end():]
        found = list(NUMBER.finditer(text))
    return text


def deep_json(rng, text):
    depth = int(rng.choice([20, 33, 200, 3000, 100_000]))
    opener, closer = ('[', ']') if rng.random() < 0.5 else ('{"a": ', '}')
    nested = opener * depth + "1" + closer * depth
    spots = [m.end() for m in re.finditer(r'": |origin |attrs |const \w+\[[\d, ]*\] ', text)]
    if not spots:
        return text
    at = spots[int(rng.integers(len(spots)))]
    end = at + _json_extent(text, at)
    return text[:at] + nested + text[end:]


def _json_extent(text, at) -> int:
    try:
        return json.JSONDecoder().raw_decode(text, at)[1] - at
    except (ValueError, RecursionError):
        return 0


def long_line(rng, text):
    lines = text.split("\n")
    i = int(rng.integers(len(lines)))
    line = lines[i]
    if not line:
        return text
    start = int(rng.integers(len(line)))
    piece = line[start:start + int(rng.integers(1, 40))]
    repeat = int(rng.choice([1000, 20_000, 200_000])) // max(1, len(piece))
    lines[i] = line[:start] + piece * repeat + line[start:]
    return "\n".join(lines)


def dtype_swap(rng, text):
    found = list(re.finditer(r"\b(?:b?float\d+|u?int\d+|bool)\b", text))
    for _ in range(int(rng.integers(1, 4))):
        if not found:
            break
        match = found[int(rng.integers(len(found)))]
        text = text[:match.start()] + str(rng.choice(DTYPES)) + text[match.end():]
        found = list(re.finditer(r"\b(?:b?float\d+|u?int\d+|bool)\b", text))
    return text


def duplicate_name(rng, text):
    names = sorted(set(re.findall(r"%[\w.]+|@[\w.]+", text)))
    if len(names) < 2:
        return text
    a, b = (names[int(k)] for k in rng.integers(len(names), size=2))
    if a[0] != b[0]:
        return text
    places = [m.start() for m in re.finditer(re.escape(a) + r"(?![\w.])", text)]
    if not places:
        return text
    at = places[int(rng.integers(len(places)))]
    return text[:at] + b + text[at + len(a):]


def line_edit(rng, text):
    lines = text.split("\n")
    if not lines:
        return text
    i, j = (int(k) for k in rng.integers(len(lines), size=2))
    what = rng.integers(3)
    if what == 0:
        del lines[i]
    elif what == 1:
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def json_value_edit(rng, text):
    """Replace one JSON value (attributes, origin, constant data) by another kind."""
    spots = [m.end() for m in re.finditer(r'": |origin |attrs ', text)]
    if not spots:
        return text
    at = spots[int(rng.integers(len(spots)))]
    new = str(rng.choice(['{}', '[]', '1', '"s"', 'null', '[1.5]', '[[1]]', '{"op": 1}',
                          '{"op": "x", "source": "y", "attrs": {"a": {}}}', '[true, 2]',
                          '-1', '1e999', '"' + "x" * 1000 + '"', '["float32"]']))
    return text[:at] + new + text[at + _json_extent(text, at):]


ODD_VALUES = (0, -1, 1, 2, -2, 7, 64, -65, 2 ** 31, -2 ** 63, 2 ** 64, 10 ** 30, 0.5, -1e300,
              float("nan"), float("inf"), True, False, None, "", "x", [], [0], [-1], [1, 1],
              [0, 0, 0, 0], [-1, -1, -1, -1], [2 ** 62, 2 ** 62], [10 ** 20], [[1]], [0.5],
              [1, 2, 3, 4, 5, 6, 7, 8, 9], [True], ["a"], [None])


def attr_edit(rng, text):
    """One attribute of one call set to an odd value: shape inference meets it."""
    lines = text.split("\n")
    # short lines only: the lazy pattern would take quadratic time on a long one
    spots = [(row, m) for row, line in enumerate(lines) if len(line) < 5000
             for m in re.finditer(r"\) (\{.*?\}) :", line)]
    if not spots:
        return text
    row, match = spots[int(rng.integers(len(spots)))]
    try:
        attrs = json.loads(match.group(1))
    except (ValueError, RecursionError):  # an earlier mutation broke or deepened it
        return text
    if not isinstance(attrs, dict) or not attrs:
        return text
    key = sorted(attrs)[int(rng.integers(len(attrs)))]
    attrs[key] = ODD_VALUES[int(rng.integers(len(ODD_VALUES)))]
    if rng.random() < 0.2:
        attrs["unknown"] = 1
    line = lines[row]
    lines[row] = line[:match.start(1)] + json.dumps(attrs) + line[match.end(1):]
    return "\n".join(lines)


def benign_edit(rng, text):
    """Changes that keep the text valid: spacing, blank and comment lines, a JSON value
    rewritten in another spelling. Such cases must parse and round-trip."""
    lines = text.split("\n")
    for _ in range(int(rng.integers(1, 6))):
        row = int(rng.integers(len(lines)))
        what = rng.integers(4)
        if what == 0:
            lines.insert(row, str(rng.choice(["", "# a comment", "   ", "\t# x"])))
        elif what == 1:
            lines[row] = str(rng.choice([" ", "\t", "  "])) + lines[row] + " "
        elif what == 2:
            lines[row] = re.sub(r"([,(:=])", r"\1 ", lines[row], count=int(rng.integers(1, 9)))
        else:
            lines[row] = re.sub(r'(": )(-?\d+)\.0\b', r"\1\2.000", lines[row])
    return "\n".join(lines)


MUTATIONS = (char_edit, token_edit, number_edit, number_edit, deep_json, long_line,
             dtype_swap, duplicate_name, line_edit, json_value_edit, attr_edit, attr_edit)


# --- the case -----------------------------------------------------------------------------

def source_text(rng, seed: int) -> str | None:
    if seed % 3 == 2:
        return random_program(seed)
    texts = corpus()
    return texts[int(rng.integers(len(texts)))]


def mutate(rng, text: str) -> str:
    if rng.random() < 0.25:
        return benign_edit(rng, text)
    # mostly one mutation, so that a good share of cases still parse and round-trip
    for _ in range(1 if rng.random() < 0.6 else int(rng.integers(2, 5))):
        text = MUTATIONS[int(rng.integers(len(MUTATIONS)))](rng, text)
    return text


def run(seed: int) -> str:
    rng = np.random.default_rng(seed)
    text = source_text(rng, seed)
    if text is None:
        return "skipped"
    text = mutate(rng, text)
    try:
        module = legato.parse(text)
    except legato.LegatoError:
        return "refused"
    check_round_trip(module)
    return "ok"


def check_round_trip(module) -> None:
    printed = str(module)
    try:
        again = legato.parse(printed)
    except legato.LegatoError as err:
        raise InvalidOutput(f"a parsed module does not parse back: {err}") from None
    if not legato.structural_equal(again, module):
        raise InvalidOutput("a parsed module prints to text that parses to another module")
    if str(again) != printed:
        raise InvalidOutput("a parsed module prints differently after a round trip")
