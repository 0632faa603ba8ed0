import sys, pathlib; sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "core"))  # noqa: E401,E702

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)
