"""Fixtures of the c_kernels tests (helpers live in ck_util; backend_factory and the
plugin fixtures come from the root conftest.py)."""
import numpy as np
import pytest

from ck_util import available_isas
from legato_c_kernels._lib import lib


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)


@pytest.fixture(params=available_isas(), ids=lambda i: {1: "generic", 2: "avx2", 3: "avx512"}[i])
def isa(request):
    assert lib.lgk_gemm_force_isa(request.param) == lib.LGK_OK
    yield request.param
    lib.lgk_gemm_force_isa(lib.LGK_ISA_AUTO)

