"""FFTs and complex values in the PyTorch importer, against torch eager on cpu_ref and
c_kernels: FNet's token mixing, spectrogram magnitudes, rfft/irfft, fftn/ifftn, complex
arithmetic, complex buffers (rotary embeddings as complex products), complex inputs and
results (as (real, imag) pairs, the layout torch.view_as_real gives)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import legato  # noqa: E402
from legato.frontends import torch as torch_frontend  # noqa: E402
from tests.test_torch_more import Fn  # noqa: E402


def spectral_ops(z):
    w = z * torch.conj(z) / (z + 1.5) - 2 * z + torch.tensor(0.5) * z / 3
    gated = torch.where(z.abs() > 1, z, 0.0).reciprocal() + torch.where(z.real > 0, 2.0, z)
    return (w, w.angle(), torch.fft.fftshift(w, dim=0).exp(), torch.cat([z, w], dim=1),
            torch.where(gated.abs() < 1e6, gated, 0),
            z + torch.full(z.shape, 1 - 2j) + torch.ones(z.shape[-1], dtype=torch.cfloat))


class Rotary(nn.Module):
    """Rotary embeddings as Meta's Llama reference code writes them: a complex buffer of
    rotations multiplied into the query viewed as complex pairs."""
    def __init__(self):
        super().__init__()
        angles = torch.outer(torch.arange(6.0), 1 / 10000 ** (torch.arange(0, 8, 2) / 8))
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles))

    def forward(self, q):
        pairs = torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * self.freqs_cis).flatten(2)


def stft_magnitude(x):
    return torch.stft(x, 16, 4, window=torch.hann_window(16), return_complex=True).abs()


def istft_and_more(x):
    window = torch.hann_window(16)
    spectrum = torch.stft(x, 16, 4, window=window, return_complex=True)
    return (torch.istft(spectrum, 16, 4, window=window, length=x.shape[-1]),
            torch.view_as_real(spectrum * 1j).flatten(-2), torch.fft.hfft(spectrum, dim=1),
            (x[:, :9] / (spectrum[..., 0] + 20j)).real)  # a bin near 0 is ill-conditioned


torch.manual_seed(0)

# name: (module, inputs, ATen ops its export must call)
CASES = {
    "fnet_mixing": (Fn(lambda x: torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real),
                    [torch.randn(2, 8, 6)], {"aten._fft_r2c.default", "aten._fft_c2c.default",
                                             "aten.view_as_real.default"}),
    "stft_abs": (Fn(stft_magnitude), [torch.randn(2, 64)], {"aten.abs.default"}),
    "istft": (Fn(istft_and_more), [torch.randn(2, 64)], {"aten._fft_c2r.default"}),
    "rfft_irfft": (Fn(lambda x: (torch.fft.irfft(torch.fft.rfft(x) * 2, n=x.shape[-1]),
                                 torch.fft.irfft(torch.fft.rfft(x, norm="ortho"), n=7,
                                                 norm="ortho"))),
                   [torch.randn(3, 10)], {"aten._fft_c2r.default"}),
    "fftn_ifftn": (Fn(lambda x: (torch.fft.ifftn(torch.fft.fftn(x, norm="forward"),
                                                 norm="forward").imag,
                                 torch.fft.fftn(x, dim=(0, 2)).abs(),
                                 torch.fft.irfft2(torch.fft.rfft2(x), s=x.shape[-2:]))),
                   [torch.randn(3, 4, 10)], {"aten._to_copy.default"}),
    "arithmetic": (Fn(lambda x: spectral_ops(torch.fft.rfft(x))), [torch.randn(5, 12)],
                   {"aten.mul.Tensor", "aten.div.Tensor", "aten.angle.default",
                    "aten.exp.default", "aten.cat.default", "aten.where.self",
                    "aten.reciprocal.default"}),
    "rotary_buffer": (Rotary(), [torch.randn(2, 6, 8)], {"aten.view_as_complex.default"}),
    "complex_in_out": (Fn(lambda z, x: (torch.fft.ifft(z, dim=0), z * x, z.abs())),
                       [torch.randn(4, 3, dtype=torch.complex64), torch.randn(3)],
                       {"aten._fft_c2c.default"}),
}


def as_pairs(t):
    return (torch.view_as_real(t) if t.is_complex() else t).detach().numpy()


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    module, inputs, ops = CASES[request.param]
    program = torch.export.export(module, tuple(inputs)).run_decompositions(
        torch_frontend.decomposition_table())
    called = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert ops <= called, sorted(ops - called)
    return module, inputs, torch_frontend.load(module, inputs)


def as_float64(x):
    return x.to(torch.complex128 if x.is_complex() else torch.float64)


def assert_close_to_eager(got, module, inputs):
    """Each element must be within tolerance of eager float32, or no further from eager float64
    than eager float32 is: where a case is ill-conditioned (exp of a value near the pole of
    1 / (z + 1.5)) float32 eager is itself off by more than the tolerance, and legato
    computing the exact value more closely is not an error."""
    want = module(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    exact = module(*map(as_float64, inputs)) if isinstance(module, Fn) else want
    exact = exact if isinstance(exact, tuple) else (exact,)
    assert len(got) == len(want)
    for g, w, e in zip(got, map(as_pairs, want), map(as_pairs, exact)):
        assert g.shape == w.shape
        atol = 2e-5 * max(1.0, np.abs(w).max())
        near_eager = np.abs(g - w) <= atol + 2e-5 * np.abs(w)
        no_worse = np.abs(g - e) <= 2 * np.abs(w - e) + atol
        bad = ~(near_eager | no_worse)
        assert not bad.any(), (f"{bad.sum()} elements off, e.g. got {g[bad][:3]}, eager float32 "
                               f"{w[bad][:3]}, float64 {e[bad][:3]}")


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_matches_eager(case, backend):
    module, inputs, mod = case
    got = legato.compile(mod, backend=backend)(*(as_pairs(x) for x in inputs))
    assert_close_to_eager(got if isinstance(got, tuple) else (got,), module, inputs)


def test_fnet_model_matches_eager():
    transformers = pytest.importorskip("transformers")
    config = transformers.FNetConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                                     intermediate_size=24, max_position_embeddings=16)
    model = transformers.FNetModel(config).eval()
    ids = torch.randint(0, 40, (2, 12))
    mod = torch_frontend.load(model, (ids,))
    assert "signal.dft" in {c.op for c in mod.main.calls}
    want = model(ids).last_hidden_state.detach().numpy()
    got = legato.compile(mod, backend="c_kernels")(ids.numpy())[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_unmapped_complex_ops_are_refused_by_name():
    module = Fn(lambda x: torch.fft.fft(x).sqrt().real)
    with pytest.raises(legato.LegatoError, match=r"aten\.sqrt\.default on complex values"):
        torch_frontend.load(module, (torch.randn(4, 8),))
