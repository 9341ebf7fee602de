"""Where the operators' CUDA implementations run something else than pycutlass_rt's kernel.

A backward GEMM (``_grad_mm``: torch.mm), ``linear``'s fused bias and activation (the
bias as C and torch's activation after) and the convolution passes (torch's convolution)
fall back only where the build holds no kernel for the call's kind of problem: its dtype
and layout (a convolution's form too: pointwise, grouped, depthwise), as the library's
kernel list says (:func:`pycutlass_rt.kernels`, the kernels that run on the tensors'
GPU). That is decided before the library is called, from the list alone, so it never
depends on one problem: where the build has a kernel, the library runs the call, and
what it refuses (an oversized batch, a pinned kernel that cannot take the problem,
``PYCUTLASS_RT_STRICT``'s missing tuned cache) is raised to the caller, and the next call
tries again. With ``PYCUTLASS_RT_STRICT=1`` nothing falls back: the library runs every
call, or raises.

A fallback is logged once per (operator, dtype, layout), at WARNING, on the package's
logger (``logging.getLogger("pycutlass_rt")``), and recorded in the operator's set of
those keys (``_cuda._TORCH_MM``, ``_UNFUSED``, ``_TORCH_CONV``).
"""

from __future__ import annotations

import ctypes
import itertools

from .._cache import strict
from .._log import LOGGER

#: every GEMM layout (a GEMM form of a convolution may take any of them)
GEMM_LAYOUTS = ("tn", "nn", "nt", "tt")

#: (device, alternatives, dtype, out dtype, fused) -> whether a kernel of the build takes
#: such problems on the device (the list is fixed for the process)
_COVERED: dict = {}


def _kernel_list():
    """The build's kernels (tests put an emulated build's here)."""
    from .._kernels import kernels

    return kernels()


def _runs_on(kernel, device) -> bool:
    """Whether ``kernel`` runs on CUDA device ``device`` (None: any device, unasked). Where
    the library cannot tell, it counts as running: the call then says what is wrong."""
    if device is None:
        return True
    from .._lib import load

    runs = ctypes.c_int32()
    if load().pcr_kernel_runs_on(kernel.index, device, ctypes.byref(runs)) != 0:
        return True
    return bool(runs.value)


#: the kind of the direct depthwise kernels in ``alternatives``, after their pass ("fprop
#: depthwise"): they run no other convolution, and the implicit-GEMM ones no depthwise one
DEPTHWISE = "depthwise"


def _kind(kernel) -> str:
    """A kernel's kind as ``alternatives`` name it: its op, and :data:`DEPTHWISE` after it
    for the direct depthwise kernels."""
    return f"{kernel.op} {DEPTHWISE}" if kernel.schedule == "depthwise" else kernel.op


def _takes(kernel, alternatives, dtype, out, fused) -> bool:
    """Whether ``kernel`` is one of the kinds in ``alternatives`` ((kind, layouts) pairs,
    :func:`_kind`) for inputs of ``dtype`` and an output of ``out``, with a bias/activation
    epilogue where ``fused`` (every epilogue but the plain one computes it)."""
    kind = _kind(kernel)
    return (
        kernel.dtype_a == dtype
        and kernel.dtype_d == out
        and not kernel.grouped
        and kernel.scale_m == "none"
        and (not fused or kernel.epilogue != "linear")
        and any(kind == op and kernel.layout in layouts for op, layouts in alternatives)
    )


def covered(device, alternatives, dtype, out, fused=False) -> bool:
    """Whether the build has a kernel of one of ``alternatives`` ((kernel op, layouts)
    pairs) for ``dtype`` inputs and an ``out`` output that runs on ``device``."""
    key = (device, alternatives, dtype, out, fused)
    hit = _COVERED.get(key)
    if hit is None:
        hit = any(
            _takes(k, alternatives, dtype, out, fused) and _runs_on(k, device)
            for k in _kernel_list()
        )
        _COVERED[key] = hit
    return hit


