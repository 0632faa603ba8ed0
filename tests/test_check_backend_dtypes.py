"""`legato check-backend` samples every dtype and attribute branch a backend declares, as
a plugin author meets it: a plugin installed (fake entry point) that declares float16
matmul with a kernel accumulating in float16, and one declaring a combination no sample
generator produces."""
from __future__ import annotations

import re

import numpy as np
import pytest

from legato.cli.commands import main
from legato.testing.conformance import error_bound
from legato.testing.generators import LONG_K
from legato.testing.plugins import installed_plugins, plugin_module


def fp16_accumulating_matmul(a, b):
    """What a naive float16 NPU does: every partial sum rounded to float16."""
    if a.dtype != np.float16 or a.ndim < 2 or b.ndim < 2:
        return np.asarray(np.matmul(a, b))
    acc = np.zeros(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                   np.float16)
    for k in range(a.shape[-1]):
        acc = (acc + a[..., :, k:k + 1] * b[..., k:k + 1, :]).astype(np.float16)
    return acc


def upcasting_matmul(a, b):
    """The right way: accumulate in float32, round once."""
    wide = np.matmul(a.astype(np.float32), b.astype(np.float32)) if a.dtype == np.float16 \
        else np.matmul(a, b)
    return np.asarray(wide.astype(a.dtype))


def npu_plugin(name, legal, kernels):
    def legato_register_backends(register):
        register({"backend": name, "fallback": "cpu_ref", "legal": legal}, kernels=kernels)
    return plugin_module(legato_register_backends=legato_register_backends)


MATMUL_FP16 = {"matmul": {"dtypes": ["float32", "float16"]}}


def test_the_long_float16_sum_the_kit_draws_shows_a_float16_accumulator():
    """The premise, in numpy alone: at LONG_K the float16 accumulator is past matmul's
    float16 bound, the float32 one well within it."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 3, (2, LONG_K)).astype(np.float16)
    b = rng.uniform(0.5, 3, (LONG_K, 2)).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    def error(got):
        return np.abs(got.astype(np.float64) - exact).max() / np.abs(exact).max()
    assert error(fp16_accumulating_matmul(a, b)) > error_bound("matmul", "float16")
    assert error(upcasting_matmul(a, b)) < error_bound("matmul", "float16") / 10


def check_backend_of_plugin(capsys, name, legal, kernels) -> tuple[int, str]:
    """`legato check-backend NAME` with the plugin installed: exit code and table."""
    with installed_plugins({name: npu_plugin(name, legal, kernels)}):
        code = main(["check-backend", name])
    return code, capsys.readouterr().out


def test_a_float16_accumulating_matmul_declared_legal_for_float16_fails(capsys):
    code, out = check_backend_of_plugin(capsys, "fp16_npu", MATMUL_FP16,
                                        {"matmul": fp16_accumulating_matmul})
    assert code == 1, out
    assert "matmul: mismatch: matmul(float16[2, 4096], float16[4096, 2])" in out
    assert sampled(out, "matmul float16") >= 12 and sampled(out, "matmul float32") >= 12


def test_the_same_backend_with_a_float32_accumulator_passes(capsys):
    code, out = check_backend_of_plugin(capsys, "fp32acc_npu", MATMUL_FP16,
                                        {"matmul": upcasting_matmul})
    assert code == 0, out
    assert "declared combinations: 2 of 2 sampled" in out


def test_a_combination_no_generator_produces_is_named(capsys):
    legal = {"nn.gelu": {"dtypes": ["float32", "bool"]},
             "nn.conv2d": {"dtypes": ["float32"], "attrs": {"data_layout": ["NCHW", "NHWC"]}}}
    kernels = {"nn.gelu": _cpu_ref_kernel("nn.gelu"), "nn.conv2d": _cpu_ref_kernel("nn.conv2d")}
    code, out = check_backend_of_plugin(capsys, "gelu_npu", legal, kernels)
    assert code == 0, out  # what it could sample is right; the rest is named, not failed
    assert sampled(out, "nn.gelu float32") >= 12
    assert "nn.gelu bool: NOT SAMPLED, no generator produces this combination" in out
    # each branch of an attribute condition is sampled on its own
    assert sampled(out, "nn.conv2d {data_layout: NCHW} float32") >= 12
    assert sampled(out, "nn.conv2d {data_layout: NHWC} float32") >= 12
    assert "declared combinations: 3 of 4 sampled" in out


def sampled(out: str, combination: str) -> int:
    """The sample count check-backend's table gives a combination (0: not listed)."""
    found = re.search(rf"^  {re.escape(combination)}: sampled (\d+)$", out, re.M)
    return int(found.group(1)) if found else 0


def _cpu_ref_kernel(op):
    import legato
    return legato.get_backend("cpu_ref").kernel(op)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int32"])
def test_samples_of_a_dtype_have_inputs_of_it(dtype):
    from legato.testing import samples
    drawn = samples("matmul", seed=3, dtype=dtype)
    assert drawn and all(any(a is not None and a.dtype == dtype for a in s.inputs)
                         for s in drawn)


def test_attribute_values_no_generator_draws_are_put_in():
    """clip legal only as relu6 (min 0, max 6): the kit draws random bounds, so the
    declared ones are put into drawn samples; a kernel ignoring max is caught."""
    from legato.testing import check_backend
    legal = {"clip": {"dtypes": ["float32"], "attrs": {"min": 0.0, "max": 6.0}}}
    kernels = {"ok_npu": lambda a, min=None, max=None: np.asarray(np.clip(a, 0.0, 6.0)),
               "relu_npu": lambda a, min=None, max=None: np.asarray(np.maximum(a, 0.0))}
    plugins = {name: npu_plugin(name, legal, {"clip": fn}) for name, fn in kernels.items()}
    with installed_plugins(plugins):
        good, = check_backend("ok_npu")
        bad, = check_backend("relu_npu")
    assert good.ok and good.ran >= 12 and not good.unsampled
    assert set(bad.problems) == {"mismatch"}


def test_combinations_past_the_cap_are_counted_not_dropped(monkeypatch):
    import legato
    from legato.legalization.backend import Backend, Condition
    from legato.testing import check_backend, conformance
    legal = {"add": Condition(dtypes=frozenset({"float32", "float64", "int32"}))}
    backend = Backend("capped_npu", legal, fallback="cpu_ref", kernels={"add": np.add})
    monkeypatch.setitem(legato.context().backends, "capped_npu", backend)
    monkeypatch.setattr(conformance, "MAX_COMBINATIONS", 2)
    result, = check_backend("capped_npu")
    labels = [label for label, _, _ in result.coverage]
    assert labels == ["add: 1 more combinations", "add float32", "add float64"]
    assert "add: 1 more combinations: NOT SAMPLED, not drawn (at most 2 per op)" in \
        conformance.table("capped_npu", [result])
