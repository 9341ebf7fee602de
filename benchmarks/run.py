#!/usr/bin/env python3
"""The benchmark suite: forwards to ``python -m pycutlass_rt bench`` (pycutlass_rt.bench).

    python benchmarks/run.py --group B --dtype bf16 --out benchmarks/results/<gpu>-<date>

Works with the package installed, or from a checkout with a built library. Stored
results live in benchmarks/results/.
"""
import os
import sys

try:
    import pycutlass_rt  # noqa: F401
except ImportError:  # a checkout without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pycutlass_rt.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
