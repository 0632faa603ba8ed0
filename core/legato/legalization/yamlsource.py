"""Reading capability files and user configs: a YAML path or a dict, bounded in size,
nesting and alias expansion, and the key checks both file kinds share.

The bounds keep a hostile file cheap: a few hundred bytes of nested aliases
(`b: &b [*a, *a, ...]`, "billion laughs") would otherwise stand for millions of values
that validation walks and error messages print.
"""
from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path
from typing import Any, Mapping

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, SequenceNode
from yaml.resolver import Resolver

from ..ir.errors import ConfigError, clip, quote
from ..ops.registry import suggest

MAX_BYTES = 512 * 1024      # a real capability file or config is a few KB
MAX_DEPTH = 32              # real files nest five levels deep
MAX_VALUES = 100_000        # values in a document, each alias counted at every use
CONTAINERS = (list, tuple, set, frozenset)
SCALARS = (str, int, float, bytes)


class _LimitError(ComposerError):
    """A document over one of the bounds (not malformed, just too big)."""


class _Bounded:
    """PyYAML's safe loading, refusing documents nested deeper than MAX_DEPTH, holding
    more than MAX_VALUES values once aliases are expanded, or containing themselves (an
    alias inside its own anchor). Aliases stay legal (capability files use them to share
    conditions); only their expanded size is counted, per node and memoized, so counting
    is linear in the file. The bounds are checked as the document is composed, event by
    event, before any of it is constructed."""

    def _start_bounds(self) -> None:
        self._depth = 0
        self._values: dict[int, int] = {}  # id(node) -> values it stands for

    def compose_node(self, parent, index):
        event = self.peek_event()
        if self._depth >= MAX_DEPTH:
            raise _LimitError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                              event.start_mark)
        if isinstance(event, AliasEvent) and event.anchor in self.anchors \
                and id(self.anchors[event.anchor]) not in self._values:  # not finished
            raise _LimitError(None, None, f"alias *{clip(event.anchor, 40)} inside its own "
                              "anchor (a structure that contains itself)", event.start_mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if id(node) not in self._values:  # an alias returns its anchor's node, counted
            count = 1 + sum(self._values[id(child)] for child in _children(node))
            self._values[id(node)] = count
            if count > MAX_VALUES or len(self._values) > MAX_VALUES:
                raise _LimitError(None, None, f"more than {MAX_VALUES} values (aliases "
                                  "counted at every use)", node.start_mark)
        return node

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as err:  # a 5000-digit int, February 30th
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read value: {err}", node.start_mark) from None


class _BoundedLoader(_Bounded, yaml.SafeLoader):
    """The bounded safe loader on PyYAML's pure-Python scanner and parser."""

    def __init__(self, stream):
        super().__init__(stream)
        self._start_bounds()


if getattr(yaml, "__with_libyaml__", False):
    from yaml._yaml import CParser

    class _BoundedCLoader(_Bounded, Composer, CParser, SafeConstructor, Resolver):
        """The bounded safe loader on libyaml's scanner and parser (what yaml.CSafeLoader
        reads with, 15 times faster than the pure-Python ones): its events are composed
        here, by PyYAML's Composer with the bounds, not by CParser's own composer, which
        would build a whole document (nested as deep as the file says) before any check."""

        def __init__(self, stream):
            CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            Composer.__init__(self)
            self._start_bounds()

    LOADER = _BoundedCLoader
else:  # PyYAML built without libyaml
    LOADER = _BoundedLoader


def _children(node) -> list:
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def load_yaml(source, what: str) -> tuple[dict, str]:
    """(data, label) from a path to a YAML file or a mapping; safe loader only."""
    if isinstance(source, Mapping):
        label = f"<{what} dict>"
        check_bounds(source, label)
        return dict(source), label
    path = _path(source, what)
    label = clip(str(path), 200)
    text = _decode(_read(path, what, label), label)
    try:
        data = yaml.load(text, Loader=LOADER)
    except yaml.YAMLError as err:
        raise ConfigError(_yaml_error(err, text, label)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a mapping at the top level, "
                          f"got {type(data).__name__}")
    return data, label


def _path(source, what: str) -> Path:
    if isinstance(source, (str, os.PathLike)):
        try:
            return Path(source)
        except TypeError:  # a PathLike that returns bytes
            pass
    raise ConfigError(f"{what}: expected a path to a YAML file or a mapping, "
                      f"got {type(source).__name__} {quote(source)}")


def _read(path: Path, what: str, label: str) -> bytes:
    """At most MAX_BYTES + 1 bytes of a regular file (not a pipe or device that never
    ends or blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        raise ConfigError(f"{what} {label}: cannot read: "
                          f"{getattr(err, 'strerror', None) or err}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{what} {label}: cannot read: not a regular file")
        raw = b""
        while len(raw) <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
    except OSError as err:
        raise ConfigError(f"{what} {label}: cannot read: {err.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{label}: larger than {MAX_BYTES // 1024} KiB; a {what} is a few "
                          "KB of YAML")
    return raw


def _decode(raw: bytes, label: str) -> str:
    utf16 = raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    encoding = "utf-16" if utf16 else "utf-8-sig"
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ConfigError(f"{label}: line {line}: not valid {'UTF-16' if utf16 else 'UTF-8'} "
                          f"(byte {raw[err.start]:#04x} at offset {err.start})") from None


def _yaml_error(err: yaml.YAMLError, text: str, label: str) -> str:
    mark = getattr(err, "problem_mark", None)
    if isinstance(err, yaml.reader.ReaderError):  # a control character
        line = text[:err.position].count("\n") + 1
        return f"{label}: line {line}: malformed YAML: character #x{err.character:04x} is not allowed"
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    if getattr(err, "problem", None) == "exceeded maximum nesting depth":
        # libyaml's own bound (1000 levels), met while it scans ahead of the composer
        return f"{label}:{where}: nested deeper than {MAX_DEPTH} levels"
    kind = ":" if isinstance(err, _LimitError) else " malformed YAML:"
    return f"{label}:{where}{kind} {clip(str(getattr(err, 'problem', None) or err), 300)}"


def check_bounds(data: Mapping, label: str) -> None:
    """The bounds of a YAML document for data given as a dict; also refuses a dict that
    contains itself. Stops after MAX_VALUES values, so it is cheap on any input."""
    stack, count = [(data, 1)], 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(f"{label}: more than {MAX_VALUES} values")
        if value is None or isinstance(value, SCALARS):
            continue  # most values: checked first, as Mapping's isinstance is slow
        if isinstance(value, (dict, Mapping)):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, CONTAINERS):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise ConfigError(f"{label}: nested deeper than {MAX_DEPTH} levels "
                              "(or contains itself)")
        stack.extend((child, depth + 1) for child in children)


def hint(name: Any, known) -> str:
    """' (did you mean ...?)' for a short string near one of `known`, else ''."""
    if not isinstance(name, str) or len(name) > 100:
        return ""
    return suggest(name, known)


# names other tools use for legato's dtypes, which difflib does not find ('fp16' is far
# from 'float16' by edit distance)
DTYPE_ALIASES = {
    "fp64": "float64", "f64": "float64", "double": "float64",
    "fp32": "float32", "f32": "float32", "float": "float32", "single": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16", "bfloat": "bfloat16",
    "i64": "int64", "long": "int64", "int": "int64", "i32": "int32", "i16": "int16",
    "short": "int16", "i8": "int8", "qint8": "int8", "u8": "uint8", "quint8": "uint8",
    "byte": "uint8", "boolean": "bool", "bool_": "bool",
}


def dtype_hint(name: Any, known) -> str:
    """' (did you mean 'float16'?)' for 'fp16', 'half', 'F16' or a misspelling."""
    if isinstance(name, str) and DTYPE_ALIASES.get(name.lower()) in known:
        return f" (did you mean {DTYPE_ALIASES[name.lower()]!r}?)"
    return hint(name.lower() if isinstance(name, str) else name, known)


def check_keys(data: Mapping, allowed: set, label: str, where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{label}: unknown key {where}{quote(key)}{hint(key, allowed)}; "
                              f"allowed: {', '.join(sorted(allowed))}")


def check_op(name: Any, registry, label: str, key: str) -> None:
    if not isinstance(name, str) or name not in registry:
        raise ConfigError(f"{label}: {key}: unknown op {quote(name)}"
                          f"{hint(name, registry.names())}")


def expect(ok: bool, value: Any, label: str, key: str, wanted: str) -> None:
    """ConfigError `label: key: expected <wanted>, got <value>` unless `ok`."""
    if not ok:
        raise ConfigError(f"{label}: {key}: expected {wanted}, got {quote(value)}")


def is_int(value: Any, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def as_list(value: Any, label: str, key: str, wanted: str) -> list:
    """A list value; null (key present, nothing given) is the empty list."""
    if value is None:
        return []
    expect(isinstance(value, list), value, label, key, wanted)
    return value
