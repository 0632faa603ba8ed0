"""numpy kernels of acme3p_npu: fresh arrays of the op's dtype, inputs left untouched."""
import numpy as np


def add(a, b):
    return np.asarray(np.add(a, b))  # numpy returns a scalar for 0-d inputs


def multiply(a, b):
    return np.asarray(np.multiply(a, b))


def softsign(data):
    return np.asarray(data / (1 + np.abs(data)), dtype=data.dtype)


def scaled_tanh(data, scale=1.0):
    return np.asarray(np.tanh(data * np.float32(scale)) / np.float32(scale), dtype=data.dtype)


KERNELS = {"add": add, "multiply": multiply, "acme3p.softsign": softsign,
           "acme3p.scaled_tanh": scaled_tanh}
