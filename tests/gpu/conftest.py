"""GPU tests: skipped, with the reason, where no GPU (or no torch) is usable."""

import pytest
from helpers import gpu_reason


def pytest_collection_modifyitems(config, items):
    reason = gpu_reason()
    if reason is None:
        try:
            import torch

            if not torch.cuda.is_available():
                reason = "torch sees no CUDA device"
        except ImportError:
            reason = "the GPU suite uses torch for references and tensors; torch is not installed"
    if reason:
        for item in items:
            if "tests/gpu" in str(item.fspath).replace("\\", "/"):
                item.add_marker(pytest.mark.skip(reason=reason))


#: the error a problem gets when the build has no kernel of its dtypes at all
MISSING_DTYPES = "no kernel in this build computes"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test whose dtypes this build has no kernel for is skipped, not failed.

    Development builds filter kernels (PYCUTLASS_RT_KERNELS); the API tests assume the
    default tier's dtypes. Only the dtype-level error skips: a kernel that exists and
    rejects or miscomputes a problem still fails.
    """
    outcome = yield
    report = outcome.get_result()
    excinfo = call.excinfo
    if report.when == "call" and excinfo is not None and MISSING_DTYPES in str(excinfo.value):
        import pycutlass_rt as pcr

        if isinstance(excinfo.value, pcr.UnsupportedError):
            report.outcome = "skipped"
            report.longrepr = (
                str(item.fspath),
                item.location[1] or 0,
                f"Skipped: {str(excinfo.value).splitlines()[0][:200]}",
            )
