# Packaging checks: the compiler probe and the cffi declarations.

import pytest

from legato_c_kernels import kernels as K
from legato_c_kernels import _build


def test_missing_compiler_message(monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no compiler
    monkeypatch.setattr(_build.sysconfig, "get_config_var", lambda name: "gcc -pthread")
    assert _build.find_c_compiler() is None
    with pytest.raises(SystemExit, match="needs a C compiler.*gcc"):
        _build.require_c_compiler()


def test_cc_environment_variable_wins(monkeypatch, tmp_path):
    fake = tmp_path / "mycc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CC", "mycc -O2")
    assert _build.find_c_compiler() == str(fake)


def test_header_constants_reach_python():
    assert K.MAX_NDIM == 8
    from legato_c_kernels._lib import lib
    assert lib.LGK_ERR_OVERFLOW == 3
