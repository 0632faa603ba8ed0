"""The rest of core ATen's inference ops in the PyTorch importer (views with static strides,
copies and fills, scatters into slices, reflection/replication padding, native
normalizations, distances, 3-d pooling, special functions), each against torch eager on
cpu_ref and c_kernels, with the ATen op it is about checked to be in the exported program."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import legato  # noqa: E402
from legato.frontends import torch as torch_frontend  # noqa: E402


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def randn(*shape):
    return lambda: [torch.randn(*shape)]


def masked_scatter(x, m):
    return x.masked_scatter(m > 0, torch.arange(40.0).view(5, 8))


# name: (function, inputs, an ATen op its export must call)
CASES = {
    "mean_all": (lambda x: x.mean() + x, randn(3, 4), "aten.mean.default"),
    "diagonal": (lambda x: torch.diagonal(x, 1, 0, 2) + torch.diagonal(x, -2, 2, 1).sum(),
                 randn(4, 2, 5), "aten.diagonal.default"),
    "unfold": (lambda x: x.unfold(1, 3, 2) + 1, randn(2, 7, 3), "aten.unfold.default"),
    "as_strided": (lambda x: torch.as_strided(x, (3, 2, 2), (1, 4, 2), 1) * 2,
                   randn(4, 5), "aten.as_strided.default"),
    "copy": (lambda x, y: torch.ops.aten.copy(x, y), lambda: [torch.randn(3, 4),
                                                             torch.arange(4)],
             "aten.copy.default"),
    "slice_scatter": (lambda x, s: torch.slice_scatter(x, s, 1, 1, 6, 2),
                      lambda: [torch.randn(3, 7), torch.randn(3, 3)],
                      "aten.slice_scatter.default"),
    "diagonal_scatter": (lambda x, s: torch.diagonal_scatter(x, s, -1, 2, 0),
                         lambda: [torch.randn(4, 2, 3), torch.randn(2, 2)],
                         "aten.diagonal_scatter.default"),
    "masked_scatter": (masked_scatter, lambda: [torch.randn(2, 3, 4), torch.randn(3, 1)],
                       "aten.masked_scatter.default"),
    "native_layer_norm": (lambda x, w, b: torch.native_layer_norm(x, [3, 4], w, b, 1e-5),
                          lambda: [torch.randn(2, 3, 4), torch.randn(3, 4),
                                   torch.randn(3, 4)], "aten.native_layer_norm.default"),
    "native_group_norm": (lambda x, w, b: torch.native_group_norm(x, w, b, 2, 6, 5, 3, 1e-5),
                          lambda: [torch.randn(2, 6, 5), torch.randn(6), torch.randn(6)],
                          "aten.native_group_norm.default"),
    "batch_norm_training": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                            lambda: [torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)],
                            "aten._native_batch_norm_legit.no_stats"),
    "cdist": (lambda x, y: torch.cdist(x, y) + torch.cdist(x, y, p=1.5)
              + torch.cdist(x, y, p=float("inf")), lambda: [torch.randn(2, 4, 3),
                                                            torch.randn(2, 5, 3)],
              "aten._cdist_forward.default"),
    "pdist": (lambda x: F.pdist(x) + F.pdist(x, p=1), randn(5, 3),
              "aten._pdist_forward.default"),
    "atan2": (lambda y, x: torch.atan2(y, x) + torch.atan2(x, y.int()),
              lambda: [torch.randn(3, 4), torch.randn(4)], "aten.atan2.default"),
    "lgamma": (lambda x: torch.lgamma(x), lambda: [torch.tensor([-2.5, -1.0, 0.0, 0.5, 1.0,
                                                                 3.7, 40.0, float("inf")])],
               "aten.lgamma.default"),
    "erfc": (lambda x: torch.erfc(x), lambda: [3 * torch.randn(3, 5)], "aten.erfc.default"),
    "erfcx": (lambda x: torch.special.erfcx(x), lambda: [torch.tensor([-3.0, -0.5, 0.0, 0.7, 2.0,
                                                                       30.0, 1e4])],
              "aten.special_erfcx.default"),
    "digamma": (lambda x: torch.digamma(x), lambda: [torch.tensor([-2.5, -1.0, 0.0, 0.5, 1.0,
                                                                   1.4616, 40.0])],
                "aten.digamma.default"),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 2, padding=1, ceil_mode=True,
                                          count_include_pad=False)[..., :2, :2, :2]
                   + F.avg_pool3d(x, (3, 2, 2), stride=(2, 1, 1), divisor_override=5),
                   randn(1, 2, 5, 3, 3), "aten.avg_pool3d.default"),
    "avg_pool3d_int": (lambda x: F.avg_pool3d(x, 2, padding=1), lambda: [
        torch.randint(-9, 9, (2, 3, 4, 4))], "aten.avg_pool3d.default"),
    "max_pool3d_indices": (lambda x: F.max_pool3d(x, (2, 3, 2), stride=(1, 2, 2), padding=1,
                                                  return_indices=True),
                           randn(2, 4, 5, 6), "aten.max_pool3d_with_indices.default"),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, None)), randn(1, 2, 4, 5, 3),
                            "aten._adaptive_avg_pool3d.default"),
    "embedding_bag": (lambda w, i, o: F.embedding_bag(i, w, o, mode="mean")
                      + F.embedding_bag(i, w, o, mode="max")
                      + F.embedding_bag(i, w, o, mode="sum", padding_idx=2),
                      lambda: [torch.randn(6, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 0]),
                               torch.tensor([0, 3, 3, 5])], "aten._embedding_bag_forward_only.default"),
    "grid_sample_2d": (lambda x, g: F.grid_sample(x, g, "bilinear", "zeros", False)
                       + F.grid_sample(x, g, "nearest", "border", True)
                       + F.grid_sample(x, g, "bicubic", "reflection", False),
                       lambda: [torch.randn(2, 3, 5, 6), 1.3 * torch.randn(2, 4, 3, 2)],
                       "aten.grid_sampler_2d.default"),
    "grid_sample_3d": (lambda x, g: F.grid_sample(x, g, "bilinear", "reflection", True)
                       + F.grid_sample(x, g, "nearest", "zeros", False),
                       lambda: [torch.randn(1, 2, 3, 4, 5), 1.3 * torch.randn(1, 2, 3, 4, 3)],
                       "aten.grid_sampler_3d.default"),
    "hypot_copysign": (lambda x, y: torch.hypot(x, y) + torch.copysign(x, y)
                       + torch.copysign(y, -1.0), lambda: [torch.randn(3, 4), torch.randn(4)],
                       "aten.copysign.Tensor"),
    "searchsorted": (lambda s, v: torch.searchsorted(s, v) + torch.searchsorted(s, v, right=True)
                     + torch.bucketize(v, s[0]), lambda: [torch.sort(torch.randn(2, 5))[0],
                                                         torch.randn(2, 3)],
                     "aten.searchsorted.Tensor"),
    "median_kthvalue": (lambda x: torch.median(x) + torch.median(x, 1).values.sum()
                        + torch.kthvalue(x, 2, 0, keepdim=True).values,
                        randn(5, 4), "aten.kthvalue.default"),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True),
                            randn(1, 2, 5, 7), "aten.adaptive_max_pool2d.default"),
}


def _run(fn, inputs, backend):
    module = fn if isinstance(fn, nn.Module) else Fn(fn)
    mod = torch_frontend.load(module.eval(), inputs)
    with torch.no_grad():
        want = module(*inputs)
    wants = [want] if isinstance(want, torch.Tensor) else list(want)
    got = legato.compile(mod, backend)(*(t.numpy() for t in inputs))
    gots = list(got) if isinstance(got, tuple) else [got]
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        w = w.numpy()
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _exported_ops(fn, inputs) -> set[str]:
    from legato.testing.torch_conformance import _export, aten_ops
    return aten_ops(_export(torch, Fn(fn), inputs))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_aten_op_matches_eager(name, backend):
    fn, make, _ = CASES[name]
    torch.manual_seed(0)
    _run(fn, make(), backend)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_case_exercises_its_aten_op(name):
    fn, make, op = CASES[name]
    assert op in _exported_ops(fn, make())


# Ops PyTorch's default decompositions take apart before the importer sees them: their
# converters are called directly, against the ATen op run eagerly.
DIRECT = {
    "fill.Scalar": ([torch.randn(2, 3)], (2.5,)),
    "reflection_pad1d.default": ([torch.randn(2, 5)], ([3, 1],)),
    "reflection_pad2d.default": ([torch.randn(1, 2, 5, 4)], ([2, 1, 1, 3],)),
    "reflection_pad3d.default": ([torch.randn(1, 2, 3, 3, 4)], ([2, 1, 1, 0, 2, 2],)),
    "replication_pad1d.default": ([torch.randn(2, 5)], ([3, 0],)),
    "replication_pad2d.default": ([torch.randn(1, 2, 5, 4)], ([1, -1, 0, 4],)),
    "replication_pad3d.default": ([torch.randn(1, 2, 2, 3, 2)], ([1, 0, 2, 1, 0, 2],)),
    "empty_permuted.default": ([], ([2, 3], [1, 0])),
    "select_scatter.default": ([torch.randn(3, 4, 2), torch.randn(3, 2)], (1, -1)),
    "col2im.default": ([torch.randn(2, 12, 12)], ([5, 6], [2, 3], [1, 2], [1, 1], [2, 1])),
    "_embedding_bag.default": ([torch.randn(5, 2), torch.tensor([4, 0, 2, 2, 1]),
                                torch.tensor([0, 2, 2, 5])], (False, 0, False, None, True)),
    "avg_pool1d.default": ([torch.randn(2, 4, 11)], ([3], [2], [1], True, False)),
    "adaptive_avg_pool1d.default": ([torch.randn(4, 10)], ([3],)),
}


@pytest.mark.parametrize("name", sorted(DIRECT))
def test_converter_matches_the_aten_op(name):
    from legato.ir.builder import GraphBuilder
    from legato.frontends.torch.ops import ATEN
    tensors, args = DIRECT[name]
    b = GraphBuilder()
    inputs = [b.input(f"x{i}", tuple(t.shape), str(t.dtype).removeprefix("torch."))
              for i, t in enumerate(tensors)]
    result = ATEN[f"aten.{name}"](b, *inputs, *args)
    if isinstance(result, tuple):  # the first result (the others serve backward)
        result = result[0]
    packet, overload = name.split(".")
    want = getattr(getattr(torch.ops.aten, packet), overload)(*tensors, *args)
    want = want[0] if isinstance(want, tuple) else want
    if name.startswith("empty"):  # any values will do: legato's are zeros
        want = torch.zeros_like(want)
    if not b.calls:
        got = result.data
    else:
        got = legato.compile(b.build(result), "cpu_ref")(*(t.numpy() for t in tensors))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)
    assert got.shape == tuple(want.shape) and got.dtype == want.numpy().dtype


def test_every_core_aten_op_is_mapped_or_refused_with_a_reason():
    """Core ATen (the ops tagged torch.Tag.core): each has a converter (the FFTs in the
    table for complex values), or the importer refuses it on purpose and says why
    (backward, random, data-dependent, ...)."""
    from legato.frontends.torch.fft import COMPLEX
    from legato.frontends.torch.ops import ATEN, refusal
    # torch.ops.aten creates its packets on first use: load every one, so the set does not
    # depend on which tests ran before
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::"):
            getattr(torch.ops.aten, schema.name.removeprefix("aten::"), None)
    core = {f"aten.{packet}.{overload}" for packet in dir(torch.ops.aten)
            if isinstance(getattr(torch.ops.aten, packet, None), torch._ops.OpOverloadPacket)
            for overload in getattr(torch.ops.aten, packet).overloads()
            if torch.Tag.core in getattr(getattr(torch.ops.aten, packet), overload).tags}
    assert len(core) > 150
    missing = sorted(op for op in core if op not in ATEN and op not in COMPLEX
                     and not refusal(op))
    assert not missing, f"core ATen ops with neither a converter nor a refusal: {missing}"
