"""Build glue for the cffi extension; metadata lives in pyproject.toml."""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "legato_c_kernels"))
from _build import require_c_compiler  # noqa: E402  (needs the path tweak above)


class BuildExtRequiringCompiler(build_ext):
    """Fail early with a clear message, instead of a bare 'command gcc failed'."""

    def run(self):
        require_c_compiler()
        super().run()


setup(
    cffi_modules=["legato_c_kernels/_build.py:ffibuilder"],
    cmdclass={"build_ext": BuildExtRequiringCompiler},
)
