"""Hold the PyTorch importer against PyTorch's own OpInfo database.

    python -m legato.testing.torch_conformance [--op NAME ...] [--backend B ...]
        [--dtype D ...] [--max-samples N] [--max-seconds S] [--shard I/N] [--failures]
        [--json OUT]
    python -m legato.testing.torch_conformance --merge OUT1 OUT2 ... [--failures]

Each OpInfo of `op_db` has its sample inputs (float32 and the integer and bool dtypes
legato has) wrapped in a one-op module: tensor arguments become inputs, the others are
fixed. The module is exported with torch.export and decomposed as the importer does; a
sample whose program uses an ATen op the importer does not map is excluded as not mapped
(an op none of whose samples map is not mapped at all). Every other sample is imported,
compiled for each backend, run and compared with eager: floats within the error bound of
the legato ops it imported to (NaN equals NaN), integers and bools exactly; the results
of torch.empty and kin, uninitialised memory, by shape and dtype only.

A case is excluded only for a named reason outside the importer: the sample does not run
eagerly, torch.export refuses it, a dtype legato lacks, a result that is not tensors, a
Python value as the input (factories), or an ATen op legato refuses by design (random, backward,
data-dependent shape: the importer's error says "refused"). Any other importer error, a
compile or run error and a wrong answer count as failed. Nothing is cached or written
except the optional `--json` report.
"""
from __future__ import annotations

import argparse
import functools
import json
import operator
import sys
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from ..frontends.torch.importer import flat_items
from ..ir.errors import LegatoError
from .outcomes import outcome_rows

BACKENDS = ("cpu_ref", "c_kernels")
DTYPES = ("float32", "int64", "int32", "int8", "uint8", "bool")  # --dtype float64 adds one
NOT_MAPPED = "not mapped"
REFUSED = "refused by design"
WHOLE_OP = (NOT_MAPPED, REFUSED)  # reasons of a first sample that exclude the whole op


@dataclass(frozen=True)
class Outcome:
    op: str
    case: str  # "<dtype>#<sample index>", or "-" for the op as a whole
    backend: str
    status: str  # passed, failed, excluded
    reason: str = ""


class Excluded(Exception):
    """A case outside the route, with the reason."""


def _module(torch, op, sample):
    """A module calling op(input, *args, **kwargs) with the sample's tensors (lists of
    tensors and keyword tensors included) as its inputs, its other arguments fixed; and
    those tensors."""
    args, kwargs = [sample.input, *sample.args], dict(sample.kwargs)
    names = sorted(kwargs)
    tensors = [t for t in flat_items([args, [kwargs[k] for k in names]])
               if isinstance(t, torch.Tensor)]

    def rebuild(items, feed):
        if isinstance(items, (list, tuple)):
            return type(items)(rebuild(i, feed) for i in items)
        return next(feed) if isinstance(items, torch.Tensor) else items

    class Call(torch.nn.Module):
        def forward(self, *inputs):
            feed = iter(inputs)
            full = rebuild(list(args), feed)
            named = dict(zip(names, rebuild([kwargs[k] for k in names], feed)))
            return op(*full, **named)
    return Call(), tensors


def _export(torch, module, tensors):
    """The module exported and decomposed as the importer does it."""
    from ..frontends.torch.importer import decomposition_table
    try:
        program = torch.export.export(module, tuple(tensors))
    except Exception as err:  # noqa: BLE001 - export raises many error types
        raise Excluded(f"export failed (torch's own): {type(err).__name__}") from None
    try:
        return program.run_decompositions(decomposition_table())
    except Exception as err:  # noqa: BLE001 - PyTorch's decompositions of the sample
        raise Excluded(f"export failed (torch's decomposition): {type(err).__name__}") \
            from None


def _reuse_cia_op_set() -> None:
    """Make torch.export's run_decompositions list the registered CompositeImplicitAutograd
    ops once per process instead of once per call (a walk over every op namespace, a third
    of each sample's time); the set only grows when a library registers new ops, which no
    sample does."""
    from torch.export import exported_program
    collect = exported_program._collect_all_valid_cia_ops
    if not hasattr(collect, "cache_info"):
        exported_program._collect_all_valid_cia_ops = functools.lru_cache(maxsize=1)(collect)


