"""The kernel catalogue of the loaded library, read from the binary (never a second list)."""

from __future__ import annotations

import ctypes
import dataclasses
import functools

from . import errors
from ._abi import Epilogue, Layout, Op, ScaleKind, Schedule, Split
from ._dtypes import DTYPE_BYTES, DTYPE_NAMES, DTYPE_TOKENS  # noqa: F401  (their old home)
from ._lib import KernelDesc, load

LAYOUT_LETTERS = {Layout.ROW_MAJOR: "t", Layout.COL_MAJOR: "n"}  # as BLAS and kernel names


def layout_word(layout_a: int, layout_b: int) -> str:
    """The layout word of kernel names: "tn" (A row-major, B column-major), ..., or "nhwc"
    for a convolution's packed NHWC / KRSC operands."""
    if layout_a == Layout.NHWC:
        return "nhwc"
    return LAYOUT_LETTERS[layout_a] + LAYOUT_LETTERS[layout_b]


@dataclasses.dataclass(frozen=True)
class KernelInfo:
    """One kernel of the build. ``name`` is its identity; the other fields decode it."""

    index: int
    name: str
    family: int  # 70, 75, 80, 89, 90 or 100: the arch family (sm80 SASS also serves 8.6/8.9/9.0)
    dtype_a: str
    dtype_b: str
    dtype_acc: str
    dtype_d: str
    layout: str  # A then B: "tn" = A row-major, B column-major; "nhwc" for convolutions
    tile: tuple
    cluster: tuple
    warps: tuple
    stages: int
    #: schedule, epilogue, split: the words of the kernel's name, each the token of its
    #: pcr_schedule / pcr_epilogue / pcr_split constant ("coop" is Schedule.SCHED_COOP)
    schedule: str
    epilogue: str
    split: str
    align: tuple  # required alignment of A, B, C/D in elements
    swap_ab: bool = False  # runs as D^T = B^T A^T; tile and cluster are in problem terms
    grouped: bool = False  # a grouped kernel (pycutlass_rt.grouped_gemm, moe_gemm)
    #: a linear epilogue that also multiplies by per-tensor scale_a/scale_b tensors
    tensor_scales: bool = False
    #: "gemm", or the convolution pass it runs: "fprop", "dgrad", "wgrad" (Op's tokens)
    op: str = "gemm"
    #: a block-scaled fp8 mainloop's scale kinds of a's rows and b's columns ("groups": per
    #: row / column, "blocks": per 128; each per 128 of K), "none" for other kernels
    scale_m: str = "none"
    scale_n: str = "none"
    #: a quantized inputs' epilogue that also reduces amax and applies scale_d
    out_scale: bool = False
    #: a direct grouped convolution kernel (schedule "direct"): the channels per group it
    #: is built for; 0 for every other kernel
    group_width: int = 0

    @property
    def base_name(self) -> str:
        """The name of the kernel's plain-epilogue twin (what table rules name)."""
        return self.name.replace(f"_{self.epilogue}_", "_")  # a linear one names none


_DTYPE_CODES = {name: code for code, name in DTYPE_NAMES.items()}
_LAYOUT_CODES = {
    "nhwc": (Layout.NHWC, Layout.NHWC),
    **{
        LAYOUT_LETTERS[a] + LAYOUT_LETTERS[b]: (a, b)
        for a in (Layout.ROW_MAJOR, Layout.COL_MAJOR)
        for b in (Layout.ROW_MAJOR, Layout.COL_MAJOR)
    },
}


@functools.lru_cache(maxsize=4096)
def desc_of(kern: KernelInfo) -> KernelDesc:
    """The pcr_kernel_desc of a kernel, in this build or not (the model and ranking take
    descriptions: the table's fitter ranks kernels of other builds)."""
    layout_a, layout_b = _LAYOUT_CODES[kern.layout]
    return KernelDesc(
        kern.name.encode(),
        kern.family,
        _DTYPE_CODES[kern.dtype_a],
        _DTYPE_CODES[kern.dtype_b],
        _DTYPE_CODES[kern.dtype_acc],
        _DTYPE_CODES[kern.dtype_d],
        layout_a,
        layout_b,
        *kern.tile,
        *kern.cluster,
        *kern.warps,
        kern.stages,
        Schedule.from_token(kern.schedule),
        Epilogue.from_token(kern.epilogue),
        Split.from_token(kern.split),
        *kern.align,
        int(kern.swap_ab),
        int(kern.grouped),
        int(kern.tensor_scales),
        Op.from_token(kern.op),
        ScaleKind.from_token(kern.scale_m),
        ScaleKind.from_token(kern.scale_n),
        int(kern.out_scale),
        kern.group_width,
    )


@functools.cache
def _all() -> tuple:
    lib = load()
    out = []
    desc = KernelDesc()
    for i in range(lib.pcr_kernel_count()):
        lib.check(lib.pcr_kernel_info(i, ctypes.byref(desc)))
        out.append(
            KernelInfo(
                index=i,
                name=desc.name.decode(),
                family=desc.family,
                dtype_a=DTYPE_NAMES[desc.dtype_a],
                dtype_b=DTYPE_NAMES[desc.dtype_b],
                dtype_acc=DTYPE_NAMES[desc.dtype_acc],
                dtype_d=DTYPE_NAMES[desc.dtype_d],
                layout=layout_word(desc.layout_a, desc.layout_b),
                tile=(desc.tile_m, desc.tile_n, desc.tile_k),
                cluster=(desc.cluster_m, desc.cluster_n, desc.cluster_k),
                warps=(desc.warps_m, desc.warps_n, desc.warps_k),
                stages=desc.stages,
                schedule=Schedule(desc.schedule).token,
                epilogue=Epilogue(desc.epilogue).token,
                split=Split(desc.split).token,
                align=(desc.align_a, desc.align_b, desc.align_c),
                swap_ab=bool(desc.swap_ab),
                grouped=bool(desc.grouped),
                tensor_scales=bool(desc.tensor_scales),
                op=Op(desc.op).token,
                scale_m=ScaleKind(desc.scale_m).token,
                scale_n=ScaleKind(desc.scale_n).token,
                out_scale=bool(desc.out_scale),
                group_width=desc.group_width,
            )
        )
    return tuple(out)


@functools.cache
def _by_name() -> dict:
    return {k.name: k for k in _all()}


def kernels() -> list[KernelInfo]:
    """Every kernel in the loaded library, in registry order.

    Example:
        >>> import pycutlass_rt as pcr
        >>> ks = pcr.kernels()
        >>> all(k.name.startswith(f"sm{k.family}_") for k in ks)  # names lead with the family
        True
    """
    return list(_all())


def by_name(name: str) -> KernelInfo:
    """The kernel called ``name``; KernelNotFoundError lists close names when absent."""
    try:
        return _by_name()[name]
    except (KeyError, TypeError):
        import difflib

        close = difflib.get_close_matches(str(name), list(_by_name()), n=3, cutoff=0.5)
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else f"; the build has {len(_all())} kernels: see pycutlass_rt.kernels()"
        )
        raise errors.KernelNotFoundError(f"no kernel named {name!r} in this build{hint}") from None
