"""Exceptions raised by pycutlass_rt.

Every exception derives from :class:`Error` (a ``RuntimeError``) and carries the C
status code in ``.status``; where a built-in category fits, the class also derives from
it, so ``except ValueError`` catches a bad shape as users expect.

A tensor producer's own exception (its ``__dlpack__``, ``__dlpack_device__`` or DLPack
exchange API raising) is not one of these: it propagates as the producer raised it (see
``_dlpack``). A producer that fails without raising gives :class:`Error` with status
``ERR_PYTHON``.
"""

from __future__ import annotations

import re

from ._abi import Status

# The status codes as module constants too (errors.OK, errors.ERR_CUDA, ...), each a member
# of the generated pcr_status mirror: no second list of them.
globals().update(Status.__members__)


class Error(RuntimeError):
    """Base of every pycutlass_rt error; ``status`` is the C status code (a Status)."""

    status = Status.ERR_INTERNAL

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(Error, ValueError):
    """A shape, stride, scalar or option that cannot be right."""

    status = Status.ERR_INVALID_ARGUMENT


class DTypeError(Error, TypeError):
    """An operand of a type or dtype pycutlass_rt does not take."""

    status = Status.ERR_INVALID_DTYPE


class UnsupportedError(Error, NotImplementedError):
    """A valid request that no kernel of this build covers; the message lists what exists."""

    status = Status.ERR_UNSUPPORTED


class MisalignedError(Error, ValueError):
    """A forced kernel needs more alignment than the operands have."""

    status = Status.ERR_MISALIGNED


class NoKernelForArchError(UnsupportedError):
    """The build holds no kernel that runs on this GPU; the message names the built archs."""

    status = Status.ERR_NO_KERNEL_FOR_ARCH


class NoDeviceError(Error):
    """No driver, no GPU, or the GPUs are hidden; the message says what was looked for."""

    status = Status.ERR_NO_DEVICE


class DeviceMismatchError(Error, ValueError):
    """Operands on different devices, or host arrays mixed with GPU tensors."""

    status = Status.ERR_DEVICE_MISMATCH


class ReadOnlyError(Error, ValueError):
    """The output was exported read-only by its producer."""

    status = Status.ERR_READ_ONLY


class OverlapError(Error, ValueError):
    """The output overlaps an input it may not alias."""

    status = Status.ERR_OVERLAP


class KernelNotFoundError(Error, ValueError):
    """``kernel=`` names no kernel of this build."""

    status = Status.ERR_KERNEL_NOT_FOUND


class CudaError(Error):
    """A CUDA call failed; ``cuda_error`` is the CUDA error name (e.g. cudaErrorLaunchFailure)."""

    status = Status.ERR_CUDA

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message, status)
        m = re.search(r"\b(cudaError\w+|CUDA_ERROR_\w+)", message)
        self.cuda_error = m.group(1) if m else None


class LibraryError(Error):
    """libpycutlass_rt.so could not be loaded, or is of another ABI version."""


#: Status member -> the exception raised for it (statuses without a class raise Error)
_BY_STATUS = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        DTypeError,
        UnsupportedError,
        MisalignedError,
        NoKernelForArchError,
        NoDeviceError,
        DeviceMismatchError,
        ReadOnlyError,
        OverlapError,
        KernelNotFoundError,
        CudaError,
    )
}


def from_status(status: int, message: str) -> Error:
    """The exception for a C status code and its thread-local message."""
    cls = _BY_STATUS.get(status, Error)
    return cls(message or f"pycutlass_rt failed with status {status}", status)
