"""legato-c-kernels: float32 CPU kernels for the legato ``c_kernels`` backend.

The kernels live in :mod:`legato_c_kernels.kernels` (``KERNELS`` maps op names to
callables); the compiled C library is the private ``legato_c_kernels._lib``.
"""

__version__ = "0.1.0"
