"""The zoo's own tools: the error measure, how failures are named, the status table."""
from __future__ import annotations

import math

import numpy as np
import pytest

from legato.ir.errors import LegatoError
from tests.zoo import check, export, models, report

pytestmark = pytest.mark.zoo


def test_rel_error_is_relative_above_one_and_absolute_below():
    want = np.array([[10.0, -20.0]], np.float32)
    assert math.isclose(export.rel_error(want + np.float32(0.02), want), 0.02 / 20,
                        rel_tol=1e-4)
    small = np.array([0.001, 0.0], np.float32)
    assert math.isclose(export.rel_error(small + 1e-3, small), 1e-3, rel_tol=1e-4)


def test_rel_error_refuses_other_shapes_and_non_finite_results():
    want = np.zeros((2, 3), np.float32)
    assert export.rel_error(np.zeros((3, 2), np.float32), want) == math.inf
    assert export.rel_error(np.full((2, 3), np.nan, np.float32), want) == math.inf


def test_rel_error_of_several_results_is_the_largest_and_needs_every_result():
    want = [np.full(3, 20.0, np.float32), np.zeros((2, 2), np.float32)]
    got = (want[0], want[1] + np.float32(0.5))  # a module's results come as a tuple
    assert math.isclose(export.rel_error(got, want), 0.5)
    assert export.rel_error(got[:1], want) == math.inf


def test_describe_lists_every_unsupported_op_of_either_importer():
    torch_err = LegatoError("the exported program uses 2 ATen op(s) legato cannot import:\n"
                            "  aten.arange.start_step: arange_2, arange_3\n"
                            "  aten.ge.Scalar: ge")
    onnx_err = LegatoError("the model uses 1 ONNX op type(s) legato cannot import:\n"
                           "  IsNaN: node_IsNaN_76, node_IsNaN_142")
    assert check.describe(torch_err) == "unsupported aten.arange.start_step, aten.ge.Scalar"
    assert check.describe(onnx_err) == "unsupported IsNaN"
    assert check.describe(ValueError("bad\nsecond line")) == "ValueError: bad"


def test_blockers_group_failing_pairs_by_op_most_blocking_first():
    rows = [check.Row("a", "torch"), check.Row("b", "torch"), check.Row("b", "onnx"),
            check.Row("c", "onnx")]
    rows[0].fail("import", "unsupported aten.x, aten.y")
    rows[1].fail("import", "unsupported aten.y")
    rows[2].fail("c_kernels", "max rel. error 0.1 > 0.0001")
    rows[2].fail("tosa emit", "later failures are not blockers")
    assert list(report.blockers(rows).items()) == [
        ("import: aten.y", ["a/torch", "b/torch"]),
        ("c_kernels: max rel. error 0.1 > 0.0001", ["b/onnx"]),
        ("import: aten.x", ["a/torch"])]
    lines = check.table(rows)
    assert len(lines) == 2 + len(rows) and lines[-1].endswith("| ok |")
    assert "c_kernels: max rel. error" in lines[-2]


def test_the_zoo_has_the_architectures_issue_11_names():
    wanted = {"distilbert", "roberta", "albert", "opt", "qwen2", "mistral", "phi",
              "t5_encoder", "whisper_encoder", "swin", "deit", "efficientnet", "regnet",
              "mobilevit", "segformer", "clip_vision", "gpt2", "llama", "vit", "resnet",
              "mobilenet_v2", "convnext"}
    assert wanted == set(models.CORE)


def test_the_wide_zoo_adds_architectures_with_their_own_settings():
    """Every wide entry is a new name, and the wide zoo covers the architectures asked for
    beyond the core (those transformers still ships: VAN and EfficientFormer are gone)."""
    wide = [m.name for m in models.WIDE]
    assert len(wide) == len(set(wide)) and not set(wide) & set(models.CORE)
    defaults = {m.name for m in models.DEFAULTS}
    assert set(models.NAMES) == set(models.CORE) | set(wide) | defaults
    asked = {"bert", "bart", "bart_encoder", "electra", "mobilebert", "deberta_v2",
             "xlm_roberta", "gpt_neo", "gptj", "bloom", "falcon", "gemma", "gemma2",
             "stablelm", "starcoder2", "mpt", "codegen", "mamba", "wav2vec2", "hubert",
             "beit", "dinov2", "convnextv2", "levit", "poolformer", "mobilenet_v1", "bit",
             "cvt", "swinv2", "pvt", "focalnet", "yolos", "dpt", "glpn", "data2vec_vision"}
    assert asked <= set(wide)


def test_decoders_are_also_called_with_their_defaults():
    """Each *_defaults entry is a zoo decoder without the settings that turn its cache or
    transformers' default experts path off; MoE ones go through torch.export only."""
    for spec in models.DEFAULTS:
        base = models.ZOO[spec.name.removesuffix("_defaults")]
        assert spec.defaults and not base.defaults
        assert "use_cache" not in spec.kwargs and "experts_implementation" not in spec.kwargs
        assert {k: v for k, v in base.kwargs.items() if k not in spec.kwargs} in (
            {"use_cache": False}, {"use_cache": False, "experts_implementation": "batched_mm"})
        moe = "experts_implementation" in base.kwargs
        assert spec.routes == (("torch",) if moe else export.ROUTES)
    assert {"gpt2_defaults", "llama_defaults", "mixtral_defaults", "qwen2_moe_defaults"} <= \
        {m.name for m in models.DEFAULTS}


def test_composite_counts_come_from_the_torch_models():
    """Two layers each: GPT-2's formula-written gelu and Conv1D linears, Llama's RMSNorms
    (2 per layer and a final one) and SwiGLU silus, MobileViT's written-out attention."""
    pytest.importorskip("transformers")
    from tests.zoo import composites
    assert composites.expected("gpt2") == {"gelu": 2, "layer_norm": 5, "attention": 2,
                                           "linear": 8}
    llama = composites.expected("llama")
    assert (llama["rms_norm"], llama["silu"], llama["attention"]) == (5, 2, 2)
    assert "softmax" not in composites.expected("mobilevit")
