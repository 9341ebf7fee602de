"""``python -m benchmarks [--group B] [--dtype bf16] [--out DIR] [--quick] ...``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
