"""compute-sanitizer over tests/gpu/sanitize_cases.py: every tool must report zero errors.

Deselect with ``-m "not sanitizer"`` for a quick GPU run; each tool takes up to a minute.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sanitize_cases.py")


def sanitizer():
    for path in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer"):
        if path and os.path.exists(path):
            return path
    return None


@pytest.mark.sanitizer
@pytest.mark.skipif(sanitizer() is None, reason="compute-sanitizer is not installed")
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "initcheck", "synccheck"])
def test_sanitizer_reports_nothing(tool):
    cmd = [
        sanitizer(),
        "--tool",
        tool,
        "--error-exitcode",
        "99",
        "--print-limit",
        "20",
        sys.executable,
        CASES,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    # racecheck sums up hazards, the other tools errors; both must be zero
    assert re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards", out), out[-6000:]
    assert "all results match" in out, out[-6000:]
