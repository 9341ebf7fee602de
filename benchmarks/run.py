#!/usr/bin/env python3
"""The benchmark suite as a script: the same as ``python -m benchmarks`` (benchmarks/README.md).

    python benchmarks/run.py --group B --dtype bf16 --out /tmp/bench-h200

Runs from a checkout, with pycutlass_rt installed or a built library in build/ (or
``PYCUTLASS_RT_LIBRARY``).
"""

import os
import sys

# Python put this file's folder first on the path: put the checkout there instead, so that
# ``benchmarks`` imports as a package and its modules do not shadow top-level names.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from benchmarks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
