"""Shared helpers of the c_kernels tests (float64 references, tolerances)."""

import numpy as np

SIZES = (1, 3, 17, 129)


def assert_close(got, ref, rtol=1e-4, atol=None):
    """float32 result vs a float64 reference: relative 1e-4, with an absolute floor
    proportional to the data's magnitude for entries that cancel to ~0."""
    ref = np.asarray(ref, dtype=np.float64)
    assert got.dtype == np.float32
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if atol is None:
        finite = np.abs(ref[np.isfinite(ref)])
        atol = 1e-6 * max(1.0, float(finite.max()) if finite.size else 1.0)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)


def f32(rng, *shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, size=shape).astype(np.float32)
