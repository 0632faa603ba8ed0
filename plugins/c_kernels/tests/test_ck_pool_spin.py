"""LEGATO_SPIN_US: how long idle pool workers poll for the next task before sleeping."""
import numpy as np
import pytest

from legato.ir.errors import ExecutionError
from legato_c_kernels import kernels as K
from legato_c_kernels._lib import lib


@pytest.fixture(autouse=True)
def default_spin(monkeypatch):
    monkeypatch.delenv("LEGATO_SPIN_US", raising=False)
    yield
    monkeypatch.delenv("LEGATO_SPIN_US", raising=False)
    K.common.num_threads()  # restores the C default


@pytest.mark.parametrize("raw", ["-1", "1e3", "fast", "1000001"])
def test_a_bad_spin_setting_is_an_error_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("LEGATO_SPIN_US", raw)
    with pytest.raises(ExecutionError, match=f"LEGATO_SPIN_US.*{raw!r}"):
        K.common.num_threads()


def test_the_c_setter_checks_its_range():
    assert lib.lgk_set_pool_spin_us(1000001) == lib.LGK_ERR_ARG
    assert lib.lgk_set_pool_spin_us(0) == lib.LGK_OK
    assert lib.lgk_set_pool_spin_us(-1) == lib.LGK_OK  # the default again


@pytest.mark.parametrize("spin", ["0", "5", "200000"])
def test_two_thread_results_do_not_depend_on_the_spin(monkeypatch, rng, spin):
    monkeypatch.setenv("LEGATO_SPIN_US", spin)
    monkeypatch.setenv("LEGATO_NUM_THREADS", "2")
    a = rng.standard_normal((256, 192)).astype(np.float32)
    b = rng.standard_normal((192, 256)).astype(np.float32)
    want = a.astype(np.float64) @ b
    for _ in range(3):  # workers asleep between calls when the spin is short
        np.testing.assert_allclose(K.matmul(a, b), want, rtol=1e-4, atol=1e-3)
