"""Backend conformance: every legal op and every kernel of a backend, run on the samples
of `legato.testing.samples` and held against cpu_ref's kernels.

    # tests/test_conformance.py of a plugin
    from legato.testing import backend_conformance
    test_conformance = backend_conformance("my_backend")

or `legato check-backend my_backend`, which prints the same checks as one table.

An op whose condition names dtypes or attribute values is sampled per declared
combination (`legato.testing.declared`: each dtype crossed with each attribute branch),
so a float16 the backend declares is run as often as float32; a combination no
generator produces is named in the table rather than passed over.

For each sample the backend takes (its legality says so), a kernel is called with
read-only inputs and its result checked: a tuple of the op's results count, each a numpy
array (not a 0-d numpy scalar) of the inferred dtype and shape, within
`legato.ops.tolerance.error_bound` of cpu_ref. A kernel whose signature cannot take the
op's inputs and attributes is reported once. Ops an executing backend takes without a
kernel of its own run through `legato.compile`; on an emitting backend each legal call
must compile to an artifact with the call kept.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .. import api
from ..ir import CUSTOM_OP
from ..ir.builder import GraphBuilder
from ..ir.errors import LegatoError, clip
from ..legalization.backend_checks import signature_problem
from ..ops.tolerance import ROUNDING_OPS, error_bound
from .declared import MAX_COMBINATIONS, combinations, declares, draw
from .samples import DEFAULT_COUNT, SampleError, check_draw_args, samples as draw_samples

REFERENCE = "cpu_ref"
PROBLEMS = ("signature", "exception", "wrote input", "scalar", "dtype/shape", "mismatch",
            "no kernel", "no samples", "not emitted")
MAX_MESSAGES = 3   # per op: the first few problems, each with the sample it came from
MAX_COVERAGE_LINES = 40   # sampled combinations listed one a line up to this many


@dataclass
class OpResult:
    """What checking one op of a backend found."""

    op: str
    how: str = "kernel"       # kernel, fallback kernel (`kernel: fallback`), compiled or emitted
    ran: int = 0              # samples the backend took
    passed: int = 0
    problems: Counter = field(default_factory=Counter)
    messages: list = field(default_factory=list)
    # per declared combination (dtype, attribute branch): (label, samples taken, why none)
    coverage: list = field(default_factory=list)

    @property
    def unsampled(self) -> list:
        return [(label, why) for label, taken, why in self.coverage if not taken]

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: str, message: str) -> None:
        self.problems[problem] += 1
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(f"{problem}: {clip(message, 400)}")


def ops_to_check(backend, ops=None) -> list[str]:
    """`ops`, or every op the backend declares legal or has a kernel for (custom calls are
    decoded by the core, never run as such)."""
    if ops:
        return sorted(set(ops))
    kernels = set(backend.kernel_ops()) if backend.executes else set()
    return sorted((set(backend.legal) | kernels) - {CUSTOM_OP})


def check_backend(name: str, ops=None, seed: int = 0, count: int = DEFAULT_COUNT
                  ) -> list[OpResult]:
    """One OpResult per op of backend `name` (its legal ops and kernels, or `ops`)."""
    check_draw_args(seed, count)
    if isinstance(ops, str):
        raise LegatoError(f"ops must be a list of op names, got the string {ops!r:.60}")
    backend = api.get_backend(name)
    reference = api.get_backend(REFERENCE)
    kernels = set(backend.kernel_ops()) if backend.executes else set()
    return [_check_op(backend, reference, op, op in kernels, seed, count)
            for op in ops_to_check(backend, ops)]


def _check_op(backend, reference, op, has_kernel, seed, count) -> OpResult:
    how = "kernel" if has_kernel else "emitted" if not backend.executes else \
        "fallback kernel" if op in backend.borrowed else "compiled"
    result = OpResult(op, how)
    if declares(backend.legal.get(op)):
        taken = _declared_samples(backend, op, seed, count, result)
    else:
        try:
            drawn = draw_samples(op, seed, count)
        except SampleError as err:
            result.add("no samples", str(err))
            return result
        taken = [s for s in drawn if _takes(backend, s, op in backend.legal)]
    if how == "kernel" and not _signature_ok(backend, op, result):
        return result
    if how == "compiled" and not reference.has_kernel(op) and \
            api.get_op(op).decompose is None:
        result.add("no kernel", f"{backend.name} lists {op} as legal but has no kernel, and "
                                f"cpu_ref has neither a kernel nor a decomposition of it")
        return result
    for sample in taken:
        result.ran += 1
        check = _check_emitted if how == "emitted" else _check_executed
        if check(backend, reference, sample, result, how):
            result.passed += 1
    return result


def _declared_samples(backend, op, seed, count, result: OpResult) -> list:
    """`count` samples of each dtype and attribute branch the op's condition declares,
    those the backend takes; what each combination got goes to result.coverage."""
    taken = []
    combos = combinations(op, backend.legal[op])
    if len(combos) > MAX_COMBINATIONS:
        result.coverage.append((f"{op}: {len(combos) - MAX_COMBINATIONS} more combinations",
                                0, f"not drawn (at most {MAX_COMBINATIONS} per op)"))
    for combo in combos[:MAX_COMBINATIONS]:
        drawn, mine = draw(combo, seed, count, lambda s: _takes(backend, s, True))
        why = "" if mine else "no generator produces this combination" if not drawn else \
            f"{len(drawn)} drawn, none taken: {backend.why_not(drawn[0].call())}"
        result.coverage.append((combo.label(), len(mine), why))
        taken += mine
    return taken


def _takes(backend, sample, legal: bool) -> bool:
    """Whether the backend runs this sample natively: its legality says so; a kernel of
    an op not declared legal is run on float32 samples."""
    try:
        call = sample.call()
    except LegatoError:
        return False
    if legal:
        return backend.why_not(call) is None
    return all(a is None or a.dtype.kind != "f" or a.dtype == np.float32 for a in sample.inputs)


def _signature_ok(backend, op: str, result: OpResult) -> bool:
    """The registration check of the kernel's signature (backend_checks), reported here
    too for backends built without registering."""
    problem = signature_problem(backend, op, api.get_op(op))
    if problem:
        result.add("signature", problem)
    return problem is None


def _check_executed(backend, reference, sample, result: OpResult, how: str) -> bool:
    inputs = sample.read_only()
    try:
        with np.errstate(all="ignore"):
            if how == "kernel":
                got = backend.kernel(sample.op)(*inputs, **dict(sample.attrs))
            else:
                got = _compile_one(sample, backend.name)(*[a for a in inputs if a is not None])
    except Exception as err:  # noqa: BLE001 - a conformance run reports, never stops
        read_only = isinstance(err, ValueError) and "read-only" in str(err)
        result.add("wrote input" if read_only else "exception",
                   f"{sample.describe()}: {type(err).__name__}: {err}")
        return False
    got = got if isinstance(got, tuple) else (got,)
    if not _shapes_ok(sample, got, result):
        return False
    want = reference_outputs(reference, sample)
    for i, (g, w) in enumerate(zip(got, want)):
        problem = difference(sample.op, g, w)
        if problem:
            result.add("mismatch", f"{sample.describe()}: result {i}: {problem}")
            return False
    return True


def reference_outputs(reference, sample) -> tuple:
    """cpu_ref's results for the sample: its kernel, or for an op it has none of (a
    plugin's composite op) the op's decomposition compiled for it."""
    with np.errstate(all="ignore"):
        if reference.has_kernel(sample.op):
            want = reference.kernel(sample.op)(*sample.read_only(), **dict(sample.attrs))
        else:
            want = _compile_one(sample, reference.name)(
                *[a for a in sample.inputs if a is not None])
    return tuple(np.asarray(w) for w in (want if isinstance(want, tuple) else (want,)))


def _shapes_ok(sample, got: tuple, result: OpResult) -> bool:
    if len(got) != len(sample.outputs):
        result.add("dtype/shape", f"{sample.describe()}: {len(got)} results, expected "
                                  f"{len(sample.outputs)}")
        return False
    for i, (g, t) in enumerate(zip(got, sample.outputs)):
        if isinstance(g, np.generic):
            result.add("scalar", f"{sample.describe()}: result {i} is a numpy scalar "
                                 f"{type(g).__name__}, not a {t} array")
            return False
        if not isinstance(g, np.ndarray):
            result.add("dtype/shape", f"{sample.describe()}: result {i} is a "
                                      f"{type(g).__name__}, not a numpy array")
            return False
        if g.dtype.name != t.dtype or g.shape != t.shape:
            result.add("dtype/shape", f"{sample.describe()}: result {i} is "
                                      f"{g.dtype.name}{list(g.shape)}, expected {t}")
            return False
    return True


def difference(op: str, got: np.ndarray, want: np.ndarray) -> str | None:
    """None when `got` is within the op's error bound of the reference `want`: over the
    finite elements |got - want| / max(max |want|, 1) <= error_bound(op, dtype); NaN
    matches NaN and an infinity must match exactly. Integers are exact (one step apart
    allowed for the ops that round a float quotient). A shape or dtype other than the
    reference's is a difference too (numpy would broadcast a [1] against a [3])."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return (f"{got.dtype.name}{list(got.shape)} where the reference is "
                f"{want.dtype.name}{list(want.shape)}")
    if want.dtype.kind in "fc":
        g, w = got.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(w)
        if not np.array_equal(np.isnan(g), np.isnan(w)) or \
                not np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]):
            return "NaN or infinity where the reference has none (or the other way round)"
        if not finite.any():
            return None
        scale = max(float(np.max(np.abs(w[finite]))), 1.0)
        error = float(np.max(np.abs(g[finite] - w[finite]))) / scale
        bound = error_bound(op, want.dtype.name)
        return None if error <= bound else f"relative error {error:.3g} above the bound {bound:.3g}"
    slack = 1 if op in ROUNDING_OPS else 0
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64)) if got.size else np.zeros(0)
    return None if not diff.size or diff.max() <= slack else \
        f"{int((diff > slack).sum())} of {diff.size} elements differ"


