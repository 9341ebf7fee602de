"""GPU tests: skipped, with the reason, where no GPU (or no torch) is usable.

The GPU runs set ``PYCUTLASS_RT_REQUIRE_GPU=1``: then a GPU suite that cannot run here in
full (no GPU or a broken driver, no torch that sees the GPU, no jax that does, a library
without the JAX handler, a build with no kernel for this GPU) ends the run at collection,
before a test module is imported, with the reasons (a usage error), instead of skipping
green; a module that still skips itself at import fails its collection.

A test that needs kernels beyond the bfloat16 ones the default tier holds in every layout
asks the build first (helpers.require) and skips, saying what is missing; a call the
build then refuses fails the test (refusals are never caught into skips).
"""

import re

import pytest
from helpers import REQUIRE_GPU, gpu_reason, gpu_suite_reasons, require_gpu_mode, torch_reason

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


def _in_gpu_tree(path) -> bool:
    return "tests/gpu/" in str(path).replace("\\", "/")


def pytest_collectstart(collector):
    """Under the switch, the environment is checked once, before the first GPU test module
    is imported (modules ask the build for kernels as they are imported)."""
    if not require_gpu_mode() or not isinstance(collector, pytest.Module):
        return
    if not _in_gpu_tree(collector.path):
        return
    reasons = gpu_suite_reasons()
    if reasons:
        raise pytest.UsageError(
            f"{REQUIRE_GPU}=1, but the GPU suite cannot run here:\n"
            + "\n".join(f"  - {r}" for r in reasons)
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Under the switch, a GPU test module that skips itself at import (an importorskip of
    a framework) fails its collection instead."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and require_gpu_mode() and _in_gpu_tree(collector.path):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_GPU}=1, but {collector.nodeid} skipped itself: {reason}"


def pytest_collection_modifyitems(config, items):
    reason = gpu_reason() or torch_reason()
    # a soak runs where -m names it (not where it says "not soak")
    soak = re.search(r"(?<!not )\bsoak\b", config.getoption("markexpr") or "") is not None
    for item in items:
        if "soak" in item.keywords and not soak:
            item.add_marker(pytest.mark.skip(reason="a soak runs only when asked: -m soak"))
    gpu_items = [item for item in items if _in_gpu_tree(item.path)]
    if reason and gpu_items:
        if require_gpu_mode():  # (pytest_collectstart stopped the run before this)
            raise pytest.UsageError(f"{REQUIRE_GPU}=1, but {reason}")
        for item in gpu_items:
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