def aten_ops(program) -> set[str]:
    """The ATen ops an exported program calls."""
    return {str(n.target) for n in program.graph_module.graph.nodes
            if n.op == "call_function" and n.target is not operator.getitem}


def _wanted(torch, module, tensors, uninitialised: bool = False):
    """Eager's results as numpy arrays (or Excluded); `uninitialised`: results whose values
    are whatever the memory held, so not checked for changing from run to run."""
    import legato
    try:
        with torch.no_grad():
            want = module(*tensors)
    except Exception as err:  # noqa: BLE001 - the sample itself does not run
        raise Excluded(f"sample fails eagerly: {type(err).__name__}") from None
    wants = [want] if isinstance(want, torch.Tensor) else list(want) \
        if isinstance(want, (tuple, list)) else []
    if not wants or not all(isinstance(w, torch.Tensor) for w in wants):
        raise Excluded("a result that is not tensors")
    for t in [*tensors, *wants]:
        if t.layout != torch.strided:
            raise Excluded(f"{t.layout} tensors (legato has dense tensors)")
        if str(t.dtype).removeprefix("torch.") not in legato.ir.DTYPES or \
                t.dtype == torch.bfloat16:  # numpy has no bfloat16 to compare in
            raise Excluded(f"dtype legato lacks: {str(t.dtype).removeprefix('torch.')}")
    if uninitialised:
        return [w.detach().numpy() for w in wants]
    with torch.no_grad():
        again = module(*tensors)
    again = [again] if isinstance(again, torch.Tensor) else list(again)
    if not all(torch.equal(a, w) or (a.is_floating_point() and torch.allclose(
            a, w, rtol=0, atol=0, equal_nan=True)) for a, w in zip(again, wants)):
        raise Excluded("random op: eager results differ from run to run")
    return [w.detach().numpy() for w in wants]


def run_case(info, sample, backends, label: str) -> list[Outcome]:
    """One sample through export, import, compile and run on each backend."""
    import torch

    def every(status, reason=""):
        return [Outcome(info.name, label, b, status, reason) for b in backends]
    if not isinstance(sample.input, torch.Tensor) and not any(
            isinstance(t, torch.Tensor) for t in flat_items([sample.input])):
        return every("excluded", "no tensor input (a factory or a Python scalar input: "
                     "not exercised by this harness)")
    module, tensors = _module(torch, info.op, sample)
    if _reads_outside(torch, module, tensors):
        return every("excluded", "eager reads storage outside its input (a partial view "
                     "of a larger storage, which an exported program does not see)")
    try:
        wants = _wanted(torch, module, tensors, info.name in UNINITIALISED)
        program = _export(torch, module, tensors)
        _check_mapped(aten_ops(program))
    except Excluded as why:
        return every("excluded", str(why))
    try:
        mod = _import(program)
    except LegatoError as err:
        text = " ".join(str(err).split())
        if "(refused:" in text:
            return every("excluded", f"{REFUSED}: {_refusal(text)}")
        return every("failed", f"import: {text[:240]}")
    except Exception as err:  # noqa: BLE001 - a converter crashing is a failure too
        return every("failed", f"import: {type(err).__name__}: {str(err)[:200]}")
    arrays = [t.detach().numpy() for t in tensors]
    return [Outcome(info.name, label, backend, *_verdict(info, sample, mod, backend,
                                                           arrays, wants))
            for backend in backends]


def _reads_outside(torch, module, tensors) -> bool:
    """Whether eager's results change when the inputs that view part of a larger storage
    are compact copies: as_strided reads the storage, not the view's values."""
    if not any(t.layout == torch.strided and (t.storage_offset() or t.untyped_storage()
               .nbytes() != t.numel() * t.element_size()) for t in tensors):
        return False
    with torch.no_grad():
        try:
            seen = module(*tensors)
        except Exception:  # noqa: BLE001 - _wanted reports a sample that does not run
            return False
        try:
            compact = module(*(t.clone() for t in tensors))
        except Exception:  # noqa: BLE001 - it reads past the end of the compact copy
            return True
    seen, compact = ([r] if isinstance(r, torch.Tensor) else list(r) for r in (seen, compact))
    return not all(isinstance(a, torch.Tensor) and a.shape == b.shape and
                   torch.equal(a, b) for a, b in zip(seen, compact))


