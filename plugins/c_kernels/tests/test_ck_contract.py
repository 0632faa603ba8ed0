# The reference-kernel calling convention: KERNELS[op](*inputs, **attrs) with every
# attribute present (defaults filled in, lists as tuples), plus the out= variant.

import numpy as np
import pytest

from legato.ir.errors import LegatoError

from ck_util import f32

from legato.testing import samples
from legato_c_kernels import kernels as K
from legato_c_kernels.kernels import (casts, elementwise, movement, qnn, qnn_elementwise,
                                      qnn_rescale)


_rng = np.random.default_rng(7)
X = f32(_rng, 2, 3, 4, 5)
POS = np.abs(X) + np.float32(0.1)
W = f32(_rng, 6, 5)
CW = f32(_rng, 4, 3, 3, 3)

# op -> (inputs, attrs with every attribute of docs/ops.md)
CALLS = {
    "matmul": ((X, f32(_rng, 5, 2)), {}),
    "nn.linear": ((X, W, f32(_rng, 6)), {}),
    "nn.conv2d": ((X[:, :, :, :4].copy(), CW, f32(_rng, 4)),
                  dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
                       data_layout="NCHW", kernel_layout="OIHW")),
    "nn.max_pool2d": ((X,), dict(pool_size=(2, 2), strides=None, padding=(0, 0, 0, 0),
                                 dilation=(1, 1), ceil_mode=False, data_layout="NCHW")),
    "nn.avg_pool2d": ((X,), dict(pool_size=(2, 2), strides=(1, 1), padding=(1, 0, 1, 0),
                                 dilation=(1, 1), ceil_mode=True, count_include_pad=True,
                                 data_layout="NCHW")),
    "nn.softmax": ((X,), dict(axis=-2)),
    "nn.log_softmax": ((X,), dict(axis=1)),
    "nn.layer_norm": ((X, f32(_rng, 4, 5), f32(_rng, 5)), dict(axes=(-2, -1), epsilon=1e-5)),
    "nn.rms_norm": ((X, f32(_rng, 5)), dict(axes=(-1,), epsilon=1e-6)),
    **{op: ((X,), dict(axes=(0, -1), keepdims=True)) for op in ("sum", "mean", "max", "min")},
    "permute_dims": ((X,), dict(axes=(3, 1, 0, 2))),
    "clip": ((X * 8,), dict(min=0.0, max=6.0)),  # the one variant in C (relu6)
}


def _sampled(op):
    """A case of an elementwise kernel from the op's samples (legato.testing): the first
    with float32 inputs that are not empty, every attribute present."""
    for sample in samples(op, count=24):
        if all(a.dtype == np.float32 and a.size and a.ndim for a in sample.inputs):
            return tuple(sample.inputs), dict(sample.attrs)
    raise AssertionError(f"no float32 sample of {op}")


# the kernels made from the C library's op lists get their cases from the samples
CALLS.update({op: _sampled(op) for op in elementwise.KERNELS if op not in CALLS})


def test_every_kernel_has_a_contract_case():
    # the float32 kernels; data movement of any dtype: tests/test_ck_movement.py, casts:
    # tests/test_ck_integer.py, the int8 kernels: tests/test_ck_qnn.py, test_ck_qnn_add.py,
    # test_ck_qnn_rescale.py
    assert set(CALLS) == set(K.KERNELS) - set(movement.KERNELS) - set(casts.KERNELS) \
        - set(qnn.KERNELS) - set(qnn_elementwise.KERNELS) - set(qnn_rescale.KERNELS)


@pytest.mark.parametrize("op", sorted(CALLS))
def test_convention_and_out_buffer(op):
    inputs, attrs = CALLS[op]
    kernel = K.KERNELS[op]
    result = kernel(*inputs, **attrs)
    assert isinstance(result, np.ndarray) and result.dtype == np.float32
    assert all(np.array_equal(x, y) for x, y in zip(inputs, CALLS[op][0]))  # inputs untouched
    out = np.full(result.shape, np.nan, np.float32)
    assert kernel(*inputs, **attrs, out=out) is out
    np.testing.assert_array_equal(out, result)
    with pytest.raises(LegatoError, match=op.replace(".", r"\.")):
        kernel(*inputs, **attrs, out=np.empty(result.shape + (1,), np.float32))
    with pytest.raises(LegatoError, match="float32"):
        kernel(inputs[0].astype(np.float64), *inputs[1:], **attrs)
