"""The README's examples, run as written (each code block in a fresh namespace), where
their framework is installed."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blocks():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("code", blocks(), ids=lambda c: c.split()[1].rstrip(","))
def test_readme_example_runs(code):
    framework = code.split()[1].rstrip(",")  # "import torch, ..." names it first
    pytest.importorskip(framework)
    from helpers import require

    require("bfloat16") if framework != "cupy" else require("float16", "float32")
    exec(compile(code, "README.md", "exec"), {})
