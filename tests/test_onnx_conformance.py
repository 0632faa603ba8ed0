"""The ONNX importer against the ONNX backend node tests, on every executing backend.

`legato check-backend NAME --onnx` (or `python -m legato.testing.onnx_conformance`) prints the
per-op table these tests check.
"""
from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from legato.testing import onnx_conformance as conformance  # noqa: E402
from legato.frontends.onnx.convert import CONVERTERS  # noqa: E402

ISSUE_OPS = """Add Sub Mul Div Pow Max Min Equal Less Greater Not Where Neg Abs Exp Log Sqrt
Reciprocal Tanh Sigmoid Erf Relu LeakyRelu Gelu Clip Cast MatMul Gemm Conv MaxPool AveragePool
GlobalAveragePool BatchNormalization LayerNormalization RMSNormalization GroupNormalization
InstanceNormalization Softmax LogSoftmax Reshape Transpose Concat Split Slice Gather Expand
Flatten Squeeze Unsqueeze ReduceSum ReduceMean ReduceMax ReduceMin ArgMax Pad Constant Identity
Shape Attention QuantizeLinear DequantizeLinear QLinearConv""".split()


@pytest.fixture(scope="module")
def outcomes():
    return conformance.run()


def test_every_op_of_the_issue_is_mapped():
    assert [op for op in ISSUE_OPS if op not in CONVERTERS] == []


@pytest.mark.parametrize("op", sorted(CONVERTERS) + [conformance.EXPANDED])
def test_op_conformance(outcomes, op):
    mine = [o for o in outcomes if o.op == op]
    failed = [f"{o.case} [{o.backend}]: {o.reason}" for o in mine if o.status == "failed"]
    assert not failed, "\n".join(failed)
    for o in mine:  # exclusions are only for what legato does not have
        assert o.status != "excluded" or "not a legato dtype" in o.reason \
            or "legato has tensors only" in o.reason or o.reason.startswith("refused: "), o


def test_each_issue_op_passes_cases_on_every_backend(outcomes):
    passed = {(o.op, o.backend) for o in outcomes if o.status == "passed"}
    backends = conformance.executing_backends()
    missing = [(op, b) for op in ISSUE_OPS for b in backends if (op, b) not in passed]
    assert missing == []


def test_float32_int64_and_bool_cases_are_never_excluded(outcomes):
    excluded = [o for o in outcomes if o.status == "excluded"
                and any(f"dtype {t} " in o.reason for t in ("FLOAT", "INT64", "BOOL"))]
    assert excluded == []


def test_summary_lists_every_op_and_backend(outcomes):
    text = conformance.summary(outcomes)
    assert text.splitlines()[-1].startswith("total: ")
    for op in ISSUE_OPS:
        assert f"\n{op} " in text
