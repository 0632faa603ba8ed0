"""Fixtures of the tosa_custom tests: the official TOSA tools (tosa-opt, the reference
model) when installed; shared case data lives in legato_tosa_custom.cases."""
from __future__ import annotations

import pathlib
import warnings

import pytest

from legato_tosa_custom.tools import TosaTools

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def tools():
    """TosaTools of .venv-tosa (mk/tosa.mk) or $LEGATO_TOSA_VENV; the tests that use it
    skip without them, and say so in the warnings summary."""
    found = TosaTools.find(REPO / ".venv-tosa")
    if found is None:
        message = ("TOSA TOOLS NOT FOUND: the external TOSA validation and reference-model "
                   "tests are SKIPPED. Run `make test` (installs tosa-tools into .venv-tosa) "
                   "or set LEGATO_TOSA_VENV to a venv with tosa-tools.")
        warnings.warn(message)
        pytest.skip(message)
    return found


@pytest.fixture
def repo() -> pathlib.Path:
    """The repository root (configs/ and examples/ are read from it)."""
    return REPO
