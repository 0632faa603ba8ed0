"""Finding and running fuzz targets, and classifying the outcome of one case.

Shared by the worker processes of the harness (`python -m tests.fuzz`) and by the quick
in-process run in `make test` (tests/fuzz/test_quick.py).
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from . import InvalidOutput, Mismatch

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_CASE_TIMEOUT = 20.0

# outcomes of a case: the first three are answers, the rest are problems
ANSWERS = ("ok", "refused", "skipped")
PROBLEMS = ("crash", "hang", "memory", "raw", "mismatch", "invalid")
OUTCOMES = ANSWERS + PROBLEMS
MESSAGE_CHARS = 300


@dataclass
class CaseResult:
    outcome: str
    message: str = ""
    details: str = ""     # a traceback or the worker's last words, for `--seed`


def discover(target_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """{name: path} of every target_<name>.py in `target_dir`."""
    return {path.stem[len("target_"):]: path
            for path in sorted(Path(target_dir).glob("target_*.py"))}


def load_target(path: Path):
    """Import a target module; the project's own as tests.fuzz.target_<name> (so that its
    relative imports work), any other by file path."""
    path = Path(path).resolve()
    if path.parent == PACKAGE_DIR:
        return importlib.import_module(f"{__package__}.{path.stem}")
    name = f"_fuzz_{path.stem}_{abs(hash(str(path)))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    message = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS] + "..."


def _where(err: BaseException) -> str:
    """file:line of the innermost frame, which tells raw exceptions apart."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    return f" [{Path(frame.filename).name}:{frame.lineno}]"


def run_case(module, seed: int) -> CaseResult:
    """Run `module.run(seed)` and classify what happened (everything but crash and hang,
    which only the harness can see)."""
    from legato import LegatoError  # after the target: a target may not need legato
    try:
        result = module.run(seed)
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - classifying every failure is the point
        details = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        if isinstance(err, Mismatch):
            return CaseResult("mismatch", one_line(err), details)
        if isinstance(err, InvalidOutput):
            return CaseResult("invalid", one_line(err), details)
        if isinstance(err, MemoryError):
            return CaseResult("memory", one_line(err) + _where(err), details)
        if isinstance(err, LegatoError):
            return CaseResult("refused", one_line(err), details)
        return CaseResult("raw", one_line(err) + _where(err), details)
    if result not in ANSWERS:
        return CaseResult("raw", f"run() returned {str(result)[:80]!r}, not one of {ANSWERS}")
    return CaseResult(result)


_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+(\.\d+)?(e[-+]?\d+)?")


def signature(outcome: str, message: str) -> str:
    """What makes two problems the same: the outcome and the message with numbers
    (shapes, values, addresses) blanked out."""
    return f"{outcome}: {_NUMBER.sub('#', message)}"
