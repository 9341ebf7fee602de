"""The benchmark suite: pycutlass_rt next to cuBLAS and CUTLASS's Python API.

A source-checkout tool, not part of the installed package (benchmarks/README.md states
the method). Run it with ``python -m benchmarks [--group B] [--dtype bf16] [--out DIR]
[--quick]`` or ``python benchmarks/run.py ...``. Modules, each with one job:

- ``shapes``: groups A-N and the dtypes, as data (the one copy of the shape lists, but
  for the grids of A-D: heuristics/grids.py, which heuristics/sweep.py times too);
- ``device``: nvidia-smi readings around a run (tensors and timing come from the
  framework adapters of ``pycutlass_rt._backends``: torch, else cupy);
- ``timing``: interleaved device time (events or graph replay) and host time;
- ``peers``: cuBLAS through torch or cupy, and the CUTLASS Python interface;
- ``measure``: one case: operands, correctness check, timing, its record;
- ``suite``: the whole run, machine and versions, writing results as it goes;
- ``report``: summaries (geometric mean, worst shape), JSON, table, plots;
- ``progress``: the progress line; ``cli``: arguments and environment checks.
- ``conv``: convolutions against cuDNN, a script of its own (``python -m benchmarks.conv``).

Dependencies run one way: benchmarks/ imports heuristics/ (the shape corpus, the grids of
groups A-D, the profiler's launch list), never the reverse. Beyond the package's public
API it relies on internal modules the library keeps for it: ``pycutlass_rt._backends``
(cli, conv, quantized: the framework adapters ``tune()`` times with, so that both measure
alike), ``pycutlass_rt._conv_gemm.UNFOLD_LAGGING`` (conv's ``--no-unfold-lagging`` A/B of
the convolution routes) and ``pycutlass_rt._dtypes.DTYPE_BYTES`` (shapes: bytes per
element, for the traffic a case moves).
"""
