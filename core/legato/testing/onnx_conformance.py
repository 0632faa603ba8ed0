"""Hold the ONNX importer against the ONNX backend node tests.

    legato check-backend NAME --onnx     (one backend)
    python -m legato.testing.onnx_conformance [--backend B ...] [--op OP ...] [--failures]

Every node test case whose graph is made of one op type legato maps is imported, compiled
for each executing backend and run; its outputs must match the case's at its tolerances
(and in dtype and shape). Cases whose tensors have a dtype legato does not support, or that
are not tensors at all, are excluded with the reason. Inputs that feed shape-like operands
(Reshape's shape, Slice's starts, ...) are bound as constants first: legato has static
shapes, so such operands are fixed at import time.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from .. import api
from .outcomes import outcome_rows
from ..frontends.onnx import all_nodes, load
from ..frontends.onnx.convert import CONVERTERS, Refused
from ..ir import DTYPES


@dataclass(frozen=True)
class Outcome:
    op: str
    case: str
    backend: str
    status: str  # passed, failed, excluded
    reason: str = ""


EXPANDED = "(expanded)"  # cases whose graph is a function body of several mapped ops


def node_cases(ops=None) -> dict[str, list]:
    """ONNX op type -> its node test cases (graphs of that one op type) that legato maps;
    EXPANDED -> the cases made of several op types, all of them mapped."""
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators warn about their own data
        cases = load_model_tests(kind="node")
    table: dict[str, list] = defaultdict(list)
    for case in cases:
        types = {node.op_type for node in case.model.graph.node}
        if not types <= set(CONVERTERS):
            continue
        op = next(iter(types)) if len(types) == 1 else EXPANDED
        if ops is None or op in ops:
            table[op].append(case)
    return dict(table)


REFERENCE = "cpu_ref:kernels"  # unlegalized: cpu_ref's kernel of every op, composite or not


def executing_backends() -> list[str]:
    """Every executing backend (compiling for cpu_ref runs every decomposition), plus
    cpu_ref's own kernels of the high-level ops run without legalization."""
    names = [b for b in api.list_backends() if api.get_backend(b).executes]
    return names + ([REFERENCE] if "cpu_ref" in names else [])


def compile_for(module, target: str):
    return api.reference(module) if target == REFERENCE else api.compile(module, target)


def excluded_reason(model) -> str | None:
    """Why a case is out of scope: a dtype legato does not have, or a non-tensor type."""
    from onnx import TensorProto
    graph = model.graph
    elem_types = [t.data_type for t in graph.initializer]
    for value in list(graph.input) + list(graph.output):
        if not value.type.HasField("tensor_type"):
            return f"{value.type.WhichOneof('value')} types (legato has tensors only)"
        elem_types.append(value.type.tensor_type.elem_type)
    for node in graph.node:
        elem_types += [a.i for a in node.attribute if a.name in ("to", "output_dtype") and a.i]
        elem_types += [a.t.data_type for a in node.attribute if a.type == a.TENSOR]
    for elem_type in elem_types:
        name = TensorProto.DataType.Name(elem_type)
        if _legato_dtype(elem_type) not in DTYPES:
            return f"dtype {name} is not a legato dtype"
    return None


def _legato_dtype(elem_type: int) -> str | None:
    from onnx import helper
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - undefined or string types
        return None


def bind_constants(model, inputs):
    """The model with every input that feeds a constant-only operand made an initializer,
    and the arrays still to feed (in graph input order)."""
    from onnx import ModelProto, numpy_helper
    nodes = [node for _, node in all_nodes(model.graph)]  # control-flow bodies included
    slots = {name for node in nodes for i, name in enumerate(node.input)
             if i in CONVERTERS[node.op_type].const_inputs}
    grown = True
    while grown:  # what a constant operand is computed from, through bodies' outputs too
        grown = False
        for node in nodes:
            if node.op_type not in ("Shape", "Size") and slots.intersection(node.output):
                sources = set(node.input) | {out.name for attr in node.attribute
                                             if attr.type == attr.GRAPH for out in attr.g.output}
                grown = grown or not sources <= slots
                slots |= sources
    bound = ModelProto()
    bound.CopyFrom(model)
    del bound.graph.input[:]
    feeds = []
    for value, array in zip(model.graph.input, inputs):
        if value.name in slots:
            bound.graph.initializer.append(numpy_helper.from_array(array, value.name))
        else:
            bound.graph.input.append(value)
            feeds.append(array)
    return bound, feeds


