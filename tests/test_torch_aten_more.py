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
from torch.nn import functional as F  # noqa: E402

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


# --- core ATen ops inference programs reach -------------------------------------------------

A = torch.ops.aten


def ints(*shape, low=-100, high=100, dtype=torch.int64):
    return torch.randint(low, high, shape, dtype=dtype)


def _convolution(x, w, b, w_transposed):
    plain = A._convolution(x, w, b, [2, 1], [1, 2], [1, 2], False, [0, 0], 2, False, False,
                           False, False)
    return plain, A._convolution(plain, w_transposed, None, [2, 3], [1, 0], [1, 1], True,
                                 [1, 2], 2, False, False, False, True)


def _shifts(x, s, small):
    return (x << s, x >> s, x << 3, x >> 2, 5 << s, torch.bitwise_left_shift(small, s),
            torch.bitwise_right_shift(small, s), torch.bitwise_right_shift(-64, s),
            small << small, small >> small)


def _triangles(x):
    return (x[tuple(torch.tril_indices(4, 5, -1))], torch.triu_indices(3, 6, 2),
            torch.tril_indices(0, 3), torch.triu_indices(4, 2, -5, dtype=torch.int32))


def _index_everywhere(x, i, j):
    return (x[:, i], x[i, :, j], x[:, i, :, j], x[i, :, :, j], x[:, :, i, j], x[..., i],
            x[i, j, ..., i], x[:, i, j], x[None, i, :, j])