def falls_back(taken: set, op: str, device, layout: str, dtype, out, alternatives, fused, instead):
    """Whether the call of operator ``op`` (its ``layout`` word, kernel input ``dtype``,
    output ``out``) falls back to what ``instead`` says: where no kernel of
    ``alternatives`` (see :func:`covered`) takes it and strict mode is off. The first time
    for its (op, dtype, layout) the fallback is logged and added to ``taken``."""
    if covered(device, alternatives, dtype, out, fused) or strict():
        return False
    key = (op, dtype, layout)
    if key not in taken:
        taken.add(key)
        LOGGER.warning(
            "pycutlass_rt::%s: the build has no %s %s%s kernel%s: %s (logged once)",
            op,
            dtype,
            layout,
            " bias/activation" if fused else "",
            "" if device is None else f" that runs on cuda:{device}",
            instead,
        )
    return True


#: torch dtype -> its name ("bfloat16"), as the kernel list spells dtypes
_NAMES: dict = {}


def kernel_dtype(dtype, math=None) -> str:
    """The kernels' input dtype for a torch dtype and the call's math: float32 on TF32
    tensor cores is "tfloat32", the rest torch's name ("bfloat16")."""
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = str(dtype).rpartition(".")[2]
    return "tfloat32" if math == "tf32" and name == "float32" else name


def _letters(t) -> str:
    """The layout letters the library may read matrix ``t`` as: "t" row-major, "n"
    column-major, "tn" either (a vector, a single row or column)."""
    (r, c), (s0, s1) = t.shape, t.stride()
    row = (s1 == 1 or c <= 1) and (r == 1 or s0 >= max(c, 1))
    col = (s0 == 1 or r <= 1) and (c == 1 or s1 >= max(r, 1))
    return ("t" if row else "") + ("n" if col else "") or "t"


def gemm_layouts(a, b) -> tuple:
    """The layout words of a GEMM of matrices a and b (several where one is both row- and
    column-major): its kernels', "tn" = a row-major, b column-major."""
    return tuple(x + y for x, y in itertools.product(_letters(a), _letters(b)))


#: the channels a depthwise kernel reads at once (16 bytes of 16-bit elements): the
#: channel counts it takes are multiples of it
DEPTHWISE_VECTOR_BYTES = 16


def conv_form(pass_: str, groups: int, filters, geometry, bias, itemsize: int = 2) -> str:
    """A convolution pass's layout word, its form as the library runs it
    (:func:`pycutlass_rt._conv_gemm.routes`), from its filters' shape (K, C/groups, R, S)
    and its elements' bytes: "nhwc" (the convolution kernels), "nhwc pointwise" (1x1, unit
    stride, no padding: also a GEMM on the flat tensors), "nhwc grouped" (one GEMM per group
    on the unfolded input), "nhwc depthwise" (one channel per group and one filter per
    channel, in whole 16-byte vectors: the depthwise kernels run its passes), "nhwc
    depthwise other" (a channel multiplier, or channels short of whole vectors) or "nhwc
    grouped bias" (a grouped fprop with a bias): no kernel takes the last two."""
    stride, padding, _ = geometry
    k, per_group, filter_hw = filters[0], filters[1], filters[2:]
    if groups > 1:
        if per_group == 1:
            whole = (groups * itemsize) % DEPTHWISE_VECTOR_BYTES == 0
            return "nhwc depthwise" if k == groups and whole else "nhwc depthwise other"
        return "nhwc grouped bias" if pass_ == "fprop" and bias else "nhwc grouped"
    if tuple(filter_hw) == (1, 1) and tuple(stride) == (1, 1) and tuple(padding) == (0, 0):
        return "nhwc pointwise"
    return "nhwc"


_ANY_GEMM = (("gemm", GEMM_LAYOUTS),)


def conv_alternatives(pass_: str, form: str, dtype: str) -> tuple:
    """The kernels that can run a convolution pass of ``form`` on ``dtype`` inputs, as
    :func:`covered` takes them: the pass's convolution kernels (a depthwise pass's: the
    depthwise kernels of that pass), and the GEMM kernels where the library runs the form as GEMMs
    (pointwise, grouped, and float32 at fp32 accuracy, which no convolution kernel
    computes)."""
    conv = ((pass_, ("nhwc",)),)
    if form == "nhwc depthwise":
        return ((f"{pass_} {DEPTHWISE}", ("nhwc",)),)
    if form in ("nhwc depthwise other", "nhwc grouped bias"):
        return ()
    if form == "nhwc grouped":
        return _ANY_GEMM
    if form == "nhwc pointwise" or dtype == "float32":
        return conv + _ANY_GEMM
    return conv