def _refusal(text: str) -> str:
    """The reason in an importer error's "(refused: <reason>)", parentheses included."""
    reason, depth = text.split("(refused:", 1)[1], 1
    for end, char in enumerate(reason):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return reason[:end].strip()
    return reason.strip()


def _check_mapped(ops: set[str]) -> None:
    """Excluded when the program calls an ATen op the importer has no converter for: one
    it refuses by design, or one not mapped (yet), named."""
    from ..frontends.torch.ops import ATEN, refusal
    missing = sorted(ops - set(ATEN))
    for op in missing:
        if refusal(op):
            raise Excluded(f"{REFUSED}: {op} is {refusal(op)}")
    if missing:
        some = "" if ops & set(ATEN) else f"{NOT_MAPPED}: "
        raise Excluded(f"{some}needs {', '.join(missing)}, which the importer does not map")


def _import(program):
    from ..frontends.torch.importer import _Importer
    return _Importer(program).run()


def _verdict(info, sample, mod, backend, arrays, wants) -> tuple[str, str]:
    import legato
    try:
        with np.errstate(all="ignore"):
            got = legato.compile(mod, backend)(*arrays)
    except Exception as err:  # noqa: BLE001 - any failure of a mapped op counts
        return "failed", f"{backend}: {type(err).__name__}: {' '.join(str(err).split())[:200]}"
    got = list(got) if isinstance(got, tuple) else [got]
    if len(got) != len(wants):
        return "failed", f"{len(got)} results, eager has {len(wants)}"
    if info.name in SELECTIONS and len(got) == 2:  # ties: any index of an equal value
        got[1] = _selected(arrays[0], got[1], _dim(info.name, sample))
        wants = [wants[0], _selected(arrays[0], wants[1], _dim(info.name, sample))]
    if info.name == "argsort":  # indices alone: checked by the values they select
        got[0], wants = _selected(arrays[0], got[0], _dim(info.name, sample)), \
            [_selected(arrays[0], wants[0], _dim(info.name, sample))]
    ops = [c.op for c in mod.main.calls]
    for i, (g, w) in enumerate(zip(got, wants)):
        problem = _type_problem(np.asarray(g), w) if info.name in UNINITIALISED else \
            compare(ops, np.asarray(g), w)
        if problem:
            return "failed", f"result {i}: {problem}"
    return "passed", ""


