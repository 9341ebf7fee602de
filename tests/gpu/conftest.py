"""GPU tests: skipped, with the reason, where no GPU (or no torch) is usable.

A test that needs kernels beyond the bfloat16 ones the default tier holds in every layout
asks the build first (helpers.require) and skips, saying what is missing.
"""

import re

import pytest
from helpers import gpu_reason

try:
    import torch

    # Collect garbage as each capture begins (torch stopped doing so by default). A graph
    # an earlier test made with make_graphed_callables lives in a reference cycle; the
    # collector freeing it in the middle of a later test's capture destroys a graph and its
    # memory pool there, which invalidates that capture (and leaves torch's RNG broken for
    # the rest of the run): whole-suite runs failed so, in whichever test it landed.
    torch.compiler.config.force_cudagraph_gc = True
except ImportError:
    pass


def pytest_collection_modifyitems(config, items):
    reason = gpu_reason()
    if reason is None:
        try:
            import torch

            if not torch.cuda.is_available():
                reason = "torch sees no CUDA device"
        except ImportError:
            reason = "the GPU suite uses torch for references and tensors; torch is not installed"
    # a soak runs where -m names it (not where it says "not soak")
    soak = re.search(r"(?<!not )\bsoak\b", config.getoption("markexpr") or "") is not None
    for item in items:
        if "soak" in item.keywords and not soak:
            item.add_marker(pytest.mark.skip(reason="a soak runs only when asked: -m soak"))
    if reason:
        for item in items:
            if "tests/gpu" in str(item.fspath).replace("\\", "/"):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty tuned-cache directory for the test, strict mode off, and nothing remembered
    (_cache.reset also clears the library's remembered rankings)."""
    from pycutlass_rt import _cache

    monkeypatch.setenv(_cache.DIR_ENV, str(tmp_path))
    monkeypatch.delenv(_cache.STRICT_ENV, raising=False)
    _cache.reset()
    yield tmp_path
    _cache.reset()
