"""Hold the PyTorch importer against PyTorch's own OpInfo database.

    python -m legato.frontends.torch_conformance [--op NAME ...] [--backend B ...]
                                                 [--samples N] [--failures]

For every OpInfo whose ATen op the importer maps (by name), each sample input (float32 and
the integer and bool dtypes legato has) becomes a one-op module; it is exported with
torch.export, imported, compiled for each backend and compared with eager. Cases the
route cannot take are excluded with the reason (the exporter refuses it, a non-tensor
result, an ATen op the importer does not map, ...); `failed` counts wrong answers and
importer errors on mapped ops.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from ..errors import LegatoError
from .torch_ops import ATEN

BACKENDS = ("cpu_ref", "c_kernels")
DTYPES = ("float32", "int64", "int32", "bool")


@dataclass(frozen=True)
class Outcome:
    op: str
    case: str
    backend: str
    status: str  # passed, failed, excluded
    reason: str = ""


def mapped_packets() -> set[str]:
    """The ATen packet names ("add", "gelu") the importer has converters for."""
    return {name.split(".")[1] for name in ATEN}


def op_infos(names=None) -> list:
    """The OpInfos of ops the importer maps (or those named)."""
    from torch.testing._internal.common_methods_invocations import op_db
    packets = mapped_packets()
    chosen = []
    for info in op_db:
        packet = (getattr(info, "aten_name", None) or info.name).split(".")[-1]
        if (names and info.name in names) or (not names and packet in packets):
            chosen.append(info)
    return chosen


def _module(torch, op, sample):
    """A module calling op(input, *args, **kwargs) on the sample's tensors (its other
    arguments fixed), and those tensors."""
    args = [sample.input, *sample.args]
    slots = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    kwargs = dict(sample.kwargs)

    class Call(torch.nn.Module):
        def forward(self, *tensors):
            full = list(args)
            for i, t in zip(slots, tensors):
                full[i] = t
            return op(*full, **kwargs)
    return Call(), [args[i] for i in slots]


def run_case(info, sample, backends, label: str) -> list[Outcome]:
    import torch

    import legato
    from . import torch as frontend
    module, tensors = _module(torch, info.op, sample)

    def every(status, reason=""):
        return [Outcome(info.name, label, b, status, reason) for b in backends]
    if not tensors:
        return every("excluded", "no tensor input")
    try:
        with torch.no_grad():
            want = module(*tensors)
    except Exception as err:  # noqa: BLE001 - the sample itself does not run
        return every("excluded", f"eager: {type(err).__name__}")
    wants = [want] if isinstance(want, torch.Tensor) else list(want) \
        if isinstance(want, (tuple, list)) else None
    if not wants or not all(isinstance(w, torch.Tensor) for w in wants):
        return every("excluded", "a result that is not tensors")
    if any(str(w.dtype).removeprefix("torch.") not in legato.ir.DTYPES for w in wants):
        return every("excluded", f"result dtype {wants[0].dtype}")
    try:
        mod = frontend.load(module, tensors)
    except LegatoError as err:
        text = " ".join(str(err).split())
        if "could not export" in text:
            return every("excluded", "torch.export refuses it")
        if "cannot import" in text:
            missing = sorted(set(w for w in text.split() if w.startswith("aten.")))
            return every("excluded", "unmapped " + ", ".join(m.rstrip(":") for m in missing))
        return every("failed", f"import: {text[:200]}")
    arrays = [t.detach().numpy() for t in tensors]
    outcomes = []
    for backend in backends:
        try:
            got = legato.compile(mod, backend)(*arrays)
            got = got if isinstance(got, tuple) else (got,)
            if info.name in SELECTIONS and len(got) == 2:  # ties: any index of an equal value
                got = (got[0], _selected(arrays[0], got[1], _dim(info.name, sample)))
                wants = [wants[0], wants[0]]
            problem = next((p for g, w in zip(got, wants)
                            if (p := _compare(g, w.detach().numpy()))), None)
            if len(got) != len(wants):
                problem = f"{len(got)} results, eager has {len(wants)}"
        except Exception as err:  # noqa: BLE001 - any failure of a mapped op counts
            problem = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
        outcomes.append(Outcome(info.name, label, backend,
                                "failed" if problem else "passed", problem or ""))
    return outcomes


# ops returning (values, indices) whose order of equal values PyTorch leaves open: their
# indices are checked by the values they select
SELECTIONS = ("topk", "sort", "max", "min", "kthvalue", "mode", "median")


def _dim(name: str, sample) -> int:
    args = list(sample.args)
    position = 1 if name == "topk" else 0
    dim = sample.kwargs.get("dim", args[position] if len(args) > position and
                            isinstance(args[position], int) and
                            not isinstance(args[position], bool) else -1)
    return dim


def _selected(data, indices, dim: int):
    data = np.asarray(data)
    if data.ndim == 0:
        return data.copy()
    return np.take_along_axis(data, np.asarray(indices), axis=dim)


def _compare(got, want) -> str | None:
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got {got.dtype}{list(got.shape)}, eager {want.dtype}{list(want.shape)}"
    if want.dtype.kind in "biu":
        return None if np.array_equal(got, want) else "integer values differ"
    try:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
    except AssertionError as err:
        return " ".join(str(err).split())[:200]
    return None


def run(names=None, backends=BACKENDS, samples: int = 4) -> list[Outcome]:
    import torch
    outcomes = []
    for info in op_infos(names):
        supported = {str(d).removeprefix("torch.") for d in info.supported_dtypes("cpu")}
        for dtype in DTYPES:
            if dtype not in supported:
                continue
            try:
                cases = list(info.sample_inputs("cpu", getattr(torch, dtype),
                                                requires_grad=False))[:samples]
            except Exception:  # noqa: BLE001 - a sample generator failing on this dtype
                continue
            for k, sample in enumerate(cases):
                outcomes += run_case(info, sample, backends, f"{dtype}#{k}")
    return outcomes


def summary(outcomes) -> list[str]:
    table = defaultdict(Counter)
    why = defaultdict(Counter)
    for o in outcomes:
        table[(o.op, o.backend)][o.status] += 1
        if o.status == "excluded":
            why[(o.op, o.backend)][o.reason] += 1
    lines = [f"{'op':28} {'backend':10} {'passed':>6} {'failed':>6} {'excluded':>8}  why excluded"]
    for (op, backend), counts in sorted(table.items()):
        reasons = "; ".join(f"{r} (x{n})" for r, n in why[(op, backend)].most_common())
        lines.append(f"{op:28} {backend:10} {counts['passed']:6} {counts['failed']:6} "
                     f"{counts['excluded']:8}  {reasons}")
    total = Counter(o.status for o in outcomes)
    lines.append(f"total: {total['passed']} passed, {total['failed']} failed, "
                 f"{total['excluded']} excluded")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", help="OpInfo name (default: every mapped op)")
    parser.add_argument("--backend", action="append", help="backend (default: cpu_ref, "
                                                          "c_kernels)")
    parser.add_argument("--samples", type=int, default=4, help="samples per op and dtype")
    parser.add_argument("--failures", action="store_true", help="list every failure")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcomes = run(args.op, tuple(args.backend or BACKENDS), args.samples)
    print("\n".join(summary(outcomes)))
    if args.failures:
        for o in outcomes:
            if o.status == "failed":
                print(f"FAILED {o.op} {o.case} [{o.backend}]: {o.reason}")
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
