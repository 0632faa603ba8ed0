"""Reference kernel of signal.dft: numpy.fft in float64 on (real, imag) pairs, independent
of the cosine-table decomposition it checks."""
from __future__ import annotations

import numpy as np

from legato.plugin_api import dft_axis, dft_sizes


def dft(data, *, axis=-2, inverse=False, onesided=False, length=None, norm="backward"):
    """ONNX DFT on `(..., 1)` real or `(..., 2)` complex data (numpy.fft's `norm`)."""
    axis = dft_axis(axis, data.ndim)
    n, bins = dft_sizes(data.shape, axis, inverse, onesided, length)
    x = data.astype(np.float64)
    signal = x[..., 0] if data.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    if inverse and onesided:  # a half spectrum in, the real signal out
        return np.fft.irfft(signal, n=n, axis=axis, norm=norm)[..., None].astype(data.dtype)
    transform = np.fft.ifft if inverse else np.fft.fft
    y = np.take(transform(signal, n=n, axis=axis, norm=norm), np.arange(bins), axis=axis)
    return np.stack([y.real, y.imag], axis=-1).astype(data.dtype)


KERNELS = {"signal.dft": dft}
