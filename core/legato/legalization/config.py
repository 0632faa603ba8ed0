"""User configs (configs/*.yaml): per backend, which ops stay legal and how far to lower.

    backends:
      tosa_custom:
        keep: [nn.layer_norm]      # never decompose; custom op if the backend has no lowering
      c_kernels:
        decompose: [nn.gelu]       # decompose even though supported
        max_level: 1
        recompose: [nn.rms_norm]   # find these in primitive code first (default: true)
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from os import PathLike
from typing import Mapping

from ..ir.errors import ConfigError, LegatoWarning, clip, quote
from .yamlsource import as_list, check_keys, check_op, expect, hint, is_int, load_yaml

BACKEND_KEYS = {"keep", "decompose", "max_level", "recompose"}


@dataclass(frozen=True)
class BackendConfig:
    """One backend's part of a user config."""

    keep: frozenset = frozenset()
    decompose: frozenset = frozenset()
    max_level: int | None = None
    source: str = ""
    # before legalization, find these composite ops where the model spells them out in
    # primitives (legato.recompose): True for those the backend lists as legal or keeps,
    # False for none, or a tuple of op names
    recompose: object = True


EMPTY_CONFIG = BackendConfig()


def load_config(source, backend: str | None, registry, installed=None) -> BackendConfig:
    """The config for `backend` from a path, dict or BackendConfig (None: empty).

    Every section of an installed backend is validated. A section for a backend that is
    not installed is ignored with a LegatoWarning (configs are shared between machines; its
    ops may come from the plugin that is missing), which names an installed backend of a
    similar name, if any (`installed` None: every section is validated).
    """
    if source is None:
        return EMPTY_CONFIG
    if isinstance(source, BackendConfig):
        return source
    if not isinstance(source, (str, PathLike, Mapping)):
        raise ConfigError(f"config: expected a path, a dict or None, got "
                          f"{type(source).__name__} {quote(source)}")
    data, label = load_yaml(source, "config")
    check_keys(data, {"backends"}, label, "")
    sections = data.get("backends")
    if sections is None:
        sections = {}
    if not isinstance(sections, Mapping):
        raise ConfigError(f"{label}: key 'backends' must map backend names to settings, "
                          f"got {quote(sections)}")
    parsed, missing = {}, []
    for name, section in sections.items():
        expect(isinstance(name, str), name, label, "backends", "backend names (strings)")
        if installed is not None and name not in installed:
            missing.append(name)
            continue
        parsed[name] = _parse_section(section, f"backends.{name}", registry, label)
    if missing:
        _warn_missing(label, missing, installed)
    return parsed.get(backend, BackendConfig(source=label))


def _warn_missing(label: str, missing: list, installed) -> None:
    """One warning per config (a shared config may name many backends) naming the first
    few sections, each with an installed backend of a similar name."""
    shown = [f"backends.{clip(name)}{hint(name, installed)}" for name in missing[:3]]
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    what = "section" if len(missing) == 1 else "sections"
    warnings.warn(f"{label}: no backend of that name is installed for {what} "
                  f"{', '.join(shown)}{more}; ignored", LegatoWarning, stacklevel=4)


def _parse_section(section, where, registry, label) -> BackendConfig:
    if section is None:
        return BackendConfig(source=label)
    if not isinstance(section, Mapping):
        raise ConfigError(f"{label}: {where}: expected a mapping with keep/decompose/max_level, "
                          f"got {quote(section)}")
    check_keys(section, BACKEND_KEYS, label, f"{where}.")
    lists = {}
    for key in ("keep", "decompose"):
        ops = as_list(section.get(key), label, f"{where}.{key}", "a list of op names")
        for op in ops:
            check_op(op, registry, label, f"{where}.{key}")
        lists[key] = frozenset(ops)
    for op in sorted(lists["decompose"]):
        if registry.get(op).decompose is None:
            raise ConfigError(f"{label}: {where}.decompose: {op} is a primitive (level 0) "
                              "and has no decomposition")
    both = lists["keep"] & lists["decompose"]
    if both:
        raise ConfigError(f"{label}: {where}: {sorted(both)[0]} is in both keep and decompose")
    level = section.get("max_level")
    expect(level is None or is_int(level), level, label, f"{where}.max_level", "an int >= 0")
    recompose = section.get("recompose", True)
    if not isinstance(recompose, bool):
        ops = as_list(recompose, label, f"{where}.recompose", "true, false or a list of op names")
        for op in ops:
            check_op(op, registry, label, f"{where}.recompose")
        recompose = tuple(ops)
    return BackendConfig(lists["keep"], lists["decompose"], level, label, recompose)
