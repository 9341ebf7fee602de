"""New output tensors in the framework (and on the device) of an operand: what the entry
points that return their result allocate (matmul, quantize)."""

from __future__ import annotations

import math
import sys

from .errors import UnsupportedError

#: dtype names as torch spells them (the library's) -> numpy's and cupy's
_NUMPY_NAMES = {"bfloat16": None, "float8_e4m3fn": None, "float8_e5m2": None}


def new_like(like, shape: tuple, dtype: str, strides: tuple | None = None, fill=None, what="x"):
    """A new tensor of ``shape`` and ``dtype`` (a name as torch spells it) in ``like``'s
    framework, on its device: torch, cupy, or numpy (host memory). ``strides`` in
    elements (None: compact); ``fill``: a value to fill it with.

    Raises:
        UnsupportedError: a framework whose arrays are not made here (jax's are
            immutable), or a dtype the framework lacks (cupy and numpy have no bfloat16 or
            float8): the message says to pass the output.

    >>> import numpy as np
    >>> new_like(np.zeros(3), (2, 3), "float32", strides=(1, 2)).strides
    (4, 8)
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        dt = getattr(torch, dtype)
        t = (
            torch.empty(shape, dtype=dt, device=like.device)
            if strides is None
            else torch.empty_strided(shape, strides, dtype=dt, device=like.device)
        )
        return t.fill_(fill) if fill is not None else t
    module = sys.modules.get(type(like).__module__.split(".")[0])
    name = getattr(module, "__name__", "")
    if name not in ("cupy", "numpy"):
        raise UnsupportedError(
            f"{what} is a {type(like).__module__}.{type(like).__name__}: outputs are made for "
            "torch, cupy and numpy arrays; pass the output (out=), or use pycutlass_rt.jax "
            "for JAX"
        )
    if dtype in _NUMPY_NAMES:
        raise UnsupportedError(
            f"{name} has no {dtype} dtype: pass the output (out=) from a framework that has "
            "one (torch), or ask for another dtype"
        )
    size = math.prod(shape)

    def make():
        base = module.empty(max(size, 1), dtype)
        if fill is not None:
            base.fill(fill)
        if strides is None:
            return base[:size].reshape(shape)
        step = base.itemsize
        return module.lib.stride_tricks.as_strided(base, shape, tuple(s * step for s in strides))

    if name == "cupy":
        with module.cuda.Device(like.device.id):
            return make()
    return make()
