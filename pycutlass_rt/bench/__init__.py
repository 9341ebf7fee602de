"""The benchmark suite of BENCHMARKS.md: pycutlass_rt next to cuBLAS and CUTLASS's Python API.

Run it with ``python -m pycutlass_rt bench [--group B] [--dtype bf16] [--out DIR] [--quick]``.
Modules, each with one job:

- ``shapes``: groups A-H and the dtypes, as data (the one copy of the shape lists);
- ``device``: nvidia-smi readings around a run (tensors and timing come from the
  framework adapters of ``pycutlass_rt._backends``: torch, else cupy);
- ``timing``: interleaved device time (events or graph replay) and host time;
- ``peers``: cuBLAS through torch or cupy, and the CUTLASS Python interface;
- ``run``: one case: operands, correctness check, timing, its record;
- ``suite``: the whole run, machine and versions, writing results as it goes;
- ``report``: summaries (geometric mean, worst shape), JSON, table, plots;
- ``progress``: the progress line; ``cli``: arguments and environment checks.
"""
