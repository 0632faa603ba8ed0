"""Fuzz target: mutated capability files and user configs.

Each case takes one of the repository's YAML files (configs/*.yaml, the plugins'
capability.yaml) and damages it from the seed: bytes flipped, invalid UTF-8, lines
deleted, duplicated or re-indented, values swapped between list, scalar and mapping,
numbers made fractional, negative or huge, op names misspelt, anchors and aliases (up to
"billion laughs"), deep nesting, very long strings. The result goes, as a file or as a
dict, to the config loader (`legato.legalize` / `legato.compile` with `config=`) or to the
capability parser (`legato.register_backend`, then a partial legalization with the new
backend, then `unregister_backend`).

Every outcome must be a result or a LegatoError whose message is shorter than
MAX_MESSAGE; what is accepted must be well-formed (checked below), so validation is not
merely silent.
"""
from __future__ import annotations

import atexit
import random
import re
import shutil
import tempfile
from pathlib import Path

import yaml

import legato
from legato.ir import DTYPES
from legato.legalization.config import load_config
from tests.fuzz import InvalidOutput

QUICK_CASES = 400
CASE_TIMEOUT = 20.0
MAX_MESSAGE = 2000
FUZZ_BACKEND = "fuzz_yaml"

REPO = Path(__file__).resolve().parents[2]
OP_NAME = re.compile(r"\b(?:nn\.|tosa\.)?[a-z][a-z_0-9]*(?:\.[a-z_0-9]+)?\b")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?\b")
VALUE = re.compile(r"(?<=: )[^\n#]+|(?<=- )[^\n#]+")
NUMBERS = ("1.5", "-1", "-0", "0", "1e999", ".nan", ".inf", "-.inf", "true", "null", "~",
           "0x1F", "0o17", "1_000", "9" * 40, "9" * 5000, "2001-02-30", "2001-01-01",
           "'1'", "[1]", "{1: 2}")
SPECIALS = ("\t", "\x00", "\x85", "\u2028", "\ufeff", "%", "!", "&", "*", "|", ">", "'",
            '"', "{", "}", "[", "]", ",", "#", "?", ":", "- ", "!!binary ", "!!set ",
            "!!python/object:os.system ", "!!omap ", "!foo ", "---\n", "...\n", "<<: ",
            "&a ", "*a", "*undefined")
