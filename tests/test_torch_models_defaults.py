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
