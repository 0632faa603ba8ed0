"""The official TOSA tools, driven from Python: tosa-opt validation and serialization, and
the TOSA reference model.

tosa-tools pins its own numpy, so it usually lives in a venv of its own (`make test`
creates `.venv-tosa`); the reference model runs there as a subprocess on .npy files.
`validate_text` and `run_text` are what the plugin registers as legato's "tosa"
validator (`legato validate FILE.mlir`, `legato compile -b tosa_custom --validate`).
Each takes the emitter's str or its TosaArtifact (large constants out of line,
resources.py), which goes to tosa-opt with its resource section.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from legato.plugin_api import LegatoError, ToolsMissing, clip

from .buckets import bucket_text
from .narrowing import narrow_inputs, widen_results
from .profiles import DEFAULT, profile_of, target
from .resources import text_of, write_mlir

TARGET = target(DEFAULT)  # a module naming no profile (legato.tosa_profiles) is pro_fp
STRICT = "--tosa-validate=strict-op-spec-alignment"
RUNNER = Path(__file__).with_name("_refrun.py")
ENV = "LEGATO_TOSA_VENV"
# a source checkout's venv of the tools (mk/tosa.mk), beside the current directory's
CHECKOUT_VENV = Path(__file__).resolve().parents[3] / ".venv-tosa"
MAX_LINE = 300   # tosa-opt echoes the offending line: a constant's is megabytes long
# the module tosa-opt prints back is not read: written nowhere, and its constants elided
# (BERT-base's 830 MiB would otherwise come back through a pipe, to be decoded and dropped)
QUIET = ("--mlir-elide-elementsattrs-if-larger=16", "--mlir-elide-resource-strings-if-larger=16",
         "-o", os.devnull)


class ToolError(LegatoError):
    """A TOSA tool rejected a module or failed; the message carries its output."""


@dataclass(frozen=True)
class TosaTools:
    opt: Path        # tosa-opt
    python: Path     # an interpreter that imports tosa_reference_model

    @staticmethod
    def find(*venvs) -> "TosaTools | None":
        """From $LEGATO_TOSA_VENV when set (only there: an explicit choice), else the
        given venv directories or this interpreter."""
        candidates = [os.environ[ENV]] if os.environ.get(ENV) else [*venvs, sys.prefix]
        for venv in filter(None, candidates):
            bin_dir = Path(venv) / "bin"
            opt, python = bin_dir / "tosa-opt", bin_dir / "python"
            if opt.exists() and python.exists():
                return TosaTools(opt, python)
        return None

    def _opt(self, mlir_path: Path, *flags: str, name: str | None = None) -> None:
        proc = subprocess.run([str(self.opt), str(mlir_path), *flags, *QUIET],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            name = name or str(mlir_path)  # its messages are 'PATH:LINE:COLUMN: error: ...'
            errors = "\n".join(clip(line, MAX_LINE) for line in
                               proc.stderr.strip().replace(str(mlir_path), name).splitlines())
            raise ToolError(f"tosa-opt {' '.join(flags)} failed on {name}:\n{errors}")

    def validate(self, text, strict: bool = True, name: str | None = None) -> None:
        """tosa-opt --tosa-attach-target=... --tosa-validate for the profiles the module
        names (legato.tosa_profiles; pro_fp if none); raises ToolError if invalid (naming
        the module `name` in the error lines, rather than a temporary file)."""
        validate = STRICT if strict else "--tosa-validate"
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "module.mlir"
            write_mlir(path, text)
            profile = profile_of(text_of(text))
            self._opt(path, f"--tosa-attach-target={target(profile)}", validate,
                      name=name)

    def run_reference(self, text, inputs, validate: bool = False) -> list[np.ndarray]:
        """Serialize with tosa-opt and run the TOSA reference model on `inputs`; int64
        arrays are narrowed to the int32 the module takes (checked) and results marked as
        narrowed (res_attrs) come back as int64. With `validate`, the same tosa-opt call
        validates first (strictly), saving a process. A module of shape buckets runs the
        function whose parameters have the inputs' shapes."""
        text = bucket_text(text, inputs)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            write_mlir(tmp / "module.mlir", text)
            flatbuffer = tmp / "module.tosa"
            profile = profile_of(text_of(text))
            checks = (f"--tosa-attach-target={target(profile)}", STRICT) \
                if validate else ()
            self._opt(tmp / "module.mlir", *checks, "--tosa-serialize",
                      f"--tosa-flatbuffer-filename={flatbuffer}")
            for i, array in enumerate(narrow_inputs(inputs)):
                np.save(tmp / f"in{i}.npy", np.ascontiguousarray(array))
            proc = subprocess.run([str(self.python), str(RUNNER), str(tmp), str(len(inputs))],
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise ToolError(f"TOSA reference model failed:\n{proc.stderr.strip()}")
            outputs = sorted(tmp.glob("out*.npy"), key=lambda p: int(p.stem[3:]))
            return widen_results(text_of(text), [np.load(p) for p in outputs])


def find_tools() -> TosaTools:
    """The tools as the tests find them: $LEGATO_TOSA_VENV when set, else .venv-tosa here
    or in the source checkout, else this interpreter's; ToolsMissing says how to get them."""
    found = TosaTools.find(Path.cwd() / ".venv-tosa", CHECKOUT_VENV)
    if found is not None:
        return found
    where = f"{ENV}={os.environ[ENV]} has no bin/tosa-opt and bin/python" if \
        os.environ.get(ENV) else f"no tosa-opt in ${ENV}, ./.venv-tosa or {sys.prefix}"
    raise ToolsMissing(
        f"the TOSA tools (tosa-opt, the TOSA reference model) are not installed ({where}). "
        "In a legato checkout `make .venv-tosa/.installed` puts them in .venv-tosa, where "
        "legato finds them; elsewhere make a venv of their own (tosa-tools pins numpy<2.2 "
        "on Python 3.11, so it may not install beside legato), `pip install "
        f"legato-tosa-custom[tools]` there, and set {ENV} to that venv")


def validate_text(text, name: str = "module.mlir") -> None:
    """The "tosa" validator: strict TOSA 1.0 validation by tosa-opt."""
    find_tools().validate(text, name=name)


def run_text(text, inputs) -> list[np.ndarray]:
    """The "tosa" validator's runner: the TOSA reference model on `inputs`."""
    return find_tools().run_reference(text, list(inputs))