# name: (function, inputs, an ATen op its export must call)
CASES = {
    "_convolution": (_convolution, lambda: [torch.randn(2, 4, 7, 9), torch.randn(6, 2, 3, 2),
                                            torch.randn(6), torch.randn(6, 2, 3, 4)],
                     "aten._convolution.default"),
    "_convolution_1d": (lambda x, w: A._convolution(x, w, None, [2], [1], [1], True, [1], 1,
                                                    False, False, False, False),
                        lambda: [torch.randn(1, 3, 6), torch.randn(3, 2, 3)],
                        "aten._convolution.default"),
    "upsample_nearest2d": (lambda x: (A.upsample_nearest2d(x, [7, 10]),
                                      A.upsample_nearest2d(x, [3, 4], 0.7, 0.45),
                                      A.upsample_nearest2d(x, [5, 5], 0.5, 1.5)),
                           lambda: [torch.randn(1, 2, 5, 6)], "aten.upsample_nearest2d.default"),
    "interpolate_nearest_2d": (lambda x: (F.interpolate(x, scale_factor=2.1),
                                          F.interpolate(x, scale_factor=(1.3, 0.7)),
                                          F.interpolate(x, size=(10, 3))),
                               lambda: [torch.randn(1, 2, 5, 6)], "aten.upsample_nearest2d.vec"),
    "interpolate_linear_same_size": (
        lambda x, v, w: (F.interpolate(x, scale_factor=1.3, mode="linear"),
                         F.interpolate(v, scale_factor=(1.3, 2.0), mode="bilinear"),
                         F.interpolate(w, scale_factor=(1.3, 0.5, 1.7), mode="trilinear"),
                         F.interpolate(w, size=(5, 2, 2), mode="trilinear", align_corners=True)),
        lambda: [torch.randn(1, 2, 3), torch.randn(1, 2, 3, 4), torch.randn(1, 1, 3, 4, 5)],
        "aten.upsample_trilinear3d.vec"),
    "upsample_nearest1d_3d": (lambda x, v: (A.upsample_nearest1d(x, [9]),
                                            A.upsample_nearest3d(v, [3, 5, 2], None, 1.7, None),
                                            A._upsample_nearest_exact2d(v[0], [6, 3], 1.3, None)),
                              lambda: [torch.randn(2, 3, 4), torch.randn(1, 2, 2, 3, 4)],
                              "aten.upsample_nearest3d.default"),
    "upsample_trilinear3d": (lambda x: (A.upsample_trilinear3d(x, [3, 7, 10], False),
                                        A.upsample_trilinear3d(x, [2, 3, 4], True, 0.7, 0.5),
                                        A.upsample_trilinear3d(x, [4, 4, 9], False, None, 0.9,
                                                               1.6)),
                             lambda: [torch.randn(1, 2, 3, 5, 6)],
                             "aten.upsample_trilinear3d.default"),
    "_index_put_impl": (lambda x, i, j, v: (A._index_put_impl(x, [i], v, True, False),
                                            A._index_put_impl(x, [i, None, j], v[..., 0], False,
                                                              True)),
                        lambda: [torch.randn(5, 3, 4), torch.tensor([0, 3, 0]),
                                 torch.tensor([1, 2, 1]), torch.randn(3, 3, 4)],
                        "aten._index_put_impl.default"),
    "bilinear": (nn.Bilinear(3, 4, 5), lambda: [torch.randn(2, 3), torch.randn(2, 4)],
                 "aten._trilinear.default"),
    "bilinear_batched": (nn.Bilinear(3, 2, 4, bias=False),
                         lambda: [torch.randn(2, 5, 3), torch.randn(2, 5, 2)],
                         "aten._trilinear.default"),
    "rrelu_eval": (nn.RReLU(0.1, 0.4), lambda: [torch.randn(3, 4)],
                   "aten.rrelu_with_noise_functional.default"),
    "native_dropout_eval": (lambda x: (*A.native_dropout(x, 0.5, False),
                                       *A.native_dropout(x, 0.0, True)),
                            lambda: [torch.randn(3, 4)], "aten.native_dropout.default"),
    "max_min_all": (lambda x, i, m: (x.max(), x.min(), i.max(), i.min(), m.max(), m.min(),
                                     x[0, 0].max()),
                    lambda: [torch.tensor([[1.0, float("nan")], [3.0, -2.0]]) * torch.ones(
                        3, 2, 2), ints(3, 4), torch.rand(2, 3) > 0.5], "aten.max.default"),
    "tril_triu_indices": (_triangles, lambda: [torch.randn(4, 5)],
                          "aten.tril_indices.default"),
    "shifts": (_shifts, lambda: [ints(4, 16), torch.arange(64).view(4, 16) * 70 // 63 - 3,
                                 ints(4, 16, low=-128, high=127, dtype=torch.int8)],
               "aten.__lshift__.Tensor"),
    "shifts_wide": (lambda x, s: (x << s, x >> s, torch.bitwise_left_shift(x, 31),
                                  torch.bitwise_right_shift(x, 31)),
                    lambda: [ints(3, 40, low=-(1 << 31), high=(1 << 31) - 1, dtype=torch.int32),
                             torch.arange(-3, 37, dtype=torch.int32).expand(3, 40)],
                    "aten.__rshift__.Tensor"),
    "det_slogdet": (lambda a, s: (torch.linalg.det(a), *torch.linalg.slogdet(a),
                                  torch.linalg.det(s), *torch.linalg.slogdet(s)),
                    lambda: [torch.randn(2, 3, 4, 4), torch.tensor([[1.0, 2.0], [2.0, 4.0]])],
                    "aten._linalg_slogdet.default"),
    "det_float64": (lambda a: (torch.linalg.det(a), torch.linalg.slogdet(a)[1]),
                    lambda: [torch.randn(3, 5, 5, dtype=torch.float64)],
                    "aten._linalg_det.default"),
    "index_none_everywhere": (_index_everywhere,
                              lambda: [torch.randn(2, 3, 4, 5), torch.tensor([[0, -1], [1, 0]]),
                                       torch.tensor([1, 0])], "aten.index.Tensor"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_aten_op_matches_eager(name):
    from legato.frontends.torch import _Importer
    from legato.testing.torch_conformance import _export, aten_ops
    fn, make, op = CASES[name]
    torch.manual_seed(0)
    inputs = make()
    module = (fn if isinstance(fn, nn.Module) else Fn(fn)).eval()
    program = _export(torch, module, inputs)
    assert op in aten_ops(program)
    mod = _Importer(program).run()
    with torch.no_grad():
        wants = _leaves(module(*inputs))
    for backend in ("cpu_ref", "c_kernels"):
        got = mod.with_nones(legato.compile(mod, backend)(*(t.numpy() for t in inputs)))
        assert len(got) == len(wants)
        for k, (g, w) in enumerate(zip(got, wants)):
            _check(np.asarray(g), w, 1e-4, 1e-4)


# PyTorch's decompositions take these apart before the importer sees them: their converters
# are called directly, against the ATen op run eagerly.
DIRECT = [
    ("upsample_bilinear2d", (1, 2, 5, 6), ([7, 10], False)),
    ("upsample_bilinear2d", (1, 2, 5, 6), ([3, 4], True, 0.7, 0.5)),
    ("upsample_bilinear2d", (2, 1, 5, 6), ([4, 9], False, 0.9, 1.6)),
    ("upsample_bicubic2d", (1, 2, 5, 6), ([8, 4], False, 1.7, None)),
    ("upsample_bicubic2d", (1, 2, 5, 6), ([3, 7], True)),
    ("upsample_linear1d", (2, 3, 6), ([11], False, 1.9)),
    ("upsample_nearest1d", (2, 3, 5), ([5], 0.5)),
    ("_upsample_nearest_exact1d", (2, 3, 5), ([7], 1.3)),
    ("_upsample_nearest_exact2d", (1, 1, 5, 4), ([10, 5], None, 1.3)),
]


@pytest.mark.parametrize("case", range(len(DIRECT)))
def test_converter_matches_the_aten_op(case):
    from legato.ir.builder import GraphBuilder
    from legato.frontends.torch.ops import ATEN
    packet, shape, args = DIRECT[case]
    x = torch.randn(*shape)
    b = GraphBuilder()
    result = ATEN[f"aten.{packet}.default"](b, b.input("x", shape, "float32"), *args)
    got = legato.compile(b.build(result), "cpu_ref")(x.numpy())
    _check(got, getattr(A, packet).default(x, *args))


def test_random_layers_in_training_mode_are_refused():
    with pytest.raises(legato.LegatoError, match=r"dropout with p=0.5 in training mode "
                                                 r"\(refused: a random op"):
        torch_frontend.load(Fn(lambda x: A.native_dropout(x, 0.5, True)[0]), [torch.randn(3)])
    with pytest.raises(legato.LegatoError, match=r"rrelu in training mode \(refused: a random"):
        torch_frontend.load(Fn(lambda x: A.rrelu_with_noise(x, torch.zeros(3), 0.1, 0.3, True)),
                            [torch.randn(3)])


def test_shifts_of_floats_and_det_of_integers_are_refused():
    from legato.ir.builder import GraphBuilder
    from legato.frontends.torch.ops import ATEN
    b = GraphBuilder()
    x, n = b.input("x", (3,), "float32"), b.input("n", (2, 2), "int64")
    with pytest.raises(legato.LegatoError, match="bit shifts need integer operands, got "
                                                 "float32"):
        ATEN["aten.__lshift__.Scalar"](b, x, 2)
    with pytest.raises(legato.LegatoError, match="det needs a float tensor of square"):
        ATEN["aten._linalg_det.default"](b, n)


def test_determinants_of_empty_matrices():
    run_both(lambda a, e: (torch.linalg.det(a), *torch.linalg.slogdet(a), torch.linalg.det(e)),
             [torch.randn(3, 0, 0), torch.randn(0, 2, 2)])


def test_clamp_integer_bounds_wrap_into_the_tensor_dtype():
    """torch stores a clamp bound in the tensor's dtype first: -3 on uint8 is 253 (fuzz seed
    67 of the torch target found the bound passed through unwrapped)."""
    x = torch.tensor([0, 1, 5, 200, 254, 255], dtype=torch.uint8)
    run_both(lambda t: torch.clamp(t, min=-3), [x])
    run_both(lambda t: torch.clamp(t, max=-3), [x])
    run_both(lambda t: torch.clamp(t, min=-100, max=-2), [x])
