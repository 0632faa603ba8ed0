"""Validators of emitted artifacts, registered by plugins (hook
`legato_register_validators`): `legato validate FILE` and `legato compile --validate`
find them here, so the core runs a plugin's external tools without importing the plugin.

    @legato.hookimpl
    def legato_register_validators(register):
        register("tosa", validate, run=run_reference, suffixes=[".mlir"],
                 backends=["tosa_custom"])

`validate(text, name)` returns None for a valid artifact and raises a LegatoError naming
the line and the error otherwise (`name`: what to call the artifact in messages);
`run(text, inputs)` runs it on numpy inputs and returns the results. Both raise
ToolsMissing, whose message says how to install the tools, when those are absent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.errors import LegatoError, RegistrationError, quote


class ToolsMissing(LegatoError):
    """The external tools a validator drives are not installed; says how to install them."""


@dataclass(frozen=True)
class Validator:
    name: str
    validate: Callable
    run: Callable | None = None
    suffixes: tuple = ()
    backends: tuple = ()
    plugin: str = ""


def make_validator(plugin: str, name, validate, run=None, suffixes=(), backends=()
                   ) -> Validator:
    """A Validator from register(...)'s arguments, each checked (a RegistrationError
    naming the argument)."""
    checks = [
        ("name", name, isinstance(name, str) and name.isidentifier(), "an identifier"),
        ("validate", validate, callable(validate), "a function (text, name) -> None"),
        ("run", run, run is None or callable(run), "a function (text, inputs) -> results"),
        ("suffixes", suffixes, _strings(suffixes), "a list of file suffixes such as '.mlir'"),
        ("backends", backends, _strings(backends), "a list of backend names"),
    ]
    for arg, value, ok, wanted in checks:
        if not ok:
            raise RegistrationError(f"validator {quote(name)}: {arg} must be {wanted}, got "
                                    f"{quote(value)}")
    return Validator(name, validate, run, tuple(suffixes), tuple(backends), plugin)


def _strings(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def for_file(validators: dict, path: str, name: str | None = None) -> Validator:
    """The validator named `name`, or the one taking the file's suffix."""
    if name is not None:
        if name not in validators:
            raise LegatoError(f"no validator named {quote(name)} (installed: "
                              f"{', '.join(sorted(validators)) or 'none'})")
        return validators[name]
    found = [v for v in validators.values() if any(path.endswith(s) for s in v.suffixes)]
    if len(found) != 1:
        what = "no installed validator takes" if not found else \
            f"validators {', '.join(v.name for v in found)} all take"
        raise LegatoError(f"{what} {path} (installed: {', '.join(sorted(validators)) or 'none'}"
                          "); name one with --validator")
    return found[0]


def for_backend(validators: dict, backend: str) -> Validator:
    """The validator of an emitting backend's artifacts."""
    for validator in validators.values():
        if backend in validator.backends:
            return validator
    raise LegatoError(f"--validate: no installed validator checks what backend {backend} "
                      f"emits (installed: {', '.join(sorted(validators)) or 'none'})")
