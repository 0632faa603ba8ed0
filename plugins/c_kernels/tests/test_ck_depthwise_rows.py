"""Depthwise convs whose taps run a kernel row at a time (stride 1 along x, 3, 5 or 7
wide, channels in bands of 16): every output width around the 8-pixel block (maps
narrower than a block take a block per row), paddings, a dilation along y, depth
multipliers, activations and threads, against a float64 reference."""
import itertools

import numpy as np
import pytest

from legato_c_kernels import kernels as K


def reference(x, w, b, pad, dil_h, groups):
    _, _, h, width = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    oh = h + pad[0] + pad[2] - dil_h * (kh - 1)
    ow = width + pad[1] + pad[3] - (kw - 1)
    y = np.zeros((x.shape[0], o, oh, ow)) + b[None, :, None, None]
    per_group = o // groups
    for oc in range(o):
        for i, j in itertools.product(range(kh), range(kw)):
            y[:, oc] += w[oc, 0, i, j] * xp[:, oc // per_group, i * dil_h:i * dil_h + oh, j:j + ow]
    return y


@pytest.mark.parametrize("kw", [3, 5, 7])
@pytest.mark.parametrize("width", [1, 6, 7, 8, 9, 17])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_rows_match_reference(monkeypatch, kw, width, threads):
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    rng = np.random.default_rng(kw * 100 + width)
    cases = [(7, 21, 1, 1, (kw // 2,) * 4, "none"), (7, 16, 2, 1, (0, 0, 0, 0), "nn.relu"),
             (1, 5, 1, 2, (3, 2, 1, 3), "none"), (3, 32, 1, 1, (1, 0, 2, 1), "clip:min=0.0,max=6.0")]
    for kh, channels, multiplier, dil_h, pad, act in cases:
        h = 9
        if width + pad[1] + pad[3] < kw:
            continue
        x = rng.standard_normal((1, channels, h, width), dtype=np.float32)
        w = rng.standard_normal((channels * multiplier, 1, kh, kw), dtype=np.float32)
        b = rng.standard_normal(channels * multiplier, dtype=np.float32)
        got = K.KERNELS["nn.conv2d"](x, w, b, padding=pad, dilation=(dil_h, 1), groups=channels,
                                     activation=act)
        want = reference(x, w, b, pad, dil_h, channels)
        if act != "none":
            want = np.clip(want, 0, 6 if act.startswith("clip") else None)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
