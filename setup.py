"""The Python package `shiftstack`, built by CMake through scikit-build (see pyproject.toml)."""

import re
from pathlib import Path

from skbuild import setup

# One version: the project() line of the root CMakeLists.txt.
version = re.search(r"project\(shiftstack VERSION ([0-9.]+)", Path(__file__).with_name("CMakeLists.txt").read_text())[1]

setup(
    name="shiftstack",
    version=version,
    description="Shift-and-stack matched-filter search for faint moving objects (C++/CUDA core)",
    long_description=Path(__file__).with_name("docs").joinpath("python.md").read_text(),
    long_description_content_type="text/markdown",
    packages=["shiftstack"],
    package_dir={"": "python"},
    cmake_install_dir="python",  # python/CMakeLists.txt installs into shiftstack/ under it
    cmake_args=["-DSHIFTSTACK_TESTS=OFF", "-DSHIFTSTACK_PYTHON=ON"],
    python_requires=">=3.9",
    install_requires=["numpy"],
    extras_require={"table": ["astropy"], "examples": ["astropy", "matplotlib"]},
)