def _compile_one(sample, backend: str):
    """The sample as a one-call model compiled for `backend`."""
    b = GraphBuilder()
    inputs = [None if a is None else b.input(f"x{i}", a.shape, a.dtype.name)
              for i, a in enumerate(sample.inputs)]
    out = b.call(sample.op, *inputs, **dict(sample.attrs))
    return api.compile(b.build(*(out if isinstance(out, tuple) else (out,))), backend)


def _check_emitted(backend, reference, sample, result: OpResult, how: str) -> bool:
    try:
        compiled = _compile_one(sample, backend.name)
    except LegatoError as err:
        result.add("not emitted", f"{sample.describe()}: {err}")
        return False
    except Exception as err:  # noqa: BLE001
        result.add("exception", f"{sample.describe()}: {type(err).__name__}: {err}")
        return False
    kept = [c.op for c in compiled.module.main.calls]
    # an empty module is a call a pass removed (an identity permutation, say)
    if not compiled.artifact or (kept and sample.op not in kept):
        result.add("not emitted", f"{sample.describe()}: compiled to {kept}, artifact "
                                  f"{clip(repr(compiled.artifact), 100)}")
        return False
    return True


def table(name: str, results: list[OpResult]) -> str:
    """One line per op: how it ran, samples passed of those taken, problems by kind."""
    lines = [f"backend {name}", f"{'op':<22}{'how':<10}{'passed':>8}  problems"]
    for r in results:
        problems = ", ".join(f"{k} x{n}" for k, n in sorted(r.problems.items())) or \
            ("ok" if r.ran else "ok (no sample taken)")
        if r.unsampled:
            problems += f"; {len(r.unsampled)} declared combination(s) not sampled"
        lines.append(f"{r.op:<22}{r.how:<10}{r.passed:>4}/{r.ran:<3}  {problems}")
    failed = [r for r in results if not r.ok]
    lines.append(f"total: {len(results)} ops, {len(failed)} failing, "
                 f"{sum(r.passed for r in results)}/{sum(r.ran for r in results)} samples "
                 "passed")
    for r in failed:
        lines += [f"  {r.op}: {m}" for m in r.messages]
    return "\n".join(lines + coverage_lines(results))


