"""Run onnx's C++ passes in a separate process, so a crash in them cannot take the caller
down.

The importer checks a model against the operator schemas before onnx's version converter
and shape inference see it, but those passes also index by attribute *values* (a Split
whose `num_outputs` differs from its outputs aborts shape inference). Every value of every
operator cannot be checked up front, so the passes run in a long-lived worker process
(`worker.py`), started on first use and restarted after a crash. The worker is sent
the model without the data of large tensors (shapes do not depend on weights); the
converter's result gets that data back by tensor name. The worker also answers the
operator schemas the importer's checks read (`worker_schemas`), so that onnx's schema table
is built in the worker alone.
"""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from ...ir.errors import LegatoError
from .worker import ANSWER, HEADER, read_exactly

WORKER = Path(__file__).with_name("worker.py")
LARGE_TENSOR = 1024   # elements; larger tensors are sent as dims and type only
# run the worker's file without putting its directory on sys.path, where this package's
# math.py and signal.py would shadow the standard library's modules
BOOT = "import sys; p = sys.argv[1]; exec(compile(open(p).read(), p, 'exec'), {'__name__': '__main__'})"


class _Worker:
    """The worker process of this process (a forked child starts its own)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.owner = None

    def ask(self, command: bytes, payload: bytes) -> tuple[int, bytes] | int:
        """(status, answer), or the worker's exit code when it died on this request."""
        with self.lock:
            process = self._running()
            try:
                process.stdin.write(HEADER.pack(command, len(payload)))
                process.stdin.write(payload)
                process.stdin.flush()
                status, size = ANSWER.unpack(read_exactly(process.stdout, ANSWER.size))
                return status, read_exactly(process.stdout, size)
            except (OSError, EOFError, ValueError):
                self.process = None
                return process.wait()

    def start(self) -> None:
        """Start the worker now, if it is not running and no request holds it, so that it
        starts while the caller reads and checks its model."""
        if self.lock.acquire(blocking=False):
            try:
                self._running()
            finally:
                self.lock.release()

    def _running(self) -> subprocess.Popen:
        if self.process is None or self.owner != os.getpid() or self.process.poll() is not None:
            path = os.pathsep.join(p for p in sys.path if p and Path(p) != WORKER.parent)
            env = dict(os.environ, PYTHONPATH=path)
            try:
                # -S: no site module (its .pth files' import hooks take most of a bare
                # interpreter's start); PYTHONPATH still finds the onnx package if needed
                self.process = subprocess.Popen([sys.executable, "-S", "-c", BOOT,
                                                 str(WORKER), _extension()],
                                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.DEVNULL, env=env)
            except OSError as err:
                raise LegatoError(f"cannot start the process that runs onnx's checks "
                                  f"({sys.executable}): {err}") from None
            self.owner = os.getpid()
        return self.process

    def forget(self) -> None:
        """In a forked child: the parent's worker and lock are the parent's, never used."""
        self.lock, self.process = threading.Lock(), None

    def close(self) -> None:
        process, self.process = self.process, None
        if process is not None and self.owner == os.getpid():
            process.stdin.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()


def _extension() -> str:
    """The file of onnx's C++ extension module, which the worker loads by itself."""
    try:
        from onnx import onnx_cpp2py_export
    except ImportError:
        return ""
    return getattr(onnx_cpp2py_export, "__file__", None) or ""


_WORKER = _Worker()
atexit.register(_WORKER.close)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WORKER.forget)


def start_worker() -> None:
    """Have the worker ready for a model about to be imported (see _Worker.start)."""
    _WORKER.start()


def run_isolated(command: bytes, model, what: str, failed: str, light: bool = False):
    """Shape inference (b"I", returns None) or version conversion (b"C", returns the
    converted ModelProto) of `model` in the worker. onnx's errors become a LegatoError
    "<failed>: <message>"; a worker that dies, one saying that `what` crashed. `light`:
    the model is a `without_large_data` copy already (it is sent as it is)."""
    import onnx
    light_model, stripped = (model, {}) if light else without_large_data(model)
    answer = _WORKER.ask(command, light_model.SerializeToString())
    del light_model
    if isinstance(answer, int):
        raise LegatoError(f"{what} crashed on this model ({describe(answer)}); the model "
                          "is malformed in a way legato's checks do not name")
    status, payload = answer
    if status:
        raise LegatoError(f"{failed}: {payload.decode(errors='replace')}")
    if command != b"C":
        return None
    converted = onnx.ModelProto.FromString(payload)
    for tensor in converted.graph.initializer:
        if tensor.name in stripped:
            tensor.CopyFrom(stripped[tensor.name])
    return converted


def worker_schemas(pairs: list) -> list | None:
    """worker.schema_fields of each (op type, opset) of the default domain (None where
    the op does not exist at that opset), read in the worker; None where the worker cannot
    answer (it will not start, or died): the caller then reads onnx's schemas itself."""
    try:
        answer = _WORKER.ask(b"S", json.dumps(pairs).encode())
    except LegatoError:   # the worker cannot start: shape inference will say so
        return None
    if isinstance(answer, int) or answer[0]:
        return None
    found = json.loads(answer[1])
    return found if isinstance(found, list) and len(found) == len(pairs) else None


def without_large_data(model):
    """(a copy of `model` whose large initializers hold no data, {name: original tensor})."""
    import onnx
    light, graph = onnx.ModelProto(), model.graph
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)   # local functions: no node can use them
    target = light.graph
    target.name = "graph"   # the model's own name need not even be valid UTF-8
    for field in ("node", "input", "output", "value_info"):
        getattr(target, field).extend(getattr(graph, field))
    stripped = {}
    for tensor in graph.initializer:
        if _elements(tensor) > LARGE_TENSOR:
            stripped[tensor.name] = tensor
            target.initializer.add(name=tensor.name, dims=tensor.dims,
                                   data_type=tensor.data_type)
        else:
            target.initializer.append(tensor)
    return light, stripped


def _elements(tensor) -> int:
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count


def describe(code: int) -> str:
    """A Popen return code: negative for a signal."""
    if code < 0:
        import signal
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