def as_array(data) -> np.ndarray:
    """Test data arrives as numpy arrays or as TensorProtos (e.g. bfloat16)."""
    from onnx import TensorProto, numpy_helper
    return numpy_helper.to_array(data) if isinstance(data, TensorProto) else np.asarray(data)


LOW_PRECISION = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}  # machine epsilons


def compare(got, want, rtol: float, atol: float) -> str | None:
    """None when `got` matches `want` (dtype, shape and values at the tolerances).

    float16/bfloat16 results are compared at no less than 2 ulp of their dtype: legato's
    kernels compute in float64 and round once, ONNX's reference rounds every step."""
    got, want = np.asarray(got), as_array(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.dtype.name in LOW_PRECISION:
        rtol = max(rtol, 2 * LOW_PRECISION[want.dtype.name])
        got, want = got.astype(np.float64), want.astype(np.float64)
    if want.dtype.kind in "fc":
        try:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as err:
            return " ".join(str(err).split())[:300]
        return None
    return None if np.array_equal(got, want) else f"values differ: {got} vs {want}"


def run_case(op: str, case, backends) -> list[Outcome]:
    reason = excluded_reason(case.model)
    if reason:
        return [Outcome(op, case.name, b, "excluded", reason) for b in backends]
    outcomes = []
    for backend in backends:
        failure = None
        try:
            for inputs, expected in case.data_sets:
                failure = _run_once(op, case, backend, inputs, expected)
                if failure:
                    break
        except Refused as err:  # declined with a reason (random, dynamic control flow)
            outcomes.append(Outcome(op, case.name, backend, "excluded",
                                    f"refused: {' '.join(str(err).split())[:160]}"))
            continue
        outcomes.append(Outcome(op, case.name, backend, "failed" if failure else "passed",
                                failure or ""))
    return outcomes


# ops each of whose results is a sum over a whole axis: the expected data holds the float32
# rounding of the largest terms (test_dft_inverse's exact zeros read 1.9e-7 beside 54), so
# absolute errors count from a few float32 ulps of the largest result up
SUMMING_OPS = frozenset({"DFT", "STFT"})


def _atol(op: str, case, want) -> float:
    want = as_array(want)
    if op not in SUMMING_OPS or want.dtype != np.float32 or not want.size:
        return case.atol
    return max(case.atol, 4 * float(np.finfo(np.float32).eps) * float(np.abs(want).max()))


def _run_once(op: str, case, backend, inputs, expected) -> str | None:
    try:
        model, feeds = bind_constants(case.model, [as_array(a) for a in inputs])
        compiled = compile_for(load(model), backend)
        with np.errstate(all="ignore"):
            outputs = compiled(*feeds)
    except Refused:
        raise
    except Exception as err:  # noqa: BLE001 - a conformance run reports, never stops
        return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs, expected {len(expected)}"
    for i, (got, want) in enumerate(zip(outputs, expected)):
        problem = compare(got, want, case.rtol, _atol(op, case, want))
        if problem:
            return f"output {i}: {problem}"
    return None


def run(ops=None, backends=None) -> list[Outcome]:
    backends = backends or executing_backends()
    return [o for op, cases in sorted(node_cases(ops).items()) for case in cases
            for o in run_case(op, case, backends)]


def summary(outcomes, show_failures: bool = False) -> str:
    """One line per (op, backend): passed / failed / excluded, and why excluded."""
    lines = outcome_rows(outcomes, 24, 17)
    total = Counter(o.status for o in outcomes)
    lines.append(f"total: {total['passed']} passed, {total['failed']} failed, "
                 f"{total['excluded']} excluded")
    if show_failures:
        lines += [f"FAILED {o.case} [{o.backend}]: {o.reason}" for o in outcomes
                  if o.status == "failed"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", help="default: every executing one")
    parser.add_argument("--op", action="append", help="ONNX op types (default: all mapped)")
    parser.add_argument("--failures", action="store_true", help="list each failed case")
    args = parser.parse_args(argv)
    outcomes = run(args.op, args.backend)
    print(summary(outcomes, args.failures))
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
