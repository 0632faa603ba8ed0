"""Getting zoo models into legato by both routes, and checking what comes out.

    module, ms = import_model("llama", "torch")   # torch.export -> legato.frontends.torch
    module, ms = import_model("llama", "onnx")    # torch.onnx.export(dynamo=True) -> .onnx
                                                   # -> legato.frontends.onnx
ONNX files are cached in `.cache/zoo/` (or $LEGATO_ZOO_CACHE), named by model and a key of
models.py, EXPORT_FORM and the torch / transformers / onnxscript versions, so a changed
config or exporter makes a new file and exporting (seconds per model) happens once per
machine.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np

from . import models

ROUTES = ("torch", "onnx")
REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LEGATO_ZOO_CACHE", REPO / ".cache" / "zoo"))


class ExportError(Exception):
    """PyTorch could not export a zoo model (a problem before legato sees it)."""


def _versions() -> str:
    import onnxscript
    import torch
    import transformers
    return f"torch {torch.__version__} transformers {transformers.__version__} " \
           f"onnxscript {onnxscript.__version__}"


EXPORT_FORM = "dynamo, opset default, one file"  # change when onnx_file's export changes


def cache_key(name: str) -> str:
    here = Path(models.__file__).parent
    source = b"".join((here / f).read_bytes()
                      for f in ("models.py", "spec.py", "wide.py", "defaults.py"))
    source += EXPORT_FORM.encode()
    digest = hashlib.sha256(source + _versions().encode() + name.encode())
    return digest.hexdigest()[:12]


def onnx_file(name: str) -> Path:
    """The zoo model's .onnx file (exported now unless cached), with static input shapes."""
    path = CACHE / f"{name}-{cache_key(name)}.onnx"
    if path.exists():
        return path
    import logging
    import torch
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision not installed"
    module, inputs = models.build(name, models.ZOO[name].onnx_attention or None)
    if models.ZOO[name].defaults:
        module = _flat(torch, module)
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / ".gitignore").write_text("# exported models, made again on demand\n*\n")
    partial = path.with_suffix(f".{os.getpid()}.part")
    try:
        program = torch.onnx.export(module, inputs, dynamo=True, verbose=False)
        program.save(str(partial), external_data=False)
    except Exception as err:  # noqa: BLE001 - the exporter raises many types
        partial.unlink(missing_ok=True)
        raise ExportError(f"torch.onnx.export failed for {name}: {_cause(err)}") from None
    partial.replace(path)  # atomic: a concurrent reader sees a whole file or none
    for stale in CACHE.glob(f"{name}-*.onnx"):  # exports of older configs or versions
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


def _flat(torch, module):
    """`module` returning its results' tensors as one tuple: an ONNX model's outputs are
    flat anyway, and torch.onnx.export fails on results that rebuild a DynamicCache
    (SpecViolationError in torch's decompositions, as torch.export's run_decompositions)."""
    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, x):
            return tuple(torch.utils._pytree.tree_leaves(self.module(x)))

    return Flat().eval()


def _cause(err: Exception) -> str:
    """torch.onnx's error without its boilerplate: the exception summary when it has one."""
    text = str(err)
    if "## Exception summary" in text:
        text = text.split("## Exception summary", 1)[1]
    return " ".join(text.split())[:300]


_WARM: set = set()  # routes whose one-time set-up (lazy imports, tables) is done


def import_model(name: str, route: str):
    """(legato Module, import milliseconds) of zoo model `name` by `route` ("torch" or
    "onnx"; the ONNX export itself is not timed). The first import of a route in a process
    runs twice, so its one-time set-up is not charged to one model."""
    if route in ROUTES and route not in _WARM:
        _WARM.add(route)
        _import(name, route)
    return _import(name, route)


def _import(name: str, route: str):
    if route == "torch":
        from legato.frontends import torch as frontend
        module, inputs = models.build(name)
        start = time.perf_counter()
        result = frontend.load(module, inputs)
    elif route == "onnx":
        from legato.frontends import onnx as frontend
        path = onnx_file(name)
        start = time.perf_counter()
        result = frontend.load(path)
    else:
        raise ValueError(f"route is one of {ROUTES}, not {route!r}")
    return result, (time.perf_counter() - start) * 1e3


def eager(name: str) -> tuple[list[np.ndarray], np.ndarray | list[np.ndarray]]:
    """(inputs as numpy arrays, the eager result) of zoo model `name`: one array, or for a
    model called with its defaults the list of its results' tensors in pytree order (the
    order torch.export returns them in)."""
    import torch
    module, inputs = models.build(name)
    with torch.no_grad():
        want = module(*inputs)
    if isinstance(want, torch.Tensor):
        return [t.numpy() for t in inputs], want.numpy()
    return [t.numpy() for t in inputs], [t.numpy() for t in torch.utils._pytree.tree_leaves(want)]


def rel_error(got, want) -> float:
    """max |got - want| / max(max |want|, 1): relative for large results, absolute for
    small ones; inf when the shapes differ or anything is not finite. Lists of results
    compare pairwise (the largest error; inf when the counts differ)."""
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return float("inf")
        return max((rel_error(g, w) for g, w in zip(got, want)), default=0.0)
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.isfinite(got).all():
        return float("inf")
    scale = max(float(np.abs(want).max(initial=0.0)), 1.0)
    return float(np.abs(got.astype(np.float64) - want).max(initial=0.0)) / scale


def first_line(err: BaseException, limit: int = 160) -> str:
    """The error as one short line: its type and the first line of its message (for the
    torch importer's list of missing ops, the first op)."""
    text = str(err).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    head = lines[0] if lines else ""
    if len(lines) > 1 and head.endswith(":"):
        head += " " + lines[1]
    head = f"{type(err).__name__}: {head}"
    return head if len(head) <= limit else head[:limit - 3] + "..."
