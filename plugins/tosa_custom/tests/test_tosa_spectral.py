"""Fourier transforms on tosa_custom: signal.dft has no TOSA operator, its decomposition (a
matmul by a constant cos/sin table) is what is emitted. A spectrogram front-end (frames,
window, one-sided DFT, magnitude) validates with tosa-opt and matches numpy on the TOSA
reference model."""
from __future__ import annotations

import numpy as np

import legato
from legato_tosa_custom.cases import KEEP


def spectrogram(frames: int, length: int):
    b = legato.GraphBuilder()
    x = b.input("x", (2, frames, length), "float32")
    window = b.const(np.hanning(length).astype(np.float32))
    spectrum = b.call("signal.dft", b.expand_dims(b.multiply(x, window), axes=[3]),
                      onesided=True)
    return b.build(b.sqrt(b.sum(b.multiply(spectrum, spectrum), axes=[3])))


def test_spectrogram_magnitudes_validate_and_run(tools):
    module = spectrogram(5, 16)
    text = legato.compile(module, backend=KEEP).artifact
    assert '"tosa.matmul"' in text and '"tosa.custom"' not in text
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    (got,) = tools.run_reference(text, [x], validate=True)
    want = np.abs(np.fft.rfft(x.astype(np.float64) * np.hanning(16), axis=-1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
