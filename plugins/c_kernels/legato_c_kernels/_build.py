"""cffi build script (out-of-line API mode) for ``legato_c_kernels._lib``.

Used by setup.py through ``cffi_modules``. For development it can also build the
extension in place::

    python legato_c_kernels/_build.py        # from plugins/c_kernels

The C declarations are read from ``csrc/legato_kernels.h`` so the header stays the
single source of truth. No ``-march=native``: the GEMM and the elementwise loops pick
AVX-512 / AVX2 code paths at run time, so the built library runs on any x86-64.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

from cffi import FFI

PROJECT = Path(__file__).resolve().parent.parent
CSRC = "csrc"
SOURCES = ["common.c", "gemm.c", "conv_pool.c", "conv_direct.c", "conv_winograd.c", "depthwise.c",
           "elementwise.c", "norms.c", "softmax_wide.c", "movement.c", "qgemm.c", "qconv.c",
           "qelementwise.c", "qrescale.c", "qdwconv.c", "qconv_vnni.c", "qpool.c"]
HEADER = "legato_kernels.h"

# -ffp-contract=fast lets FMA-capable code paths fuse multiply-adds; -fno-math-errno
# lets sqrtf vectorize. Neither changes results beyond rounding. The alignment flags keep
# the GEMM's hot loops on the same cache-line boundaries whatever code precedes them:
# without them, adding an unrelated function moved them and cost 5-10% of a GEMM.
COMPILE_ARGS = ["-O3", "-std=c11", "-pthread", "-ffp-contract=fast", "-fno-math-errno",
                "-falign-functions=64", "-falign-loops=32"]
LINK_ARGS = ["-pthread"]

NO_COMPILER_MESSAGE = (
    "legato-c-kernels needs a C compiler to build its kernels, but none was found "
    "(looked for {candidates}). Install one, e.g. `apt-get install gcc` or "
    "`dnf install gcc`, or point the CC environment variable at it."
)


def find_c_compiler() -> str | None:
    """Return the path of the C compiler setuptools will use, or None if missing."""
    candidates = _compiler_candidates()
    for cand in candidates:
        found = shutil.which(cand)
        if found:
            return found
    return None


def _compiler_candidates() -> list[str]:
    configured = os.environ.get("CC") or sysconfig.get_config_var("CC") or ""
    words = shlex.split(configured)
    return ([words[0]] if words else []) + ["cc", "gcc", "clang"]


def require_c_compiler() -> str:
    """Return the compiler path or stop the build with an actionable message."""
    found = find_c_compiler()
    if found is None:
        candidates = ", ".join(dict.fromkeys(_compiler_candidates()))
        raise SystemExit(NO_COMPILER_MESSAGE.format(candidates=candidates))
    return found


def _cdef_from_header(text: str) -> str:
    """Strip what cffi's cdef parser does not accept: include guards, #include,
    and the C++ ``extern "C"`` wrapper. ``#define NAME <int>`` lines are kept."""
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and not re.match(r"#define\s+LGK_\w+\s+\d+\s*$", stripped):
            continue
        kept.append(line)
    return "\n".join(kept)


def _included_files() -> list[str]:
    """The headers and .inc files the sources include (the C tests' own excepted): a
    change to any of them rebuilds the library (a kernel in an .inc file was left out
    of the list, and an edit to it kept the old build)."""
    folder = PROJECT / CSRC
    return sorted(path.name for pattern in ("*.h", "*.inc") for path in folder.glob(pattern)
                  if not path.name.startswith("test_"))


def _make_builder(csrc: str = CSRC) -> FFI:
    """``csrc`` is relative to the project for setup.py (setuptools rejects
    absolute source paths) and absolute for in-place builds (cffi compiles from
    inside its temporary directory)."""
    header = (PROJECT / CSRC / HEADER).read_text(encoding="utf-8")
    builder = FFI()
    builder.cdef(_cdef_from_header(header))
    builder.set_source(
        "legato_c_kernels._lib",
        f'#include "{HEADER}"',
        sources=[f"{csrc}/{name}" for name in SOURCES],
        include_dirs=[csrc],
        depends=[f"{csrc}/{name}" for name in _included_files()],
        extra_compile_args=COMPILE_ARGS,
        extra_link_args=LINK_ARGS,
        libraries=["m"],
    )
    return builder


# Installed wheels ship no C sources: the builder only exists in a source tree,
# so importing this module elsewhere (e.g. for find_c_compiler) stays harmless.
ffibuilder = _make_builder() if (PROJECT / CSRC / HEADER).is_file() else None


def build_in_place() -> list[Path]:
    """Compile into the package directory (development builds).

    The new library takes the name of every ``_lib*.so`` already there (pip builds
    ``_lib.abi3.so``, a direct build ``_lib.<python tag>.so``; a stale one would shadow
    or be shadowed), else its own. It replaces each by a rename, never by writing into
    it: running processes have the old file mapped, and truncating it crashes them."""
    require_c_compiler()
    builder = _make_builder(str(PROJECT / CSRC))
    built = Path(builder.compile(tmpdir=str(PROJECT / "build" / "cffi"), verbose=False))
    package = PROJECT / "legato_c_kernels"
    targets = sorted(package.glob("_lib*.so")) or [package / built.name]
    for target in targets:
        staged = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.copy2(built, staged)
        os.replace(staged, target)
    return targets


if __name__ == "__main__":
    print(*build_in_place(), sep="\n")
    sys.exit(0)
