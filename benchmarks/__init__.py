"""The benchmark suite: pycutlass_rt next to cuBLAS and CUTLASS's Python API.

A source-checkout tool, not part of the installed package (benchmarks/README.md states
the method). Run it with ``python -m benchmarks [--group B] [--dtype bf16] [--out DIR]
[--quick]`` or ``python benchmarks/run.py ...``. Modules, each with one job:

- ``shapes``: groups A-J and the dtypes, as data (the one copy of the shape lists);
- ``device``: nvidia-smi readings around a run (tensors and timing come from the
  framework adapters of ``pycutlass_rt._backends``: torch, else cupy);
- ``timing``: interleaved device time (events or graph replay) and host time;
- ``peers``: cuBLAS through torch or cupy, and the CUTLASS Python interface;
- ``measure``: one case: operands, correctness check, timing, its record;
- ``suite``: the whole run, machine and versions, writing results as it goes;
- ``report``: summaries (geometric mean, worst shape), JSON, table, plots;
- ``progress``: the progress line; ``cli``: arguments and environment checks.
- ``conv``: convolutions against cuDNN, a script of its own (``python -m benchmarks.conv``).
"""
