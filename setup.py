"""The host engine's C library, built by ``pip install`` on Linux.

Its interface is declared once, in ``csrc/nano_kernels.h``: every C file
includes it (so the compiler checks each definition against it), and cffi
reads it and compiles a module that calls each function through it (so the
compiler checks every call too). The build is optional: where it fails (no C
compiler, say), the package installs without it and ``auto`` runs on MLX,
saying why. Everything else is in ``pyproject.toml``.
"""

import sys
from pathlib import Path

from setuptools import setup

SOURCES = Path("mlx_speech/host_engine/csrc")
FLAGS = [
    "-O3",
    "-march=native",  # built where it runs: for this machine's CPU
    "-ffp-contract=off",  # fuse no multiply-add that MLX does not fuse
    "-fno-trapping-math",
    "-flto=auto",  # calls between the files inline as within one
]


def host_engine_extensions() -> list:
    if not sys.platform.startswith("linux"):
        return []
    from cffi import FFI

    ffi = FFI()
    header = (SOURCES / "nano_kernels.h").read_text()
    ffi.cdef("\n".join(line for line in header.splitlines() if not line.startswith("#")))
    ffi.set_source(
        "mlx_speech.host_engine._nano_kernels",
        '#include "nano_kernels.h"',
        sources=sorted(str(path) for path in SOURCES.glob("*.c")),
        include_dirs=[str(SOURCES)],
        extra_compile_args=FLAGS,
        extra_link_args=FLAGS,
        libraries=["m", "pthread"],
    )
    extension = ffi.distutils_extension("build/cffi")
    extension.optional = True  # a failed build leaves the MLX backend
    return [extension]


if __name__ == "__main__":  # as pip's build runs it
    setup(ext_modules=host_engine_extensions())