def coverage_lines(results: list[OpResult]) -> list[str]:
    """The declared combinations (each dtype and attribute branch of a condition) and
    how many samples of each the backend took; every one left unsampled is named, the
    sampled ones only when few enough to read."""
    rows = [(label, taken, why) for r in results for label, taken, why in r.coverage]
    if not rows:
        return []
    missing = [(label, why) for label, taken, why in rows if not taken]
    lines = [f"declared combinations: {len(rows) - len(missing)} of {len(rows)} sampled"]
    if len(rows) <= MAX_COVERAGE_LINES:
        lines += [f"  {label}: sampled {taken}" for label, taken, _ in rows if taken]
    lines += [f"  {label}: NOT SAMPLED, {why}" for label, why in missing]
    return lines


def backend_conformance(name: str, ops=None, seed: int = 0, count: int = DEFAULT_COUNT):
    """A pytest test function, parametrized by op, checking backend `name`:

        test_conformance = backend_conformance("my_backend")
    """
    import pytest

    try:
        params = ops_to_check(api.get_backend(name), ops)
    except LegatoError as err:  # not installed: one failing case that says so
        params = [f"<{err}>"]

    @pytest.mark.parametrize("op", params)
    def test_conformance(op):
        result, = check_backend(name, [op], seed, count)
        assert result.ok, f"backend {name}, op {op}:\n" + "\n".join(result.messages)

    test_conformance.__name__ = f"test_conformance_{name}"
    return test_conformance
