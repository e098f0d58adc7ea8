"""Build of SARP's compiled core: every sarp/_core/*.pyx becomes an extension module."""

from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

CORE = Path("sarp") / "_core"

extensions = [
    Extension(
        f"sarp._core.{pyx.stem}",
        [str(pyx)],
        include_dirs=[numpy.get_include(), str(CORE)],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    )
    for pyx in sorted(CORE.glob("*.pyx"))
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )
)
