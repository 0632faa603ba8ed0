"""The PyTorch importer on models called with their defaults: a decoder's key/value cache
(torch's `cat` skips 1-D empty tensors; results that rebuild a cache container),
`aten.histc` (tokens per expert), and custom ops registered with `torch.library` (traced
through their Python implementation, mapped by a plugin, or refused by name), each
against torch eager."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import legato  # noqa: E402
from legato.frontends import torch as torch_frontend  # noqa: E402
from tests.test_torch_more import Fn  # noqa: E402


def run_both(module, inputs, backends=("cpu_ref", "c_kernels")):
    """Import `module`, run it on each backend and compare every result with eager
    (floats within 1e-5, integers and counts exactly); the imported module."""
    module = module if isinstance(module, nn.Module) else Fn(module)
    mod = torch_frontend.load(module.eval(), inputs)
    with torch.no_grad():
        wants = [w.numpy() for w in torch.utils._pytree.tree_leaves(module(*inputs))]
    for backend in backends:
        got = legato.compile(mod, backend)(*(t.numpy() for t in inputs))
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(wants)
        for g, w in zip(got, wants):
            assert (g.dtype, g.shape) == (w.dtype, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return mod


# --- cat skips 1-D empty tensors --------------------------------------------------------------

@pytest.mark.parametrize("empty_dtype", [torch.float32, torch.float64])
def test_cat_skips_1d_empty_tensors_at_any_dim_but_promotes_their_dtype(empty_dtype):
    def fn(x):  # a decoder's first cache step: keys joined onto torch.tensor([]) at dim -2
        return torch.cat([torch.tensor([], dtype=empty_dtype), x, torch.tensor([])], dim=-2)
    run_both(fn, [torch.randn(1, 4, 3, 8)])


def test_cat_of_only_1d_empty_tensors_is_empty():
    def fn(x):
        empty = torch.cat([torch.tensor([]), torch.tensor([], dtype=torch.float64)], dim=-2)
        return x + empty.sum()
    run_both(fn, [torch.randn(3)])


class _Cache:
    """A decoder cache as transformers' DynamicCache keeps it: created lazily as
    torch.tensor([]), grown with cat; rebuilt by pytree unflattening."""

    def __init__(self):
        self.keys = None

    def update(self, k):
        if self.keys is None:
            self.keys = torch.tensor([])
        self.keys = torch.cat([self.keys, k], dim=-2)
        return self.keys


def _unflatten(leaves, context):
    cache = _Cache()
    cache.update(leaves[0])
    return cache


torch.utils._pytree.register_pytree_node(_Cache, lambda c: ([c.keys], None), _unflatten)


class _Layer(nn.Module):
    def forward(self, x, cache):
        return cache.update(x * 2).sum(-1)


class _Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = _Layer()

    def forward(self, x):
        cache = _Cache()
        return self.layer(x, cache), cache


def test_results_that_rebuild_a_cache_container_are_returned_flat():
    """torch's own run_decompositions fails on such a program (SpecViolationError: a lifted
    constant the unflattening makes); the importer returns every leaf."""
    mod = run_both(_Decoder(), [torch.randn(1, 2, 3, 4)])
    assert len(mod.main.result_types) == 2


# --- histc: tokens per expert -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("bins, low, high", [(4, 0, 3), (7, -1.5, 2.0), (3, 0.25, 0.5)])
def test_histc_counts_exactly_as_torch(bins, low, high, dtype):
    def fn(x):
        return torch.histc(x, bins=bins, min=low, max=high)
    run_both(fn, [_around_bin_edges(bins, low, high, dtype)])


def test_histc_of_bfloat16_counts_exactly_as_torch():
    x = _around_bin_edges(7, -1.5, 2.0, torch.bfloat16)
    mod = torch_frontend.load(Fn(lambda x: torch.histc(x, bins=7, min=-1.5, max=2.0)), [x])
    got = legato.compile(mod, "cpu_ref")(x.float().numpy().astype(_bf16()))
    want = torch.histc(x, bins=7, min=-1.5, max=2.0).float().numpy()
    np.testing.assert_array_equal(np.asarray(got, np.float32), want)


def _around_bin_edges(bins, low, high, dtype):
    """Values on, one step either side of, and between the bin edges, out of the range
    and NaN: where torch's rounded bin arithmetic and exact arithmetic disagree."""
    edges = torch.linspace(low, high, bins + 1, dtype=dtype)
    steps = [torch.nextafter(edges, edges.new_tensor(v)) for v in (float("inf"), -float("inf"))] \
        if dtype != torch.bfloat16 else []
    return torch.cat([edges, *steps, (torch.randn(60) * 2).to(dtype),
                      torch.tensor([float("nan"), high + 1, low - 1], dtype=dtype)])


def test_histc_of_expert_ids_as_transformers_counts_tokens_per_expert():
    def fn(router_logits):
        ids, _ = torch.sort(torch.topk(router_logits, 2, dim=-1).indices.reshape(-1))
        counts = torch.histc(ids.float(), bins=4, min=0, max=3)
        return counts, torch.cumsum(counts, dim=0, dtype=torch.int32)
    run_both(fn, [torch.randn(16, 4)])


def test_histc_with_a_range_taken_from_the_data_is_refused():
    with pytest.raises(legato.LegatoError, match=r"histc with min == max \(0\).*static range"):
        torch_frontend.load(Fn(lambda x: torch.histc(x, bins=4)), [torch.randn(8)])


