"""pycutlass_rt: precompiled CUTLASS GEMM and convolution kernels for any Python GPU framework.

``d = act(alpha * a @ b + beta * c + bias)`` on torch, cupy, jax, numba and numpy arrays,
through DLPack, with no compiler at run time::

    import pycutlass_rt as pcr
    pcr.gemm(a, b, c, d, alpha=1.0, beta=0.0)
    pcr.gemm(x, w.t(), None, y, bias=b, activation="gelu")   # a fused linear layer
    y = pcr.conv2d(x, w, bias, stride=2, padding=1, activation="relu")  # NHWC
"""

from __future__ import annotations

from ._conv import conv2d, conv2d_dgrad, conv2d_wgrad
from ._explain import Explanation, explain
from ._gemm import gemm
from ._grouped import grouped_gemm, moe_gemm
from ._info import info
from ._kernels import KernelInfo, kernels
from ._matmul import matmul
from ._memory import empty_cache, memory_stats, set_allocator, set_scratch_limit
from ._plan import Gemm
from ._quantize import quantize
from ._tune import Tuned, TuneResult, tune
from ._version import __version__ as __version__
from .errors import (
    CudaError,
    DeviceMismatchError,
    DTypeError,
    Error,
    InvalidArgumentError,
    KernelNotFoundError,
    LibraryError,
    MisalignedError,
    NoDeviceError,
    NoKernelForArchError,
    OverlapError,
    ReadOnlyError,
    UnsupportedError,
)

__all__ = [
    "gemm",
    "matmul",
    "Gemm",
    "grouped_gemm",
    "moe_gemm",
    "quantize",
    "conv2d",
    "conv2d_dgrad",
    "conv2d_wgrad",
    "explain",
    "tune",
    "kernels",
    "info",
    "memory_stats",
    "set_allocator",
    "empty_cache",
    "set_scratch_limit",
    "KernelInfo",
    "Explanation",
    "TuneResult",
    "Tuned",
    "Error",
    "InvalidArgumentError",
    "DTypeError",
    "UnsupportedError",
    "MisalignedError",
    "NoKernelForArchError",
    "NoDeviceError",
    "DeviceMismatchError",
    "ReadOnlyError",
    "OverlapError",
    "KernelNotFoundError",
    "CudaError",
    "LibraryError",
]
