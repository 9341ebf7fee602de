"""torch's float32 settings, read as torch means them, never written.

torch 2.9 added ``fp32_precision`` ("ieee", "tf32" or "none": inherit from the parent
setting) on ``torch.backends`` and on each backend; once a program sets one of them, reading
the legacy ``allow_tf32`` flags raises. So the new settings are read where they exist, and
the legacy flags only on older torch.
"""

from __future__ import annotations

import torch


def _resolved(*settings) -> str:
    """The first of ``settings`` (objects with ``fp32_precision``, innermost first) that is
    not "none"; "ieee" when all are."""
    for s in settings:
        value = getattr(s, "fp32_precision", "none")
        if value != "none":
            return value
    return "ieee"


def tf32_matmul() -> bool:
    """Whether torch lets float32 matmuls run on TF32 tensor cores.

    Example:
        >>> from pycutlass_rt.torch._precision import tf32_matmul
        >>> tf32_matmul() in (True, False)
        True
    """
    backends = torch.backends
    if hasattr(backends.cuda.matmul, "fp32_precision"):
        return _resolved(backends.cuda.matmul, backends) == "tf32"
    return bool(backends.cuda.matmul.allow_tf32)


def tf32_conv() -> bool:
    """Whether torch lets float32 convolutions run on TF32 tensor cores (cuDNN's default)."""
    cudnn = torch.backends.cudnn
    if hasattr(cudnn, "conv") and hasattr(cudnn.conv, "fp32_precision"):
        return _resolved(cudnn.conv, cudnn, torch.backends) == "tf32"
    return bool(cudnn.allow_tf32)
