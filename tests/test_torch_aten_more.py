"""The PyTorch importer on programs other people write: Python scalars and None among the
results, and core ATen ops that inference programs reach (_convolution, the .default
upsampling overloads, _index_put_impl, _trilinear, eval-mode rrelu and dropout, full max and
min, tril/triu_indices, bitwise shifts, det and slogdet, index with None anywhere), each
against torch eager."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import legato  # noqa: E402
from legato.frontends import torch as torch_frontend  # noqa: E402
from tests.test_torch_more import Fn  # noqa: E402


def _leaves(out) -> list:
    return torch.utils._pytree.tree_leaves(out)


def _check(got, want, rtol=1e-5, atol=1e-5):
    """A legato result against one of eager's flat outputs (a tensor or a Python scalar)."""
    if isinstance(want, torch.Tensor):
        want = want.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                    want.dtype, want.shape)
    else:  # a Python scalar: the 0-d tensor torch.as_tensor makes of it
        assert got.shape == () and got.dtype == torch.as_tensor(want).numpy().dtype
    if got.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


def run_both(fn, inputs, backends=("cpu_ref", "c_kernels"), rtol=1e-5, atol=1e-5):
    """Import `fn`, run it on each backend and compare with eager; the imported module."""
    module = fn if isinstance(fn, nn.Module) else Fn(fn)
    mod = torch_frontend.load(module.eval(), inputs)
    with torch.no_grad():
        wants = _leaves(module(*inputs))
    for backend in backends:
        got = mod.with_nones(legato.compile(mod, backend)(*(t.numpy() for t in inputs)))
        assert len(got) == len(wants)
        for g, w in zip(got, wants):
            if w is None:
                assert g is None
            else:
                _check(np.asarray(g), w, rtol, atol)
    return mod


# --- Python scalars and None among the results ----------------------------------------------

def test_python_scalar_results_are_0d_constants_in_place():
    def fn(x):
        return x + 1, True, 3, 2.5, [x * 2, -7], {"n": x.shape[0], "flag": False}
    mod = run_both(fn, [torch.randn(4)])
    assert [str(t) for t in mod.main.result_types] == [
        "float32[4]", "bool[]", "int64[]", "float32[]", "float32[4]", "int64[]", "int64[]",
        "bool[]"]
    assert mod.none_results == ()


def test_none_results_are_left_out_and_listed():
    def fn(x):
        return None, x + 1, None, (x.sum(), None), 1.5
    mod = run_both(fn, [torch.randn(3)])
    assert mod.none_results == (0, 2, 4)
    assert len(mod.main.results) == 3  # x + 1, the sum, 1.5: no result moves unannounced


def test_results_that_are_neither_tensors_nor_scalars_are_refused():
    with pytest.raises(legato.LegatoError, match="result 1 of the program is a str"):
        torch_frontend.load(Fn(lambda x: (x + 1, "label")), [torch.randn(2)])
    with pytest.raises(legato.LegatoError, match="returns no tensor"):
        torch_frontend.load(Fn(lambda x: None), [torch.randn(2)])
