"""The kernel catalogue: one declarative list, and the generator that builds from it.

Every kernel the library can contain is one ``Kernel`` record. Its procedural ``name``
encodes every parameter and is its identity everywhere (build filter, registry, selection
tables, tests, logs). The generator turns the selected records into one ``.cu`` file per
kernel, the translation units that compile them several at a time (they share the
headers' parsing and most instantiations: ``units``), the registry table and a CMake
fragment::

    PYTHONPATH=native python -m catalog --list --archs all   # every kernel name, no compiling
    PYTHONPATH=native python -m catalog --list --kernels 'sm90_bf16*'
    PYTHONPATH=native python -m catalog --emit build/gen --archs '80;90a' --kernels default

Arch tokens (``PYCUTLASS_RT_ARCHS``): ``70`` the sm70 family (CUDA 12.x and older only),
``75`` the sm75 family, ``80 86 89 90`` SASS targets of the sm80 family (``90`` also of
sm75 and sm70, to test them on Hopper), ``90a`` the sm90a family, ``100a`` the sm100a family;
``native`` asks nvidia-smi, ``all`` takes every token, ``default`` is ``80;86;89;90;90a``;
unset (``auto``): ``native`` where nvidia-smi lists a GPU, else ``default``.
Kernel filter (``PYCUTLASS_RT_KERNELS``): ``default`` (the core tier; what ``--emit``
builds), ``all`` (what ``--list`` prints), or ``;``/``,``-separated wildcards on names
(``!pat`` excludes).
Kernels per translation unit (``PYCUTLASS_RT_UNIT_SIZE``): a number, or ``auto`` (unset):
three units per core, at most eight (``unit_size``).

The modules, one job each; each reads only those listed before it:

- ``tiers``: which kernels the default build holds (``core``, ``linear``, ``extended``);
- ``archs``: arch families and tokens, the plan of a build's targets, gencode flags;
- ``kernel``: the ``Kernel`` record, its name and the words the name is made of;
- ``configs``: the configuration tables (data only);
- ``listing``: ``catalogue()``, the tables as records, and the kernel filter;
- ``sources``: the generated C++ of a kernel, a unit and the registry;
- ``units``: translation units and the compile-cost model that sizes them;
- ``generate``: ``emit``, writing the build's files;
- ``__main__``: the command line (``python -m catalog``).

This module only re-exports the names that code outside the package uses.
"""

from .archs import DEFAULT_ARCHS, FAMILIES, TMA_FAMILIES, gencode_flags, parse_archs, plan
from .configs import (
    AB_LAYOUTS,
    BLOCK_KINDS,
    CONV_OPS,
    FP8,
    FUSED_TMA_LAYOUTS,
    FUSED_TYPES,
    GEMM_TYPES,
    GROUPED_QUANTIZED_TYPES,
    GROUPED_TYPES,
)
from .generate import emit
from .kernel import ACCUMULATORS, DTYPES, EPILOGUES, LAYOUTS, SCHEDULES, SPLITS, Kernel
from .listing import catalogue, select_kernels
from .sources import INSTRUCTIONS, kernel_info, kernel_source, kernel_type
from .tiers import LINEAR_OUTPUT
from .units import compile_seconds, unit_size

__all__ = [
    "AB_LAYOUTS",
    "ACCUMULATORS",
    "BLOCK_KINDS",
    "CONV_OPS",
    "DEFAULT_ARCHS",
    "DTYPES",
    "EPILOGUES",
    "FAMILIES",
    "FP8",
    "FUSED_TMA_LAYOUTS",
    "FUSED_TYPES",
    "GEMM_TYPES",
    "GROUPED_QUANTIZED_TYPES",
    "GROUPED_TYPES",
    "INSTRUCTIONS",
    "LAYOUTS",
    "LINEAR_OUTPUT",
    "SCHEDULES",
    "SPLITS",
    "TMA_FAMILIES",
    "Kernel",
    "catalogue",
    "compile_seconds",
    "emit",
    "gencode_flags",
    "kernel_info",
    "kernel_source",
    "kernel_type",
    "parse_archs",
    "plan",
    "select_kernels",
    "unit_size",
]