def test_grouped_mm_multiplies_each_row_by_its_groups_weight():
    def fn(x, w, offs):  # bfloat16: what torch exports it for; an empty middle group
        return torch.nn.functional.grouped_mm(x, w, offs=offs)
    x, w = torch.randn(8, 16).bfloat16(), torch.randn(3, 16, 8).bfloat16()
    offs = torch.tensor([3, 3, 8], dtype=torch.int32)
    mod = torch_frontend.load(Fn(fn), [x, w, offs])
    got = legato.compile(mod, "cpu_ref")(x.float().numpy().astype(_bf16()),
                                         w.float().numpy().astype(_bf16()), offs.numpy())
    want = torch.cat([x[:3].float() @ w[0].float(), x[3:].float() @ w[2].float()])
    np.testing.assert_allclose(np.asarray(got, np.float32), want.numpy(), rtol=2e-2, atol=2e-2)


def _bf16():
    import ml_dtypes
    return ml_dtypes.bfloat16


# --- custom ops registered with torch.library -------------------------------------------------

@torch.library.custom_op("legato_test::scaled_softplus", mutates_args=())
def scaled_softplus(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return nn.functional.softplus(x) * alpha


scaled_softplus.register_fake(lambda x, alpha: torch.empty_like(x))


@torch.library.custom_op("legato_test::split_signs", mutates_args=())
def split_signs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.clamp(min=0), x.clamp(max=0).abs().sum(-1)


split_signs.register_fake(lambda x: (torch.empty_like(x), x.sum(-1)))


@torch.library.custom_op("legato_test::take_rows", mutates_args=())
def take_rows(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    out, start = torch.zeros_like(x), 0
    for i, n in enumerate(counts.tolist()):  # control flow on the data: does not trace
        out[start:start + n] = x[start:start + n] * (i + 1)
        start += n
    return out


take_rows.register_fake(lambda x, counts: torch.empty_like(x))


def test_custom_op_is_imported_through_its_python_implementation():
    def fn(x):
        return torch.ops.legato_test.scaled_softplus(x, 1.5) + 1
    run_both(fn, [torch.randn(3, 5)])


def test_custom_op_with_several_results_is_imported_through_its_implementation():
    def fn(x):
        pos, neg = torch.ops.legato_test.split_signs(x)
        return pos * 2, neg
    run_both(fn, [torch.randn(4, 6)])


def test_custom_op_with_a_composite_implicit_kernel_is_imported_through_it():
    torch_frontend.decomposition_table()  # built before the op exists: export keeps it
    lib = torch.library.Library("legato_test", "FRAGMENT")
    lib.define("square_plus(Tensor x, Scalar c) -> Tensor")
    lib.impl("square_plus", lambda x, c: x * x + c, "CompositeImplicitAutograd")
    run_both(lambda x: torch.ops.legato_test.square_plus(x, 0.5), [torch.randn(2, 3)])


def test_custom_op_whose_implementation_reads_the_data_is_refused_by_name():
    fn = Fn(lambda x, counts: torch.ops.legato_test.take_rows(x, counts))
    with pytest.raises(legato.LegatoError) as info:
        torch_frontend.load(fn, [torch.randn(6, 2), torch.tensor([2, 4])])
    message = str(info.value)
    assert "legato_test.take_rows.default" in message
    assert "did not trace" in message and "legato_register_torch_ops" in message


def _take_rows(b, x, counts):
    """take_rows on legato ops: row r times 1 + the number of groups ended by it."""
    import legato.ir
    rows = legato.ir.Const.of(np.arange(x.shape[0]).reshape(-1, 1))
    ends = b.cumsum(counts, axis=0)
    group = b.sum(b.cast(b.less_equal(b.reshape(ends, shape=[1, -1]), rows), dtype="int64"),
                  axes=[1], keepdims=True)
    return b.multiply(x, b.cast(b.add(group, 1), dtype=x.dtype))


def test_custom_op_mapped_by_a_plugin_hook_is_imported(install_plugins):
    from legato.testing.plugins import plugin_module

    def hook(register):
        register("legato_test::take_rows", _take_rows)

    host = install_plugins({"rows": plugin_module(legato_register_torch_ops=hook)})
    assert [m for p, m in host.problems if p == "rows"] == []
    run_both(lambda x, counts: torch.ops.legato_test.take_rows(x, counts),
             [torch.randn(6, 2), torch.tensor([2, 0, 4])])


@pytest.mark.parametrize("name, message", [
    ("transformers::grouped_mm_fallback", "already has a converter, registered by legato"),
    ("aten::add", "ATen ops have legato's own converters"),
    ("take_rows", "is not 'namespace::name'"),
])
def test_bad_torch_op_registrations_are_plugin_problems(install_plugins, name, message):
    from legato.testing.plugins import plugin_module

    def hook(register):
        register(name, _take_rows)

    host = install_plugins({"bad": plugin_module(legato_register_torch_ops=hook)})
    (problem,) = [m for p, m in host.problems if p == "bad"]
    assert problem.startswith("legato_register_torch_ops: ") and message in problem


def test_a_second_plugin_converter_for_one_op_is_refused_and_the_first_kept(install_plugins):
    from legato.frontends.torch import custom as torch_custom
    from legato.testing.plugins import plugin_module

    def hook(register):
        register("legato_test::take_rows", _take_rows)

    host = install_plugins({"one": plugin_module(legato_register_torch_ops=hook),
                            "two": plugin_module(legato_register_torch_ops=hook)})
    (problem,) = [m for _, m in host.problems]
    assert "legato_test::take_rows already has a converter, registered by plugin" in problem
    assert torch_custom.CONVERTERS["legato_test::take_rows"][0] is _take_rows
