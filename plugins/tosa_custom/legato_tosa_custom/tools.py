"""The official TOSA tools, driven from Python: tosa-opt validation and serialization, and
the TOSA reference model.

tosa-tools pins its own numpy, so it usually lives in a venv of its own (`make test`
creates `.venv-tosa`); the reference model runs there as a subprocess on .npy files.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from legato.errors import LegatoError

from .narrowing import narrow_inputs, widen_results

TARGET = "profiles=pro_fp level=8k specification_version=1.0"
STRICT = "--tosa-validate=strict-op-spec-alignment"
RUNNER = Path(__file__).with_name("_refrun.py")


class ToolError(LegatoError):
    """A TOSA tool rejected a module or failed; the message carries its output."""


@dataclass(frozen=True)
class TosaTools:
    opt: Path        # tosa-opt
    python: Path     # an interpreter that imports tosa_reference_model

    @staticmethod
    def find(*venvs) -> "TosaTools | None":
        """From $LEGATO_TOSA_VENV, the given venv directories, or this interpreter."""
        candidates = [os.environ.get("LEGATO_TOSA_VENV"), *venvs, sys.prefix]
        for venv in filter(None, candidates):
            bin_dir = Path(venv) / "bin"
            opt, python = bin_dir / "tosa-opt", bin_dir / "python"
            if opt.exists() and python.exists():
                return TosaTools(opt, python)
        return None

    def _opt(self, mlir_path: Path, *flags: str) -> str:
        proc = subprocess.run([str(self.opt), str(mlir_path), *flags], capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0:
            raise ToolError(f"tosa-opt {' '.join(flags)} failed on {mlir_path}:\n"
                            f"{proc.stderr.strip()}")
        return proc.stdout

    def validate(self, text: str, strict: bool = True) -> None:
        """tosa-opt --tosa-attach-target=... --tosa-validate; raises ToolError if invalid."""
        validate = STRICT if strict else "--tosa-validate"
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "module.mlir"
            path.write_text(text)
            self._opt(path, f"--tosa-attach-target={TARGET}", validate)

    def run_reference(self, text: str, inputs, validate: bool = False) -> list[np.ndarray]:
        """Serialize with tosa-opt and run the TOSA reference model on `inputs`; int64
        arrays are narrowed to the int32 the module takes (checked) and results marked as
        narrowed (res_attrs) come back as int64. With `validate`, the same tosa-opt call
        validates first (strictly), saving a process."""
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "module.mlir").write_text(text)
            flatbuffer = tmp / "module.tosa"
            checks = (f"--tosa-attach-target={TARGET}", STRICT) if validate else ()
            self._opt(tmp / "module.mlir", *checks, "--tosa-serialize",
                      f"--tosa-flatbuffer-filename={flatbuffer}")
            for i, array in enumerate(narrow_inputs(inputs)):
                np.save(tmp / f"in{i}.npy", np.ascontiguousarray(array))
            proc = subprocess.run([str(self.python), str(RUNNER), str(tmp), str(len(inputs))],
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise ToolError(f"TOSA reference model failed:\n{proc.stderr.strip()}")
            outputs = sorted(tmp.glob("out*.npy"), key=lambda p: int(p.stem[3:]))
            return widen_results(text, [np.load(p) for p in outputs])
