"""A convolution's tensors as the kernels read them: its geometry, the packed NHWC / KRSC
views of each framework's tensors, and new outputs in the producer's framework.

- torch tensors keep torch's logical shapes, NCHW activations and (K, C/groups, R, S)
  filters, and must be ``channels_last`` in memory (then their NHWC permutation is packed);
  outputs are made ``channels_last``;
- every other producer (cupy, numpy, numba, jax arrays) passes NHWC activations and KRSC
  filters as they lie; outputs are made with the producer's ``empty`` (cupy, numpy), or
  must be given.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from ._abi import Op
from .errors import InvalidArgumentError


class Geometry(NamedTuple):
    """A convolution's parameters as pcr_conv holds them (pairs as (h, w))."""

    op: Op
    padding: tuple
    stride: tuple
    dilation: tuple
    groups: int

    def fields(self) -> tuple:
        """pcr_conv's fields, in order: the extras tuple's conv entry."""
        return (int(self.op), *self.padding, *self.stride, *self.dilation, self.groups)

    def out_extent(self, size: tuple, filt: tuple) -> tuple:
        """(P, Q) of an input (H, W) and a filter (R, S), as torch's conv2d computes them
        (the C side checks the output's shape against the same rule).

        Raises:
            InvalidArgumentError: the dilated filter is larger than the padded input.
        """
        spans = [
            n + 2 * p - d * (f - 1) - 1
            for n, f, p, d in zip(size, filt, self.padding, self.dilation)
        ]
        if min(spans) < 0:
            raise InvalidArgumentError(
                f"the filter {filt} (dilation {self.dilation}) is larger than the padded "
                f"input {size} (padding {self.padding})"
            )
        return tuple(span // s + 1 for span, s in zip(spans, self.stride))


def _pair(value, name: str) -> tuple:
    """An int, or an (h, w) pair of ints, as a pair."""
    pair = (value, value) if not isinstance(value, (tuple, list)) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise InvalidArgumentError(f"{name} must be an int or a pair of ints, got {value!r}")
    return pair


#: a geometry value the library holds in 32 bits
_INT32_MAX = 2**31 - 1


def geometry(op: Op, stride, padding, dilation, groups) -> Geometry:
    """The Geometry of a convolution's arguments, torch's conventions (ints or pairs),
    checked before anything is allocated: stride, dilation and groups at least 1, padding
    at least 0, each below 2^31.

    >>> geometry(Op.OP_FPROP, 0, 1, 1, 1)
    Traceback (most recent call last):
    ...
    pycutlass_rt.errors.InvalidArgumentError: stride must be at least 1 (and below 2^31), got (0, 0)
    """
    if not isinstance(groups, int) or isinstance(groups, bool):
        raise InvalidArgumentError(f"groups must be an int, got {groups!r}")
    pairs = {
        n: _pair(v, n)
        for n, v in (("padding", padding), ("stride", stride), ("dilation", dilation))
    }
    for name, low in (("stride", 1), ("dilation", 1), ("padding", 0)):
        if not all(low <= v <= _INT32_MAX for v in pairs[name]):
            raise InvalidArgumentError(
                f"{name} must be at least {low} (and below 2^31), got {pairs[name]}"
            )
    if not 1 <= groups <= _INT32_MAX:
        raise InvalidArgumentError(f"groups must be at least 1 (and below 2^31), got {groups}")
    return Geometry(op, pairs["padding"], pairs["stride"], pairs["dilation"], groups)


def _torch(t):
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(t, torch.Tensor) else None


def nhwc(t, name: str):
    """The packed NHWC (activations) or KRSC (filters) view the kernels read, and the four
    dimensions in that order. torch tensors are (N, C, H, W) / (K, C, R, S) logically and
    must be channels_last in memory."""
    torch = _torch(t)
    if torch is None:
        shape = tuple(getattr(t, "shape", ()))
        if len(shape) != 4:
            raise InvalidArgumentError(f"{name} must be a 4-D NHWC tensor, got shape {shape}")
        return t, shape
    if t.dim() != 4:
        raise InvalidArgumentError(f"{name} must be a 4-D tensor, got {tuple(t.shape)}")
    view = t.permute(0, 2, 3, 1)
    if not view.is_contiguous():
        raise InvalidArgumentError(
            f"{name} must be channels_last in memory (the kernels read NHWC): use "
            f"{name}.contiguous(memory_format=torch.channels_last)"
        )
    return view, tuple(view.shape)


def empty_like_producer(like, dims: tuple, dtype, name: str):
    """A new output of NHWC ``dims`` in ``like``'s framework and device: (the object the
    caller gets, its NHWC view for the kernel)."""
    torch = _torch(like)
    if torch is not None:
        n, h, w, c = dims
        # made channels_last, not made NCHW and then converted: a conversion is a transposing
        # copy as large as the tensor (for the GEMM routes' scratch, larger than the GEMM)
        t = torch.empty(
            (n, c, h, w), dtype=dtype, device=like.device, memory_format=torch.channels_last
        )
        return t, t.permute(0, 2, 3, 1)
    module = sys.modules.get(type(like).__module__.split(".")[0])
    if module is not None and module.__name__ in ("cupy", "numpy"):
        if module.__name__ == "cupy":
            with module.cuda.Device(like.device.id):
                out = module.empty(dims, dtype)
        else:
            out = module.empty(dims, dtype)
        return out, out
    raise InvalidArgumentError(
        f"pass {name}= (an NHWC array to write): {type(like).__name__} arrays are not "
        "made here (torch tensors, cupy and numpy arrays are)"
    )
