"""signal.dft and complex values: the op against numpy.fft, the torch importer's FFTs and
complex ops against eager PyTorch, ONNX DFT and STFT against onnxruntime.

Complex tensors are float tensors with a trailing (real, imag) axis throughout."""
from __future__ import annotations

import numpy as np
import pytest

import legato

BACKENDS = ("cpu_ref", "c_kernels")


def dft_module(shape, dtype="float32", **attrs):
    b = legato.GraphBuilder()
    x = b.input("x", shape, dtype)
    return b.build(b.call("signal.dft", x, **attrs))


def pairs(z) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


def run_everywhere(mod, *inputs):
    """{how: result}: cpu_ref's kernel, and the decomposition on each backend."""
    out = {"kernel": legato.reference(mod)(*inputs)}
    for backend in BACKENDS:
        out[backend] = legato.compile(mod, backend=backend)(*inputs)
    return out


def assert_close(got, want, rtol=2e-6):
    scale = max(float(np.abs(want).max()), 1.0)
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= rtol * scale * 10, float(np.abs(got - want).max())


# --- the op -----------------------------------------------------------------------------------

OP_CASES = [  # (shape, attrs, numpy's answer from the complex signal z)
    ((3, 16, 1), {}, lambda z: pairs(np.fft.fft(z, axis=1))),
    ((5, 3, 2), {"axis": 0, "length": 8}, lambda z: pairs(np.fft.fft(z, n=8, axis=0))),
    ((2, 9, 4, 2), {"axis": 1, "inverse": True, "length": 6, "norm": "ortho"},
     lambda z: pairs(np.fft.ifft(z, n=6, axis=1, norm="ortho"))),
    ((2, 4, 15, 1), {"onesided": True}, lambda z: pairs(np.fft.rfft(z, axis=2))),
    ((3, 7, 2), {"inverse": True, "onesided": True, "length": 13},
     lambda z: np.fft.irfft(z, n=13, axis=1)[..., None]),
    ((4, 6, 2), {"inverse": True, "onesided": True, "norm": "forward"},
     lambda z: np.fft.irfft(z, n=10, axis=1, norm="forward")[..., None]),
]


@pytest.mark.parametrize("shape, attrs, numpy_fft", OP_CASES,
                         ids=[str(c[1]) for c in OP_CASES])
def test_dft_matches_numpy_fft(shape, attrs, numpy_fft):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x64 = x.astype(np.float64)
    want = numpy_fft(x64[..., 0] if shape[-1] == 1 else x64[..., 0] + 1j * x64[..., 1])
    for how, got in run_everywhere(dft_module(shape, **attrs), x).items():
        assert_close(got, want), how


def test_real_signal_bins_0_and_half_have_an_exactly_zero_imaginary_part():
    """angle() of these bins sits on the branch cut: noise of 1e-16 in the table's sines
    would flip pi to -pi for a negative sum."""
    x = -np.abs(np.random.default_rng(1).standard_normal((2, 10, 1))).astype(np.float32)
    x[0, 0, 0] = 1.0  # one positive product: the sum of signed zeros is +0
    got = legato.compile(dft_module((2, 10, 1), onesided=True), backend="cpu_ref")(x)
    assert np.all(got[:, [0, 5], 1] == 0) and not np.any(np.signbit(got[0, [0, 5], 1]))


def test_dft_float64_keeps_its_precision():
    x = np.random.default_rng(2).standard_normal((2, 32, 2))
    got = legato.compile(dft_module((2, 32, 2), "float64"), backend="cpu_ref")(x)
    assert_close(got, pairs(np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=1)), rtol=1e-14)


@pytest.mark.parametrize("shape, dtype, attrs, message", [
    ((4, 8, 2), "float32", {"axis": 2}, "axis 2 is not a signal axis"),
    ((4, 8, 2), "float32", {"axis": -1}, "axis -1 is not a signal axis"),
    ((4, 8, 3), "float32", {}, "must end in an axis of 1 (real) or 2"),
    ((4, 8, 1), "bfloat16", {}, "must be float16, float32 or float64"),
    ((4, 8, 1), "float32", {"length": 0}, "transform length is 0"),
])
def test_dft_refuses_what_it_does_not_define(shape, dtype, attrs, message):
    with pytest.raises(legato.LegatoError, match="signal.dft") as err:
        dft_module(shape, dtype, **attrs)
    assert message in str(err.value)
