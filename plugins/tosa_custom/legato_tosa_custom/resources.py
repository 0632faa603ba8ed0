"""Large constants out of line, as MLIR `dense_resource` blobs.

Printed inline, each constant is hex in its `tosa.const` (`dense<"0x...">`): BERT-base
becomes 828 MiB of text that takes seconds and gigabytes to build and to parse. Out of
line, a constant of more than `Weights.threshold` bytes is printed as
`dense_resource<name> : tensor<...>` and its array is kept as it is (no copy): the
emitter returns a `TosaArtifact`, the MLIR text of the operations (0.1 MiB for
BERT-base) and the arrays by name. Written out (`TosaArtifact.write`, which is what
`legato compile -b tosa_custom -o out.mlir` calls), the file is that text followed by the
standard MLIR resource section, which every MLIR tool reads as part of the module:

    {-#
      dialect_resources: {
        builtin: {
          name: "0x04000000<the bytes, little-endian, as hex>"
        }
      }
    #-}

(the first 4 bytes are the blob's alignment). One file, read by tosa-opt as it is.

What the TOSA tools here take (tosa-tools 2026.8.0, tosa-opt on LLVM 24):
- tosa-opt parses `dense_resource` constants with their blobs in the resource section;
  its validation (--tosa-validate, strict) passes, and --tosa-serialize writes the
  flatbuffer from the blobs. Without the section validation still passes (a missing blob
  is not checked) but --tosa-serialize fails ("Could not retrieve data present in
  tosa::ConstOp"), so the tools here always write the section.
- tosa-opt also reads MLIR bytecode (`--emit-bytecode` writes the blobs as raw bytes) and
  validates and serializes it alike.
- The TOSA reference model reads only the flatbuffer tosa-opt serializes; it runs one made
  from resources exactly as one made from inline constants. Neither tool reads weights
  from a side file of their own: MLIR text has no reference to an external blob.

`Weights` says where constants go: `inline` (every one as hex, the output of earlier
versions), `resources` (each of more than `threshold` bytes out of line) or `auto`, the
default: out of line only when such constants hold more than `auto_bytes` in all, so
small models print exactly as before and a plain str is returned for them. The registered
backends (and so `legato compile`) take the mode from $LEGATO_TOSA_WEIGHTS when set.
"""
from __future__ import annotations

import binascii
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from legato.plugin_api import ConfigError, Const

MODES = ("auto", "inline", "resources")
SECTION = "{-#"   # where a module's resource section starts (after its operations)
CHUNK = 1 << 23   # bytes turned into hex at a time when writing
ENV = "LEGATO_TOSA_WEIGHTS"  # the mode of emitters given none