BAD_UTF8 = (b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82")
BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
_state: dict = {}


def corpus() -> list[tuple[str, str]]:
    """(kind, text) of every YAML file the repository ships; capability files renamed so
    a registered copy does not clash with the installed backend."""
    if "corpus" not in _state:
        files = [("config", p) for p in sorted(REPO.glob("configs/*.yaml"))]
        files += [("capability", p) for p in sorted(REPO.glob("plugins/*/legato_*/capability.yaml"))]
        found = []
        for kind, path in files:
            text = path.read_text()
            if kind == "capability":
                text = re.sub(r"(?m)^backend: .*$", f"backend: {FUZZ_BACKEND}", text)
            found.append((kind, text))
        _state["corpus"] = found
    return _state["corpus"]


def scratch_file() -> Path:
    if "dir" not in _state:
        _state["dir"] = tempfile.mkdtemp(prefix="legato-fuzz-yaml-")
        atexit.register(shutil.rmtree, _state["dir"], True)
    return Path(_state["dir"]) / "case.yaml"


# --- text mutations -----------------------------------------------------------------------

def _lines(rng, text, edit):
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    edit(rng, lines, i)
    return "\n".join(lines)


def delete_lines(rng, text):
    def edit(rng, lines, i):
        del lines[i:i + rng.choice((1, 1, 2, 5))]
    return _lines(rng, text, edit)


def duplicate_line(rng, text):
    return _lines(rng, text, lambda rng, lines, i: lines.insert(rng.randrange(len(lines) + 1),
                                                                lines[i]))


def swap_lines(rng, text):
    def edit(rng, lines, i):
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return _lines(rng, text, edit)


def reindent(rng, text):
    def edit(rng, lines, i):
        body = lines[i].lstrip(" ")
        indent = len(lines[i]) - len(body)
        lines[i] = rng.choice((" " * max(0, indent + rng.choice((-4, -2, -1, 1, 2, 4))),
                               "\t" + " " * indent, "")) + body
    return _lines(rng, text, edit)


def _replace(rng, text, pattern, make):
    found = list(pattern.finditer(text))
    if not found:
        return text
    match = rng.choice(found)
    return text[:match.start()] + make(rng, match.group()) + text[match.end():]


def swap_number(rng, text):
    return _replace(rng, text, NUMBER, lambda rng, old: rng.choice(NUMBERS))


def misspell_op(rng, text):
    def make(rng, old):
        choice = rng.random()
        if choice < 0.3:
            return rng.choice(legato.list_ops())
        if choice < 0.6 and len(old) > 1:
            i = rng.randrange(len(old))
            return old[:i] + old[i + 1:]
        return old + rng.choice(("s", "x", ".y", "_"))
    return _replace(rng, text, OP_NAME, make)


def swap_value_kind(rng, text):
    """A value becomes a list, a mapping, a scalar, null or empty."""
    def make(rng, old):
        old = old.strip()
        return rng.choice((f"[{old}]", f"{{{old}: {old}}}", f"{{k: {old}}}", "null", "",
                           "[]", "{}", "x", "[[1, 2], [3]]", old.strip("[]{}")))
    return _replace(rng, text, VALUE, make)


def long_string(rng, text):
    size = rng.choice((200, 5_000, 100_000, 600_000))
    word = rng.choice(("x", "nn.layer_norm", "a b ", "é", "\\u0000"))
    filler = (word * (size // len(word) + 1))[:size]
    return _replace(rng, text, rng.choice((VALUE, OP_NAME)), lambda rng, old: filler)


def deep_nesting(rng, text):
    depth = rng.choice((5, 31, 33, 200, 5000))
    opener, closer = rng.choice((("[", "]"), ("{a: ", "}"), ("- ", "")))
    if opener == "- ":
        nested = "\n" + "".join("  " * k + "- " + ("\n" if k < depth - 1 else "1\n")
                                for k in range(min(depth, 300)))
    else:
        nested = opener * depth + "1" + closer * depth
    return _replace(rng, text, VALUE, lambda rng, old: nested)


def laughs(rng, text):
    """Nested anchors and aliases in place of a value: width**levels values."""
    levels, width = rng.choice((3, 5, 8, 12)), rng.choice((2, 9, 20))
    items = [f"&l0 [{', '.join(['add'] * width)}]"]
    items += [f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    value = f"[{', '.join(items)}, *l{levels - 1}]"
    return _replace(rng, text, VALUE, lambda rng, old: value)


def anchor_alias(rng, text):
    """An anchor on one value and an alias in place of another (perhaps before it)."""
    if rng.random() < 0.2:  # an alias inside its own anchor
        return _replace(rng, text, VALUE, lambda rng, old: f"&fz [{old}, *fz]")
    text = _replace(rng, text, VALUE, lambda rng, old: f"&fz {old}")
    return _replace(rng, text, VALUE, lambda rng, old: rng.choice(("*fz", "*fz", "*nope",
                                                                   "{<<: *fz}")))


def special_chars(rng, text):
    at = rng.randrange(len(text) + 1)
    return text[:at] + rng.choice(SPECIALS) + text[at:]


TEXT_MUTATIONS = (delete_lines, duplicate_line, swap_lines, reindent, swap_number,
                  misspell_op, swap_value_kind, long_string, deep_nesting, laughs,
                  anchor_alias, special_chars)
WEIGHTS = (4, 2, 2, 4, 4, 4, 5, 1, 1, 1, 2, 3)


# --- byte mutations -----------------------------------------------------------------------

def mutate_bytes(rng, data: bytes) -> bytes:
    choice = rng.random()
    if choice < 0.4 and data:
        data = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    if choice < 0.7:
        at = rng.randrange(len(data) + 1)
        return data[:at] + rng.choice(BAD_UTF8) + data[at:]
    if choice < 0.85:
        return data[:rng.randrange(len(data) + 1)]
    return rng.choice(BOMS) + data


# --- data mutations (on the loaded structure, given as a dict) ----------------------------

def _paths(data, limit: int = 2000) -> list[tuple]:
    """Paths to the first `limit` values, at most 40 deep (earlier mutations may have made
    the data a huge shared DAG or a deep nest)."""
    found, stack = [], [((), data)]
    while stack and len(found) < limit:
        prefix, value = stack.pop()
        found.append(prefix)
        if len(prefix) >= 40:
            continue
        if isinstance(value, dict):
            stack.extend((prefix + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((prefix + (i,), v) for i, v in enumerate(value[:50]))
    return found


def mutate_data(rng, data):
    """Replace one value (found by walking) with another kind of value."""
    paths = _paths(data)
    path = rng.choice(paths)
    old = data
    for key in path:
        old = old[key]
    new = rng.choice((
        lambda: [old], lambda: {"k": old}, lambda: None, lambda: 1.5, lambda: -1,
        lambda: 10 ** 30, lambda: True, lambda: "nn.softmaks", lambda: b"bytes",
        lambda: (old,), lambda: {old} if _hashable(old) else old, lambda: [old] * 9,
        lambda: _shared(rng), lambda: _nested(rng), lambda: "x" * 100_000,
        lambda: {"unknown_key": 1, **old} if isinstance(old, dict) else old,
        lambda: list(old) if isinstance(old, dict) else old,
        lambda: object(), lambda: len, lambda: _cycle(old),
    ))()
    if not path:
        return new
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return data


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _shared(rng):
    """A DAG of one list shared many times: small in memory, huge when walked."""
    value = ["add"] * 9
    for _ in range(rng.choice((3, 6, 12))):
        value = [value] * 9
    return value


def _cycle(value):
    """A list that contains itself (and the old value)."""
    cycle = [value]
    cycle.append(cycle)
    return cycle


def _nested(rng):
    value: object = "add"
    for _ in range(rng.choice((10, 40, 3000))):
        value = [value]
    return value


# --- one case -----------------------------------------------------------------------------

def make_case(seed: int):
    """(kind, source): a mutated file path, or a mutated dict (or not a dict at all)."""
    rng = random.Random(seed)
    kind, text = rng.choice(corpus())
    if rng.random() < 0.25:
        data = yaml.safe_load(text)
        for _ in range(rng.randint(1, 3)):
            data = mutate_data(rng, data)
        return kind, data
    for _ in range(rng.randint(1, 3)):
        text = rng.choices(TEXT_MUTATIONS, WEIGHTS)[0](rng, text)
    raw = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:
        raw = mutate_bytes(rng, raw)
    path = scratch_file()
    path.write_bytes(raw)
    if rng.random() < 0.1:
        return kind, yaml.safe_load(raw) if _loads(raw) else str(path)
    return kind, str(path)


def _loads(raw: bytes) -> bool:
    """Whether PyYAML reads it into a small enough structure to hand over as a dict."""
    if len(raw) > 20_000 or b"*" in raw or raw.count(b"[") + raw.count(b"{") > 500:
        return False  # plain PyYAML is slow on deep nesting
    try:
        yaml.safe_load(raw)
    except (yaml.YAMLError, ValueError, RecursionError):
        return False
    return True


def run(seed: int) -> str:
    kind, source = make_case(seed)
    try:
        if kind == "config":
            check_config(source, seed)
        else:
            check_capability(source, seed)
    except legato.LegatoError as err:
        message = str(err)
        if len(message) >= MAX_MESSAGE:
            raise InvalidOutput(f"error message of {len(message)} characters "
                                f"(bound {MAX_MESSAGE}): {message[:200]}") from err
        return "refused"
    return "ok"


def check_config(source, seed: int) -> None:
    host = legato.context()
    backend = ("cpu_ref", "c_kernels", "tosa_custom")[seed % 3]
    cfg = load_config(source, backend, host.registry, host.backends)
    ops = set(legato.list_ops())
    if not (cfg.keep <= ops and cfg.decompose <= ops) or cfg.keep & cfg.decompose:
        raise InvalidOutput(f"accepted a config with keep={sorted(cfg.keep)[:5]} "
                            f"decompose={sorted(cfg.decompose)[:5]}")
    if cfg.max_level is not None and (type(cfg.max_level) is not int or cfg.max_level < 0):
        raise InvalidOutput(f"accepted max_level={cfg.max_level!r}")
    if seed % 5 == 0:
        legato.compile("example:mlp", backend="cpu_ref", config=source)
    else:
        legato.legalize("example:cnn", backend=backend, config=source, mode="partial")


def check_capability(source, seed: int) -> None:
    try:
        backend = legato.register_backend(source)
    except legato.RegistrationError:  # a mutation named an installed backend
        return
    try:
        check_backend(backend)
        legato.legalize(("example:cnn", "example:transformer")[seed % 2],
                        backend=backend.name, mode="partial")
    finally:
        legato.unregister_backend(backend.name)


def check_backend(backend) -> None:
    """What was accepted has the documented types."""
    ops = set(legato.list_ops())
    problems = []
    if not set(backend.legal) <= ops:
        problems.append(f"legal ops {sorted(set(backend.legal) - ops)[:3]}")
    for op, cond in backend.legal.items():
        if cond.dtypes is not None and not cond.dtypes <= set(DTYPES):
            problems.append(f"{op} dtypes {sorted(map(str, cond.dtypes))[:3]}")
        if cond.ranks is not None and not all(type(r) is int and r >= 0 for r in cond.ranks):
            problems.append(f"{op} ranks {sorted(map(str, cond.ranks))[:3]}")
    if type(backend.executes) is not bool or type(backend.custom_ops) is not bool:
        problems.append(f"flags {backend.executes!r} {backend.custom_ops!r}")
    if backend.layout not in (None, "NCHW", "NHWC"):
        problems.append(f"layout {str(backend.layout)[:40]!r}")
    if problems:
        raise InvalidOutput(f"accepted a capability file with {'; '.join(problems)}")
