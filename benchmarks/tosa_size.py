"""TOSA emission at published size: seconds, peak memory and text size of tosa_custom's
artifact for the models of benchmarks/real_size.py (their cached ONNX exports).

    .venv/bin/python benchmarks/tosa_size.py [--models bert] [--weights auto|inline|resources]
                                             [--write] [--validate]

Per model, in a child process of its own (so its peak memory is its own):
  import s    legato's ONNX import
  compile s   legato.compile(module, tosa_custom): legalization and emission
  emit s      the emitter alone, run again on the legalized module
  peak MB     the process's peak resident memory through import and compile (VmHWM)
  emit MB     the peak during the second emission alone (VmHWM reset first), less the
              resident memory before it: what emission itself holds
  text MB     the artifact's MLIR text (its operations; large constants out of line are
              `dense_resource` handles), then the bytes of those constants
--write also times writing the artifact to a .mlir file (the text plus its resource
section), --validate times tosa-opt's validation of that file (the TOSA tools of
.venv-tosa). `--weights` picks tosa_custom's constant placement (see
legato_tosa_custom.resources): `inline` is every constant as hex in its op.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path.insert(0, str(REPO))

from benchmarks.real_size import MODELS, _peak_mb, model_file  # noqa: E402


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Start VmHWM again from the current resident size (Linux 4.0+)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def _backend(weights: str | None):
    if weights is None:
        return "tosa_custom"
    from legato_tosa_custom import backend
    return backend("pro_fp", name=f"tosa_custom_{weights}", weights=weights)


def _sizes(artifact) -> tuple[float, float]:
    text = getattr(artifact, "text", artifact)
    blobs = getattr(artifact, "resources", {})
    return len(text) / 2**20, sum(a.nbytes for a in blobs.values()) / 2**20


def measure(name: str, weights: str | None, write: bool, validate: bool) -> dict:
    import legato
    from legato.frontends import onnx as onnx_frontend
    start = time.perf_counter()
    module = onnx_frontend.load(str(model_file(name)))
    imported = time.perf_counter()
    compiled = legato.compile(module, _backend(weights))
    compiled_at = time.perf_counter()
    figures = {"import_s": imported - start, "compile_s": compiled_at - imported,
               "peak_mb": _peak_mb()}
    compiled.artifact = None
    emitter = compiled.backend.emitter
    before = _rss_mb()
    _reset_peak()
    start = time.perf_counter()
    artifact = emitter(compiled.module)
    figures["emit_s"] = time.perf_counter() - start
    figures["emit_mb"] = _peak_mb() - before
    figures["text_mb"], figures["resources_mb"] = _sizes(artifact)
    if write or validate:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.mlir"
            start = time.perf_counter()
            if hasattr(artifact, "write"):
                artifact.write(path)
            else:
                path.write_text(artifact)
            figures["write_s"] = time.perf_counter() - start
            figures["file_mb"] = path.stat().st_size / 2**20
            if validate:
                figures["validate_s"] = _validate(path)
    return figures


def _validate(path: Path) -> float:
    from legato_tosa_custom.tools import STRICT, TARGET, find_tools
    tools = find_tools()
    start = time.perf_counter()
    subprocess.run([str(tools.opt), str(path), f"--tosa-attach-target={TARGET}", STRICT],
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def child(name: str, args) -> dict:
    command = [sys.executable, __file__, "--child", name]
    command += ["--weights", args.weights] if args.weights else []
    command += ["--write"] * args.write + ["--validate"] * args.validate
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr.strip()[-2000:] or "child failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert")
    parser.add_argument("--weights", choices=["auto", "inline", "resources"],
                        help="tosa_custom's constant placement (default: the backend's own)")
    parser.add_argument("--write", action="store_true", help="time writing the .mlir file")
    parser.add_argument("--validate", action="store_true",
                        help="time tosa-opt validating the written file")
    parser.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.weights, args.write, args.validate)))
        return
    names = [m for m in args.models.split(",") if m]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"weights {args.weights or 'default'}")
    keys = ["import_s", "compile_s", "emit_s", "peak_mb", "emit_mb", "text_mb",
            "resources_mb"] + ["write_s", "file_mb"] * (args.write or args.validate) + \
        ["validate_s"] * args.validate
    print(f"{'model':14}" + "".join(f"{k:>13}" for k in keys))
    for name in names:
        try:
            got = child(name, args)
        except RuntimeError as err:
            print(f"{name:14} error: {err}")
            continue
        print(f"{name:14}" + "".join(f"{got[k]:13.2f}" for k in keys), flush=True)


if __name__ == "__main__":
    main()
