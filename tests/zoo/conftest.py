"""pytest set-up of the public model zoo (tests/zoo): the `zoo` marker, the quick subset
`make test` runs, the TOSA tools, and the table a full run prints.

Every zoo test is marked `zoo`; those outside the quick subset are also marked `zoo_full`
and deselected unless the run selects the zoo by marker (`pytest -m zoo`, what `make zoo`
runs), LEGATO_ZOO=all is set, or the test is named on the command line by its node id.
"""
from __future__ import annotations

import os
import pathlib
import warnings

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
_ROWS = pytest.StashKey[list]()
_QUANT_ROWS = pytest.StashKey[list]()


def pytest_configure(config):
    config.addinivalue_line("markers", "zoo: the public model zoo (tests/zoo); `make zoo` "
                                       "runs all of it")
    config.addinivalue_line("markers", "zoo_full: a zoo test outside the quick subset "
                                       "`make test` runs")
    config.stash[_ROWS] = []
    config.stash[_QUANT_ROWS] = []


def full_zoo(config) -> bool:
    return "zoo" in (config.option.markexpr or "") or os.environ.get("LEGATO_ZOO") == "all"


def _named(config, item) -> bool:
    """Whether the command line names this test (path::name, with or without parameters)."""
    test = item.nodeid.split("::", 1)[-1]
    return any("::" in arg and (arg.split("::", 1)[-1] in (test, test.split("[")[0]))
               and item.nodeid.split("::")[0].endswith(arg.split("::")[0].lstrip("./"))
               for arg in config.args)


def pytest_collection_modifyitems(config, items):
    if full_zoo(config):
        return
    kept = [item for item in items
            if item.get_closest_marker("zoo_full") is None or _named(config, item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.fixture(scope="session")
def tosa_tools():
    """TosaTools of .venv-tosa (mk/tosa.mk) or $LEGATO_TOSA_VENV; None without them (TOSA
    is then emitted but not validated, and the warnings summary says so)."""
    from legato_tosa_custom.tools import TosaTools
    found = TosaTools.find(REPO / ".venv-tosa")
    if found is None:
        warnings.warn("TOSA TOOLS NOT FOUND: zoo models' TOSA is emitted but not validated "
                      "(run `make test` or set LEGATO_TOSA_VENV)")
    return found


@pytest.fixture(scope="session")
def full_run(request) -> bool:
    """Whether this run is the whole zoo (which also runs TOSA on the reference model)."""
    return full_zoo(request.config)


@pytest.fixture
def zoo_row(request):
    """Call with a tests.zoo.check.Row: it goes into the table printed at the end."""
    return request.config.stash[_ROWS].append


@pytest.fixture
def zoo_quant_row(request):
    """Call with a tests.zoo.quant.QuantRow: it goes into the quantized table."""
    return request.config.stash[_QUANT_ROWS].append


def pytest_terminal_summary(terminalreporter, config):
    if not full_zoo(config):  # `make test`'s quick subset stays quiet
        return
    quantized = config.stash.get(_QUANT_ROWS, [])
    if quantized:
        from tests.zoo.quant import table as quant_table
        terminalreporter.write_sep("=", f"quantized zoo: {sum(r.ok for r in quantized)} of "
                                        f"{len(quantized)} pass against onnxruntime int8")
        for line in quant_table(quantized):
            terminalreporter.write_line(line)
    rows = config.stash.get(_ROWS, [])
    if not rows:
        return
    from tests.zoo.check import table
    terminalreporter.write_sep("=", f"model zoo: {sum(r.ok for r in rows)} of {len(rows)} "
                                    "model/route pairs pass")
    for line in table(rows):
        terminalreporter.write_line(line)
