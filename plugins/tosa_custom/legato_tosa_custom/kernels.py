"""numpy semantics of the TOSA-only ops (ops.py), to run legalized modules without the
TOSA tools: `simulate(module)` uses cpu_ref for every legato op and these for the rest."""
from __future__ import annotations

import numpy as np

import legato
from legato.plugin_api import Backend, Interpreter


def reciprocal(a):
    with np.errstate(divide="ignore"):
        return np.asarray(np.reciprocal(a))  # numpy gives a scalar for a 0-d array


def pow(a, b):  # noqa: A001 - the TOSA operator's name
    """TOSA POW on its domain (a finite base > 0, a finite exponent), where it is numpy's."""
    with np.errstate(all="ignore"):
        return np.asarray(np.power(a, b))


def gather(values, indices):
    """[N, K, C] values, [N, W] indices -> [N, W, C]."""
    return np.stack([v[i] for v, i in zip(values, indices)]).astype(values.dtype, copy=False)


def cast(data, dtype):
    """TOSA CAST: floats round to nearest, ties to even, and saturate into integers."""
    target = np.dtype(dtype)
    if np.issubdtype(data.dtype, np.floating) and np.issubdtype(target, np.integer):
        info = np.iinfo(target)
        return np.asarray(np.clip(np.rint(data), info.min, info.max)).astype(target)  # 0-d stays
    return data.astype(target)                                                     # an array


KERNELS = {"tosa.reciprocal": reciprocal, "tosa.gather": gather, "tosa.cast": cast,
           "tosa.pow": pow}


def simulate(module):
    """A runner for a module legalized for tosa_custom (cpu_ref kernels plus these)."""
    host = legato.context()
    sim = Backend("tosa_sim", {}, kernels=KERNELS)
    return Interpreter(module, host.backend("cpu_ref"), sim, (), host.registry)
