"""Problems without work through every kernel of the build, one subprocess per arch family.

tests/gpu/degenerate_cases.py forces each kernel by name through empty batches, M, N or K
of 0 and empty groups; a subprocess per family turns a crash of the process into a
failure that names the kernel and the case it died in.
"""

import os
import subprocess
import sys

import pytest
from helpers import runnable_kernels

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "degenerate_cases.py")
FAMILIES = sorted(
    {str(k.family) for grouped in (False, True) for k in runnable_kernels(grouped=grouped)}
)


def run_cases(which):
    r = subprocess.run([sys.executable, CASES, which], capture_output=True, text=True, timeout=900)
    lines = r.stdout.splitlines()
    failures = [x for x in lines if x.startswith("FAIL ")]
    if r.returncode not in (0, 1) or (r.returncode == 1 and not failures):
        started = [x[len("start ") :] for x in lines if x.startswith("start ")]
        where = started[-1] if started else "before the first case"
        pytest.fail(f"the process died (exit {r.returncode}) in {where}\n{r.stderr[-3000:]}")
    assert not failures, "\n".join(failures)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert any(x.startswith("ok ") for x in lines), r.stdout[-3000:]


@pytest.mark.skipif(not FAMILIES, reason="no kernel of this build runs on this GPU")
@pytest.mark.parametrize("family", FAMILIES)
def test_every_kernel_of_the_family_survives_empty_problems(family):
    run_cases(family)


@pytest.mark.skipif(not FAMILIES, reason="no kernel of this build runs on this GPU")
def test_selected_kernels_survive_empty_problems():
    run_cases("selected")
