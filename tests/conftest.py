"""Shared fixtures: the loaded library, and whether a GPU is usable."""

import os
import sys

import pytest
from helpers import gpu_reason

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "native"))  # the catalog package (native/catalog/)
sys.path.append(ROOT)  # benchmarks/, never installed; last: an installed pycutlass_rt wins


@pytest.fixture(scope="session")
def lib():
    from pycutlass_rt import _lib

    return _lib.load()


@pytest.fixture(scope="session")
def has_gpu():
    return gpu_reason() is None
