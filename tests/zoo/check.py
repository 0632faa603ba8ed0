"""One zoo check: a model by one route, imported, compiled for the executing backends and
compared with eager, emitted as TOSA and validated (and run on the TOSA reference model when
asked). Every stage is recorded, so a table can show how far each model gets; `Row.failure`
names the first stage that failed and its error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import export

BACKENDS = ("cpu_ref", "c_kernels")
TOLERANCE = 1e-4   # max |got - want| / max(max |want|, 1) against eager
TOSA = "tosa_custom"


@dataclass
class Row:
    model: str
    route: str
    import_ms: float | None = None
    errors: dict = field(default_factory=dict)   # backend -> max rel. error, or the error
    tosa: str = "-"                               # valid / emitted / the error / -
    failures: list = field(default_factory=list)  # (stage, message), in stage order

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failure(self) -> str:
        return "" if self.ok else f"{self.failures[0][0]}: {self.failures[0][1]}"

    def fail(self, stage: str, message: str) -> None:
        self.failures.append((stage, message))


def describe(err: BaseException) -> str:
    """The error in one line; for an importer's list of unsupported ops, the op names
    (the first is the first to add)."""
    text = str(err)
    listed = re.findall(r"^\s+([\w.:]+): ", text, flags=re.M)
    if "cannot import" in text and listed:
        return "unsupported " + ", ".join(listed)
    return export.first_line(err)


def run(model: str, route: str, tools=None, reference: bool = False) -> Row:
    """Check `model` by `route`; `tools`: legato_tosa_custom TosaTools to validate the TOSA
    module with (None: emit only); `reference`: also run it on the TOSA reference model and
    compare with cpu_ref."""
    import legato
    row = Row(model, route)
    try:
        inputs, want = export.eager(model)
    except Exception as err:  # noqa: BLE001 - a transformers or torch problem
        row.fail("build", describe(err))
        return row
    try:
        module, row.import_ms = export.import_model(model, route)
    except Exception as err:  # noqa: BLE001 - exporters and importers raise many types
        row.fail("import", describe(err))
        return row
    ref_result = None
    for backend in BACKENDS:
        try:
            got = legato.compile(module, backend)(*inputs)
        except Exception as err:  # noqa: BLE001
            row.errors[backend] = "error"
            row.fail(backend, describe(err))
            continue
        if backend == "cpu_ref":
            ref_result = got
        row.errors[backend] = error = export.rel_error(got, want)
        if not error <= TOLERANCE:
            row.fail(backend, f"max rel. error {error:.2g} > {TOLERANCE:g}")
    check_tosa(row, module, inputs, ref_result, tools, reference)
    return row


def check_tosa(row: Row, module, inputs, ref_result, tools, reference: bool) -> None:
    import legato
    try:
        text = legato.compile(module, backend=TOSA).artifact
    except Exception as err:  # noqa: BLE001
        row.tosa = "error"
        row.fail("tosa emit", describe(err))
        return
    if tools is None:
        row.tosa = "emitted"
        return
    try:
        if reference and ref_result is not None:
            got = tools.run_reference(text, inputs, validate=True)
            got = list(got) if isinstance(ref_result, (list, tuple)) else got[0]
            error = export.rel_error(got, ref_result)
            row.tosa = f"valid, ref. model {error:.1e}"
            if not error <= TOLERANCE:
                row.fail("tosa reference model", f"max rel. error {error:.2g} vs cpu_ref")
            return
        tools.validate(text)
        row.tosa = "valid"
    except Exception as err:  # noqa: BLE001
        row.tosa = "invalid"
        row.fail("tosa-opt", describe(err))


HEADER = ("model", "route", "import ms", *(f"{b} err" for b in BACKENDS), "TOSA", "first failure")


def table(rows) -> list[str]:
    """The rows as a Markdown table."""
    def cell(value):
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.1e}"
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    for r in rows:
        ms = None if r.import_ms is None else f"{r.import_ms:.0f}"
        cells = [r.model, r.route, ms, *(r.errors.get(b) for b in BACKENDS), r.tosa,
                 r.failure or "ok"]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return lines