@dataclass(frozen=True)
class Weights:
    """Where the emitter puts constants (see the module docstring)."""

    mode: str = "auto"
    threshold: int = 1024           # bytes: a larger constant may go out of line
    auto_bytes: int = 4 * 2 ** 20   # auto: out of line once those constants hold more

    def __post_init__(self):
        if self.mode not in MODES:
            raise ConfigError(f"tosa_custom weights: mode {self.mode!r} is not one of "
                              f"{', '.join(MODES)}")
        for key in ("threshold", "auto_bytes"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 0:
                raise ConfigError(f"tosa_custom weights: {key} must be a number of bytes "
                                  f">= 0, not {getattr(self, key)!r}")

    def large(self, array: np.ndarray) -> bool:
        """Whether `array` is one to put out of line: over the threshold, not bool (MLIR
        packs i1 blobs differently), not a splat (one element prints as one)."""
        if array.dtype == np.bool_ or array.nbytes <= self.threshold or array.size < 2:
            return False
        flat = array.reshape(-1)
        if flat[1] != flat[0] or np.isnan(flat[0]):  # most weights: known at once
            return True
        return not (flat == flat[0]).all()


def as_weights(value) -> Weights:
    """A Weights from a Weights, a mode's name or None ($LEGATO_TOSA_WEIGHTS, else auto)."""
    if value is None:
        mode = os.environ.get(ENV) or "auto"
        if mode not in MODES:
            raise ConfigError(f"${ENV}={mode!r}: expected one of {', '.join(MODES)}")
        return Weights(mode)
    if isinstance(value, Weights):
        return value
    if isinstance(value, str):
        return Weights(value)
    raise ConfigError(f"tosa_custom weights: expected one of {', '.join(MODES)} or a "
                      f"Weights, not {type(value).__name__}")


class Resources:
    """The blobs of one module: each distinct array once, under a unique name (shape
    buckets, each legalized on its own, hold equal copies of every weight)."""

    def __init__(self):
        self.blobs: dict[str, np.ndarray] = {}
        self._names: dict[tuple, str] = {}
        self._by_sample: dict[tuple, list[str]] = {}

    @staticmethod
    def key(array: np.ndarray) -> tuple:
        """The same buffer seen the same way is the same constant (the table keeps each
        array alive, so no other array can take over its address)."""
        return (array.dtype.str, array.shape, array.strides,
                array.__array_interface__["data"][0])

    def handle(self, array: np.ndarray, hint: str | None = None) -> str:
        """The resource's name for `array`, adding it if new (named after `hint`)."""
        key = self.key(array)
        if key not in self._names:
            data = np.ascontiguousarray(array)
            data = data if data.dtype.byteorder != ">" else \
                data.astype(data.dtype.newbyteorder("<"))
            self._names[key] = self._equal(data) or self._add(data, hint)
        return self._names[key]

    @staticmethod
    def _sample(data: np.ndarray) -> tuple:
        """A cheap fingerprint: type and a few bytes (weights differ in their first ones)."""
        raw = _raw(data)
        middle = len(raw) // 2
        return (data.dtype.str, data.shape, bytes(raw[:64]), bytes(raw[middle:middle + 64]),
                bytes(raw[-64:]))

    def _equal(self, data: np.ndarray) -> str | None:
        for name in self._by_sample.get(self._sample(data), ()):
            if _same(self.blobs[name], data):
                return name
        return None

    def _add(self, data: np.ndarray, hint: str | None) -> str:
        name = _unique(_identifier(hint), self.blobs)
        self.blobs[name] = data
        self._by_sample.setdefault(self._sample(data), []).append(name)
        return name


def _raw(data: np.ndarray) -> memoryview:
    """A contiguous array's bytes (as uint8: bfloat16 has no buffer format of its own)."""
    return memoryview(data.reshape(-1).view(np.uint8))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bytes (NaNs alike), compared a few MB at a time."""
    x, y = _raw(a), _raw(b)
    return len(x) == len(y) and all(
        np.array_equal(np.asarray(x[i:i + CHUNK]), np.asarray(y[i:i + CHUNK]))
        for i in range(0, len(x), CHUNK))


def _identifier(hint: str | None) -> str:
    """A bare MLIR resource key: letters, digits and '_', not starting with a digit."""
    text = re.sub(r"[^A-Za-z0-9_]+", "_", hint or "").strip("_")[:60]
    return text if text and not text[0].isdigit() else f"const_{text}".rstrip("_")


def _unique(name: str, taken) -> str:
    if name not in taken:
        return name
    count = 1
    while f"{name}_{count}" in taken:
        count += 1
    return f"{name}_{count}"


class TosaArtifact:
    """A module whose large constants are out of line: `text`, its operations with
    `dense_resource<name>` for them, and `resources`, the arrays by name. `write(path)`
    writes the MLIR file tosa-opt reads (text and resource section); str() is that file's
    text (built in memory: for a large model prefer `write`)."""

    def __init__(self, text: str, resources: dict[str, np.ndarray]):
        self.text, self.resources = text, resources

    def chunks(self):
        """The file's bytes, piece by piece (the hex a few MB at a time)."""
        yield self.text.encode()
        if not self.resources:
            return
        yield f"{SECTION}\n  dialect_resources: {{\n    builtin: {{\n".encode()
        for index, (name, array) in enumerate(self.resources.items()):
            alignment = int(array.dtype.itemsize).to_bytes(4, "little")
            yield f'      {name}: "0x{alignment.hex()}'.encode()
            raw = _raw(array)
            for start in range(0, len(raw), CHUNK):
                yield binascii.hexlify(raw[start:start + CHUNK])
            yield b'",\n' if index + 1 < len(self.resources) else b'"\n'
        yield b"    }\n  }\n#-}\n"

    def write(self, path) -> None:
        with open(path, "wb") as out:
            for chunk in self.chunks():
                out.write(chunk)

    def __str__(self) -> str:
        return b"".join(self.chunks()).decode()

    def __repr__(self) -> str:
        size = sum(a.nbytes for a in self.resources.values())
        return (f"TosaArtifact({len(self.text)} characters of MLIR, {len(self.resources)} "
                f"constants out of line, {size} bytes)")


class Placement:
    """Where one module's constants go: its Weights, and the table of those out of line."""

    def __init__(self, weights: Weights):
        self.weights, self.table = weights, Resources()


def placement_of(functions, weights) -> Placement | None:
    """None to print every constant inline: mode inline, or auto with no more than
    `auto_bytes` in large constants."""
    weights = as_weights(weights)
    if weights.mode == "inline":
        return None
    if weights.mode == "auto":
        seen, total = set(), 0
        for fn in functions:
            for call in fn.calls:
                for value in call.inputs:
                    if isinstance(value, Const) and id(value) not in seen and \
                            value.data.nbytes > weights.threshold:
                        seen.add(id(value))
                        total += value.data.nbytes
        if total <= weights.auto_bytes:
            return None
    return Placement(weights)


def finish(lines: list[str], placement: Placement | None):
    """The module's text, or a TosaArtifact when constants went out of line."""
    text = "\n".join(lines) + "\n"
    if placement is None or not placement.table.blobs:
        return text
    return TosaArtifact(text, placement.table.blobs)


def text_of(artifact) -> str:
    """The MLIR operations of an artifact (a TosaArtifact's text, or the str itself
    without any resource section it carries)."""
    if isinstance(artifact, TosaArtifact):
        return artifact.text
    head, _, _ = artifact.partition("\n" + SECTION)
    return head + "\n" if len(head) < len(artifact) else artifact


def write_mlir(path: Path, artifact) -> None:
    """The artifact as an MLIR file (a str as it is)."""
    if isinstance(artifact, TosaArtifact):
        artifact.write(path)
    else:
        Path(path).write_text(artifact)


def replace_text(artifact, text: str):
    """`artifact` with its operations replaced by `text`, keeping its constants (those of a
    TosaArtifact, or a str's resource section)."""
    if isinstance(artifact, TosaArtifact):
        return TosaArtifact(text, artifact.resources)
    section = artifact.find("\n" + SECTION)
    return text if section < 0 else text + artifact[section + 1:]
