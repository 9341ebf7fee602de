"""Collection of the package's doctests (``--doctest-modules`` in pyproject.toml, over
``testpaths``' pycutlass_rt).

The modules of pycutlass_rt/torch/ import torch (they register torch operators), so
without a torch they can use (2.4 or later), as in CI, that folder's doctests are not
collected; its tests (tests/cpu/test_torch_ops.py, tests/gpu/test_torch_ops_gpu.py) skip
themselves there.

Examples that need a GPU follow a header line ``Example (on a GPU):`` in their docstring
(after a blank line), ``Example (on a GPU with <kernels>):`` where they need kernels beyond
the default tier's 16-bit ones (``GPU_KERNELS`` says which); a docstring may hold several,
each section needing its own kernels and those of the sections before it. They run only
where a GPU (and the torch or jax the docstring's examples name) is usable and the build
holds the kernels there; elsewhere they skip, with the reason, while the examples before
them still run. Under ``PYCUTLASS_RT_REQUIRE_GPU=1`` (the GPU runs), a GPU example that
cannot run for want of a GPU, torch or jax fails instead; one whose kernels the build
lacks still skips, as ``tests/helpers.require`` does.
"""

import doctest
import importlib.metadata
import importlib.util
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.abspath(__file__))


def _torch_usable() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return True  # a source build without metadata: let the import say
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (2, 4)


collect_ignore = [] if _torch_usable() else ["pycutlass_rt/torch"]

#: a header GPU examples follow, with the kernels they need, if any (text may follow it)
GPU_HEADER = re.compile(r"^[ \t]*Example \(on a GPU(?: with (?P<kernels>[^)]+))?\):.*$", re.M)
#: what a header's "with ..." may name: the kernels (tests/helpers.py missing_kernel's
#: arguments) that must run on this GPU for its examples
GPU_KERNELS = {
    # fp8 with row and column scale vectors: the dequantizing epilogue
    "fp8 kernels": dict(dtype="float8_e4m3fn", out="bfloat16", layout="tn", epilogue="scaled"),
    # per-token-group activations, 128x128-block weights (DeepSeek-V3's recipe)
    "block-scaled fp8 kernels": dict(
        dtype="float8_e4m3fn", out="bfloat16", layout="tn", scales=("groups", "blocks")
    ),
}
#: the frameworks a docstring's examples name, each needing its own view of the GPU
FRAMEWORKS = {"torch": re.compile(r"\btorch\b"), "jax": re.compile(r"\bjax\b")}
#: a GPU doctest that must fail (under PYCUTLASS_RT_REQUIRE_GPU=1), and why
FAIL = pytest.StashKey[str]()


def _helpers():
    """tests/helpers.py (the GPU suite's own checks), as the tests import it."""
    tests = os.path.join(ROOT, "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import helpers

    return helpers


def gpu_sections(test: doctest.DocTest):
    """The GPU sections of ``test``, in order: (the kernels its header names, a GPU_KERNELS
    key or None; its examples and those of every later section); [] without a header."""
    doc = test.docstring or ""
    headers = [
        (doc.count("\n", 0, m.start()), m.group("kernels")) for m in GPU_HEADER.finditer(doc)
    ]
    for _, kernels in headers:
        if kernels is not None and kernels not in GPU_KERNELS:
            raise pytest.UsageError(
                f"{test.name}: 'Example (on a GPU with {kernels}):' names none of the kernels "
                f"conftest.py knows ({', '.join(GPU_KERNELS)})"
            )
    return [
        (kernels, [ex for ex in test.examples if ex.lineno > line]) for line, kernels in headers
    ]


def _environment(helpers, test: doctest.DocTest):
    """Why no GPU example of ``test`` can run here for the machine's sake (no GPU, no torch
    or jax that sees it, where the examples use them), or None."""
    source = "".join(ex.source for ex in test.examples)
    reason = helpers.gpu_reason()
    if reason is None and FRAMEWORKS["torch"].search(source):
        reason = helpers.torch_reason()
    if reason is None and FRAMEWORKS["jax"].search(source):
        reason = helpers.jax_reason()
    return reason


def pytest_collection_modifyitems(config, items):
    """The GPU examples of each doctest run where they can; see the module's docstring."""
    doctests = [item for item in items if isinstance(getattr(item, "dtest", None), doctest.DocTest)]
    if not doctests:
        return
    helpers = _helpers()
    required = helpers.require_gpu_mode()
    if required and "pycutlass_rt/torch" in collect_ignore:
        raise pytest.UsageError(
            f"{helpers.REQUIRE_GPU}=1, but pycutlass_rt/torch's doctests are not collected: "
            "they need torch 2.4 or later"
        )
    for item in doctests:
        sections = gpu_sections(item.dtest)
        if not sections:
            continue
        item.add_marker(pytest.mark.gpu)
        skipped, reason = [], _environment(helpers, item.dtest)
        if reason is not None:
            if required:
                item.stash[FAIL] = f"{helpers.REQUIRE_GPU}=1, but {reason}"
                continue
            reason, skipped = f"needs a GPU: {reason}", sections[0][1]
        else:  # from the first section whose kernels this build lacks here, on
            for kernels, examples in sections:
                missing = kernels and helpers.missing_kernel(**GPU_KERNELS[kernels])
                if missing:
                    reason, skipped = f"needs {kernels}: {missing}", examples
                    break
        if len(skipped) == len(item.dtest.examples):
            item.add_marker(pytest.mark.skip(reason=reason))
        else:  # the examples before them run
            for ex in skipped:
                ex.options[doctest.SKIP] = True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    """A GPU doctest that cannot run under ``PYCUTLASS_RT_REQUIRE_GPU=1`` fails (in place of
    running)."""
    reason = item.stash.get(FAIL, None)
    if reason is not None:
        pytest.fail(reason, pytrace=False)
