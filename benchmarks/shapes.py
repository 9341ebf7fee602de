"""The benchmark's shape groups A-L (benchmarks/README.md) and dtypes, as data.

This module is the one place the benchmark's shape lists live, but for the grids of groups
A-D, which ``heuristics/sweep.py --grid`` times too: those live in heuristics/grids.py and
are imported here (benchmarks/ imports from heuristics/, never the reverse). Layouts name
A then B, ``t`` = row-major and ``n`` = column-major (the library's kernel-name
convention); D is row-major.

Internal API relied on: ``pycutlass_rt._dtypes.DTYPE_BYTES`` (bytes per element by dtype
name, for the traffic a case moves; the package exports no such table).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from heuristics import corpus
from heuristics.grids import (  # noqa: F401  (the groups' lists, re-exported)
    AWKWARD,
    DECODE,
    DECODE_M,
    NK_PAIRS,
    PREFILL,
    PREFILL_M,
    SQUARE,
    SQUARE_SIZES,
)
from pycutlass_rt._dtypes import DTYPE_BYTES

EPILOGUE_SHAPES = [(4096, 4096, 4096)] + [(2048, n, k) for n, k in NK_PAIRS]
HOST_SHAPES = [(64, 64, 64), (256, 4096, 4096)]
#: batched (issue 5): L x the A and C shapes, against torch.bmm
BATCHES = (8, 64)
BATCHED_SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (512, 4096, 4096), (512, 14336, 4096)]
#: grouped, MoE-style: (experts, tokens routed, N, K) with skewed routing (expert_rows)
GROUPED_SHAPES = [
    (16, 8192, 4096, 4096),
    (16, 8192, 14336, 4096),
    (64, 8192, 2048, 2048),
    (64, 8192, 1536, 4096),
]
#: group K (issue 29): the held-out part of heuristics/corpus.py, real models' projections
#: (tn, no batch) of families kept out of any fit
HELDOUT = list(dict.fromkeys((s.m, s.n, s.k) for s in corpus.load("heldout", "tn") if s.batch == 1))
#: group M: every 8th of those, each with every activation of ACTIVATIONS
HELDOUT_EPILOGUE = HELDOUT[::8]
LAYOUTS = ("nn", "nt", "tn", "tt")
#: extra elements on every leading dimension in group E's padded case (keeps 16 B alignment)
PAD = 64
ACTIVATIONS = ("relu", "gelu", "silu")


@dataclass(frozen=True)
class DType:
    """One benchmark dtype: what the library's kernels and torch call it.

    Attributes:
        label: the name used on the command line and in results (``bf16``).
        lib_a: kernel ``dtype_a`` values that provide it (library names).
        lib_d: kernel ``dtype_d`` of the output.
        torch_a: torch dtype name of A and B.
        torch_d: torch dtype name of D.
        math: the ``math=`` argument of pycutlass_rt.gemm (float32 inputs).
        layout: the layout every case of the dtype uses (None: the group's): "tn", the
            K-major operands that its tensor-core kernels and torch's peers take.
        scales: per-tensor dequantizing factors (scale_a, scale_b) that pycutlass_rt and
            cuBLAS both get, as GPU scalars, for quantized inputs. Their product is 1, so
            the check's reference needs no scaling, and a factor dropped fails it.
    """

    label: str
    lib_a: tuple
    lib_d: str
    torch_a: str
    torch_d: str
    math: str | None = None
    layout: str | None = None
    scales: tuple = ()

    @property
    def bytes_a(self) -> int:
        return DTYPE_BYTES[self.torch_a]

    @property
    def bytes_d(self) -> int:
        return DTYPE_BYTES[self.torch_d]

    @property
    def title(self) -> str:
        return self.label if self.torch_a == self.torch_d else f"{self.label}->{self.lib_d}"


DTYPES = {
    d.label: d
    for d in (
        DType("bf16", ("bfloat16",), "bfloat16", "bfloat16", "bfloat16"),
        DType("fp16", ("float16",), "float16", "float16", "float16"),
        DType("tf32", ("tfloat32",), "float32", "float32", "float32", math="tf32", layout="tn"),
        DType("fp32", ("float32",), "float32", "float32", "float32", layout="tn"),
        DType(
            "fp8",
            ("float8_e4m3fn",),
            "bfloat16",
            "float8_e4m3fn",
            "bfloat16",
            layout="tn",
            scales=(2.0, 0.5),
        ),
        DType("int8", ("int8",), "int32", "int8", "int32", layout="tn"),
    )
}
#: other spellings accepted on the command line
DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "tfloat32": "tf32",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "e4m3": "fp8",
}


@dataclass(frozen=True)
class Case:
    """One measurement: a problem, its dtype, and why it is not run (``skip``), if so."""

    group: str
    dtype: str
    m: int
    n: int
    k: int
    layout: str = "tn"
    pad: int = 0
    beta: float = 0.0
    epilogue: str = "linear"
    batch: int = 1  # L of a batched case
    experts: int = 0  # groups of a grouped (MoE) case: m rows routed over this many
    skip: str | None = None

    @property
    def label(self) -> str:
        extras = [self.layout]
        if self.pad:
            extras.append(f"ld+{self.pad}")
        if self.beta:
            extras.append(f"beta={self.beta:g}")
        if self.epilogue != "linear":
            extras.append(self.epilogue)
        if self.batch > 1:
            extras.append(f"L={self.batch}")
        if self.experts:
            extras.append(f"{self.experts} experts")
        return f"{self.m}x{self.n}x{self.k} " + " ".join(extras)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Group:
    """A shape group: what it measures and the cases it holds per dtype."""

    key: str
    title: str
    kind: str  # "compare" (vs peers), "host" (per-call host time), "regret" (kernel choice)
    dtypes: tuple
    shapes: tuple  # dicts of Case fields other than group, dtype and skip


def _shapes(mnks, **extra) -> list:
    return [dict(m=m, n=n, k=k, **extra) for m, n, k in mnks]


#: groups M and N: each of HELDOUT_EPILOGUE with a bias and each of ACTIVATIONS
HELDOUT_FUSED = tuple(
    s for act in ACTIVATIONS for s in _shapes(HELDOUT_EPILOGUE, epilogue=f"bias_{act}")
)

GROUPS = {
    g.key: g
    for g in (
        Group(
            "A",
            "square",
            "compare",
            ("bf16", "fp16", "tf32", "fp32", "fp8", "int8"),
            tuple(_shapes(SQUARE, layout="tt")),
        ),
        Group("B", "decode", "compare", ("bf16", "fp16", "fp8"), tuple(_shapes(DECODE))),
        Group("C", "prefill", "compare", ("bf16", "fp16", "fp8"), tuple(_shapes(PREFILL))),
        Group("D", "awkward", "compare", ("bf16", "fp16"), tuple(_shapes(AWKWARD))),
        Group(
            "E",
            "layouts",
            "compare",
            ("bf16", "fp16"),
            tuple(
                [s for lay in LAYOUTS for s in _shapes(SQUARE[2:3], layout=lay)]
                + _shapes(SQUARE[2:3], pad=PAD)
            ),
        ),
        Group(
            "F",
            "epilogue",
            "compare",
            ("bf16", "int8"),
            tuple(
                _shapes(EPILOGUE_SHAPES, beta=0.0)
                + _shapes(EPILOGUE_SHAPES, beta=1.0)
                + [
                    s
                    for act in ACTIVATIONS
                    for s in _shapes(EPILOGUE_SHAPES, epilogue=f"bias_{act}")
                ]
                # a training forward: the pre-activation kept for backward (aux=)
                + _shapes(EPILOGUE_SHAPES, epilogue="bias_gelu_aux")
            ),
        ),
        Group("G", "host", "host", ("bf16",), tuple(_shapes(HOST_SHAPES))),
        Group(
            "H",
            "regret",
            "regret",
            ("bf16", "fp16", "fp8"),
            tuple(_shapes(DECODE + PREFILL + AWKWARD)),
        ),
        Group(
            "I",
            "batched",
            "compare",
            ("bf16",),
            tuple(s for L in BATCHES for s in _shapes(BATCHED_SHAPES, layout="tt", batch=L)),
        ),
        Group(
            "J",
            "grouped",
            "grouped",
            ("bf16",),
            tuple(dict(m=t, n=n, k=k, experts=e) for e, t, n, k in GROUPED_SHAPES),
        ),
        Group("K", "heldout", "compare", ("bf16", "fp16", "fp8"), tuple(_shapes(HELDOUT))),
        # the kernel choice on shapes no fit saw: H's measurement over K's shapes
        Group("L", "heldout-regret", "regret", ("bf16", "fp16", "fp8"), tuple(_shapes(HELDOUT))),
        # a linear layer's bias and activation fused, against F.linear and torch's activation
        Group(
            "M",
            "heldout-epilogue",
            "compare",
            ("bf16", "fp16"),
            HELDOUT_FUSED,
        ),
        # the kernel choice for those fused calls: H's measurement over M's cases
        Group(
            "N",
            "heldout-epilogue-regret",
            "regret",
            ("bf16", "fp16"),
            HELDOUT_FUSED,
        ),
    )
}


def expert_rows(tokens: int, experts: int) -> list:
    """Rows per expert for a skewed routing: Zipf-like shares (a few hot experts, a long
    tail, the coldest quarter empty), deterministic, summing to ``tokens``."""
    weights = [0.0 if i >= experts - experts // 4 else 1.0 / (i + 1) ** 1.2 for i in range(experts)]
    rows = [int(tokens * w / sum(weights)) for w in weights]
    rows[0] += tokens - sum(rows)
    return rows


#: epilogues the library runs today; the others are listed and reported as unsupported.
#: ``bias_<act>_aux`` also keeps the pre-activation (in the operand set's c, an output)
SUPPORTED_EPILOGUES = (
    ("linear",)
    + tuple(f"bias_{act}" for act in ACTIVATIONS)
    + tuple(f"bias_{act}_aux" for act in ACTIVATIONS)
)


def bias_activation(epilogue: str) -> str | None:
    """The activation of a ``bias_<act>`` or ``bias_<act>_aux`` epilogue (None for
    ``linear``).

    >>> bias_activation("bias_gelu_aux"), bias_activation("linear")
    ('gelu', None)
    """
    if not epilogue.startswith("bias_"):
        return None
    return epilogue[len("bias_") :].removesuffix("_aux")


def keeps_pre_activation(epilogue: str) -> bool:
    """Whether a case also writes the pre-activation (``aux=``; c holds it)."""
    return epilogue.endswith("_aux")


def parse_dtype(name: str) -> str:
    """The dtype label for ``name`` (``bfloat16`` -> ``bf16``); ValueError if unknown."""
    key = name.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose from {', '.join(DTYPES)}")
    return key


def available_dtypes(kernels) -> list:
    """Labels of DTYPES that some kernel of the build computes (A dtype and D dtype).

    Args:
        kernels: KernelInfo records (``pycutlass_rt.kernels()``).
    """
    pairs = {(k.dtype_a, k.dtype_d) for k in kernels}
    return [label for label, d in DTYPES.items() if any((a, d.lib_d) in pairs for a in d.lib_a)]


def cases(groups=None, dtypes=None, available=(), sample=None) -> list:
    """The cases of ``groups`` (default all) for ``dtypes`` (default all), in order.

    Rows for a dtype outside ``available`` and rows with an unsupported epilogue are kept,
    with ``skip`` saying why, so that reports show them rather than drop them silently.
    ``sample`` keeps at most that many shapes per group and dtype, evenly spaced through
    the group's list (the same ones on every run).
    """
    out = []
    for key in groups or GROUPS:
        group = GROUPS[key]
        every = group.shapes
        if sample and len(every) > sample:
            every = tuple(every[i * len(every) // sample] for i in range(sample))
        for dtype in group.dtypes:
            if dtypes and dtype not in dtypes:
                continue
            for shape in every:
                case = Case(
                    group=key,
                    dtype=dtype,
                    **dict(
                        shape, **({"layout": DTYPES[dtype].layout} if DTYPES[dtype].layout else {})
                    ),
                )
                skip = None
                if dtype not in available:
                    skip = f"not in this build (its kernels: {', '.join(available) or 'none'})"
                elif case.epilogue not in SUPPORTED_EPILOGUES:
                    skip = f"unsupported: epilogue {case.epilogue}"
                elif dtype == "int8" and bias_activation(case.epilogue) not in (None, "relu"):
                    skip = f"unsupported: {case.epilogue} (int32 outputs take relu and clamp)"
                out.append(dataclasses.replace(case, skip=skip))
    return out


def grid(*keys: str) -> list:
    """Distinct (M, N, K) of the groups ``keys``, first occurrence first."""
    out = []
    for key in keys:
        for s in GROUPS[key].shapes:
            mnk = (s["m"], s["n"], s["k"])
            if mnk not in out:
                out.append(mnk)
    return out
