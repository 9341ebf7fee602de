"""Tiers: which kernels the default build holds, and why those.

Every kernel has a ``tier`` (its configuration's, capped where its dtypes say so):

- ``core``: in the default build (kernel filter ``default``);
- ``linear``: in it for a linear layer's problem only: the tn layout, D in the layer's
  output dtype (``LINEAR_OUTPUT``);
- ``extended``: built only when a filter names it.

Compiling every kernel takes far longer than a default ``pip install`` should, so the
default build holds the kernels that cover the most problems per second of compile time;
the kernel filter (``listing.select_kernels``) reads the tiers through ``Kernel.default``. Tiers were chosen by heuristics/tier.py: greedy by measured
coverage per compile-second over the H200 sweeps of the shape corpus's fit part, judged on
its held-out part (bf16 tn: the tier's best kernel at 0.883 of the whole catalogue's with
the core tier alone, 0.990 with the "linear" additions; fp8 -> bf16: 0.925 and 0.999). The
shipped table choosing among the default kernels gets 0.992 (bf16) and 0.999 (fp8) of its
choice among the whole catalogue's there (heuristics/README.md).

This module comes first in the package's order: it reads no other of its modules.
"""

from __future__ import annotations

#: the output dtype of a linear layer on each input dtype (the "linear" tier's D): 16-bit
#: inputs give their own dtype, fp8 e4m3 bf16 (torch._scaled_mm's usual out_dtype); e5m2
#: (gradients, mostly) is left out: its "linear" kernels stay extended
LINEAR_OUTPUT = {"e4m3": "bf16", "e5m2": None}


def in_default_build(tier: str, layout: str, a: str, d: str) -> bool:
    """Whether a kernel of ``tier``, ``layout`` and input/output dtypes ``a``/``d`` is in
    the default build.

    >>> in_default_build("linear", "tn", "e4m3", "bf16")
    True
    >>> in_default_build("linear", "nn", "bf16", "bf16"), in_default_build("extended", "tn", "f16", "f16")
    (False, False)
    """
    if tier == "linear":
        return layout == "tn" and d == LINEAR_OUTPUT.get(a, a)
    return tier == "core"