# ops whose results are uninitialised memory (torch.empty and kin): their values are
# whatever the allocator held, so only their shapes and dtypes are compared
UNINITIALISED = ("empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                 "empty_permuted")


# ops returning (values, indices) whose order of equal values PyTorch leaves open: their
# indices are checked by the values they select
SELECTIONS = ("topk", "sort", "max", "min", "kthvalue", "mode", "median", "max.reduction_with_dim",
              "min.reduction_with_dim")


def _dim(name: str, sample) -> int:
    args = list(sample.args)
    position = 1 if name in ("topk", "kthvalue") else 0  # after k
    return sample.kwargs.get("dim", args[position] if len(args) > position and
                             isinstance(args[position], int) and
                             not isinstance(args[position], bool) else -1)


def _selected(data, indices, dim: int):
    """The values `indices` select along `dim` (a reduction's indices without keepdim
    too)."""
    data, indices = np.asarray(data), np.asarray(indices)
    reduced = indices.ndim == data.ndim - 1
    if data.ndim == 0 or not (reduced or indices.ndim == data.ndim):
        return indices
    index = np.expand_dims(indices, dim) if reduced else indices
    values = np.take_along_axis(data, index.astype(np.int64), axis=dim)
    return np.squeeze(values, dim) if reduced else values


def compare(ops: list[str], got: np.ndarray, want: np.ndarray) -> str | None:
    """None when `got` matches eager's `want`: same dtype and shape, and values within
    the loosest error bound of the legato ops the sample imported to (exact for integers
    and bools, NaN equal to NaN)."""
    from ..ops.tolerance import error_bound
    from . import difference
    problem = _type_problem(got, want)
    if problem:
        return problem
    if want.dtype.kind not in "fc":
        return None if np.array_equal(got, want) else \
            f"{int((got != want).sum())} of {want.size} values differ"
    loosest = max(ops, key=lambda op: error_bound(op, want.dtype.name), default=None)
    if loosest is None:  # no call: the module returns an input or a constant
        return None if np.array_equal(got, want, equal_nan=True) else "values differ"
    return difference(loosest, got, want)


def _type_problem(got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got {got.dtype}{list(got.shape)}, eager {want.dtype}{list(want.shape)}"
    return None


def op_infos(names=None) -> list:
    """The OpInfos named (default: all of op_db)."""
    from torch.testing._internal.common_methods_invocations import op_db
    return [info for info in op_db if not names or info.name in names
            or f"{info.name}.{info.variant_test_name}" in names]


def _name(info) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


# (OpInfo, dtype) pairs whose eager results come from an integer kernel of torch's own
# that no float formula reproduces (the importer refuses linear resizes of integers; the
# bicubic one reaches it already decomposed into integer arithmetic)
UINT8_LINEAR = ("torch's uint8 linear resize rounds fixed-point weights to uint8 after "
                "each axis (legato resizes floats only)")
OUT_OF_SCOPE = {("nn.functional.interpolate.bilinear", "uint8"): UINT8_LINEAR,
                ("nn.functional.upsample_bilinear", "uint8"): UINT8_LINEAR,
                ("nn.functional.interpolate.bicubic", "uint8"): (
                    "torch's uint8 bicubic kernel rounds a few values differently from its "
                    "own decomposition, which the exported program holds (legato computes "
                    "that program exactly)")}


def run_op(info, backends, dtypes, max_samples: int) -> list[Outcome]:
    """Every sample of one OpInfo (at most max_samples per dtype)."""
    import torch
    if "backward" in info.name:  # PyTorch decomposes some into forward ops, which map
        return [Outcome(_name(info), "-", b, "excluded", f"{REFUSED}: a backward op "
                        "(legato imports inference graphs)") for b in backends]
    supported = {str(d).removeprefix("torch.") for d in info.supported_dtypes("cpu")}
    outcomes = []
    for dtype in dtypes:
        if dtype not in supported:
            continue
        if (_name(info), dtype) in OUT_OF_SCOPE:
            outcomes += [Outcome(_name(info), f"{dtype}#-", b, "excluded",
                                 OUT_OF_SCOPE[_name(info), dtype]) for b in backends]
            continue
        try:
            samples = info.sample_inputs("cpu", getattr(torch, dtype), requires_grad=False)
            cases = [s for _, s in zip(range(max_samples), samples)]
        except Exception:  # noqa: BLE001 - the sample generator fails on this dtype
            continue
        for k, sample in enumerate(cases):
            try:
                found = run_case(info, sample, backends, f"{dtype}#{k}")
            except Exception as err:  # noqa: BLE001 - reported, so the table still prints
                found = [Outcome(info.name, f"{dtype}#{k}", b, "failed",
                                 f"harness: {type(err).__name__}: {str(err)[:160]}")
                         for b in backends]
            outcomes += [Outcome(_name(info), o.case, o.backend, o.status, o.reason)
                         for o in found]
            if len(outcomes) == len(backends) and outcomes[0].reason.startswith(WHOLE_OP):
                # its first sample maps no ATen op, or one refused by design: next op
                return [Outcome(_name(info), "-", b, "excluded", outcomes[0].reason)
                        for b in backends]
    return outcomes


def run(names=None, backends=BACKENDS, dtypes=DTYPES, max_samples: int = 4,
        max_seconds: float | None = None, progress: bool = False,
        shard: tuple[int, int] = (1, 1)) -> list[Outcome]:
    """The outcomes of the OpInfos named (default: all), or of the shard[0]-th of shard[1]
    consecutive parts of them."""
    start, outcomes = time.monotonic(), []
    infos = op_infos(names)
    _reuse_cia_op_set()
    part, parts = shard
    infos = infos[(part - 1) * len(infos) // parts:part * len(infos) // parts]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in infos:
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                outcomes += [Outcome(_name(info), "-", b, "excluded", NOT_RUN)
                             for b in backends]
                continue
            outcomes += run_op(info, backends, dtypes, max_samples)
            if progress:
                print(f"{time.monotonic() - start:6.0f}s {_name(info)}", file=sys.stderr)
    return outcomes


def _is_not_mapped(o: Outcome) -> bool:
    return o.case == "-" and o.reason.startswith(NOT_MAPPED)


def summary(outcomes, show_failures: bool = False) -> str:
    """One line per mapped (op, backend): samples passed / failed / excluded and why
    excluded; then the ops not mapped, the totals, and (asked) every failure."""
    unmapped = sorted({(o.op, o.reason.split("needs ")[-1].split(", which")[0])
                       for o in outcomes if _is_not_mapped(o)})
    lines = outcome_rows([o for o in outcomes if not _is_not_mapped(o)], 34, 11)
    if unmapped:
        lines.append(f"excluded, {NOT_MAPPED} (no ATen op of their first sample maps):")
        lines += [f"  {op}: {why}" for op, why in unmapped]
    lines += totals(outcomes)
    if show_failures:
        lines += [f"FAILED {o.op} {o.case} [{o.backend}]: {o.reason}" for o in outcomes
                  if o.status == "failed"]
    return "\n".join(lines)


def totals(outcomes) -> list[str]:
    """Samples by status, and ops by verdict: failed if any sample failed, passed if some
    passed and none failed, excluded otherwise."""
    by_op: dict = defaultdict(set)
    for o in outcomes:
        by_op[o.op].add(o.status)
    verdicts = Counter("failed" if "failed" in s else "passed" if "passed" in s
                       else "excluded" for s in by_op.values())
    samples = Counter(o.status for o in outcomes if o.case != "-")
    return [f"ops: {verdicts['passed']} passed, {verdicts['failed']} failed, "
            f"{verdicts['excluded']} excluded (of {len(by_op)})",
            f"samples x backends: {samples['passed']} passed, {samples['failed']} failed, "
            f"{samples['excluded']} excluded"]


NOT_RUN = "not run: --max-seconds spent"


def merged(paths) -> list[Outcome]:
    """The outcomes of --json reports as one table: an op's outcomes from the first report
    that ran it (one that stopped before it, or a later one that ran it again, adds none)."""
    reports = []
    for path in paths:
        with open(path) as report:
            reports.append([Outcome(**o) for o in json.load(report)])
    owner: dict[str, int] = {}  # op -> the report its outcomes come from
    for ran in (True, False):  # ops no report ran: the first report's "not run"
        for k, report in enumerate(reports):
            for o in report:
                if ran is not (o.reason == NOT_RUN):
                    owner.setdefault(o.op, k)
    return [o for k, report in enumerate(reports) for o in report if owner[o.op] == k]


def _shard(text: str) -> tuple[int, int]:
    part, _, parts = text.partition("/")
    if not (part.isdigit() and parts.isdigit() and 1 <= int(part) <= int(parts)):
        raise argparse.ArgumentTypeError(f"--shard {text!r} is not I/N with 1 <= I <= N")
    return int(part), int(parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", help="OpInfo name (default: all of op_db)")
    parser.add_argument("--backend", action="append", help="default: cpu_ref, c_kernels")
    parser.add_argument("--dtype", action="append", help=f"default: {', '.join(DTYPES)}")
    parser.add_argument("--max-samples", type=int, default=4, help="samples per op and dtype")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop starting new ops after this long (the rest: excluded)")
    parser.add_argument("--shard", metavar="I/N", type=_shard, default=(1, 1),
                        help="run only the I-th of N consecutive parts of the ops")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="print the table of --json reports (of shards) instead")
    parser.add_argument("--failures", action="store_true", help="list every failed case")
    parser.add_argument("--progress", action="store_true", help="each op's name on stderr")
    parser.add_argument("--json", metavar="OUT", help="write every outcome to OUT")
    args = parser.parse_args(argv)
    if args.merge:
        outcomes = merged(args.merge)
    else:
        outcomes = run(args.op, tuple(args.backend or BACKENDS), tuple(args.dtype or DTYPES),
                       args.max_samples, args.max_seconds, args.progress, args.shard)
    print(summary(outcomes, args.failures))
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(o) for o in outcomes], out, indent=1)
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
