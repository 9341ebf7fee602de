"""Exceptions raised by pycutlass_rt.

Every exception derives from :class:`Error` (a ``RuntimeError``) and carries the C
status code in ``.status``; where a built-in category fits, the class also derives from
it, so ``except ValueError`` catches a bad shape as users expect.
"""
from __future__ import annotations

import re

# Status codes of native/include/pycutlass_rt.h (pcr_status).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_INVALID_DTYPE = 2
ERR_UNSUPPORTED = 3
ERR_MISALIGNED = 4
ERR_NO_KERNEL_FOR_ARCH = 5
ERR_NO_DEVICE = 6
ERR_DEVICE_MISMATCH = 7
ERR_READ_ONLY = 8
ERR_OVERLAP = 9
ERR_KERNEL_NOT_FOUND = 10
ERR_CUDA = 11
ERR_INTERNAL = 12
ERR_PYTHON = 13
NEED_SELECTION = 100


class Error(RuntimeError):
    """Base of every pycutlass_rt error; ``status`` is the C status code."""

    status = ERR_INTERNAL

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(Error, ValueError):
    """A shape, stride, scalar or option that cannot be right."""

    status = ERR_INVALID_ARGUMENT


class DTypeError(Error, TypeError):
    """An operand of a type or dtype pycutlass_rt does not take."""

    status = ERR_INVALID_DTYPE


class UnsupportedError(Error, NotImplementedError):
    """A valid request that no kernel of this build covers; the message lists what exists."""

    status = ERR_UNSUPPORTED


class MisalignedError(Error, ValueError):
    """A forced kernel needs more alignment than the operands have."""

    status = ERR_MISALIGNED


class NoKernelForArchError(UnsupportedError):
    """The build holds no kernel that runs on this GPU; the message names the built archs."""

    status = ERR_NO_KERNEL_FOR_ARCH


class NoDeviceError(Error):
    """No driver, no GPU, or the GPUs are hidden; the message says what was looked for."""

    status = ERR_NO_DEVICE


class DeviceMismatchError(Error, ValueError):
    """Operands on different devices, or host arrays mixed with GPU tensors."""

    status = ERR_DEVICE_MISMATCH


class ReadOnlyError(Error, ValueError):
    """The output was exported read-only by its producer."""

    status = ERR_READ_ONLY


class OverlapError(Error, ValueError):
    """The output overlaps an input it may not alias."""

    status = ERR_OVERLAP


class KernelNotFoundError(Error, ValueError):
    """``kernel=`` names no kernel of this build."""

    status = ERR_KERNEL_NOT_FOUND


class CudaError(Error):
    """A CUDA call failed; ``cuda_error`` is the CUDA error name (e.g. cudaErrorLaunchFailure)."""

    status = ERR_CUDA

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message, status)
        m = re.search(r"\b(cudaError\w+|CUDA_ERROR_\w+)", message)
        self.cuda_error = m.group(1) if m else None


class LibraryError(Error):
    """libpycutlass_rt.so could not be loaded, or is of another ABI version."""


_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, DTypeError, UnsupportedError, MisalignedError,
    NoKernelForArchError, NoDeviceError, DeviceMismatchError, ReadOnlyError, OverlapError,
    KernelNotFoundError, CudaError)}


def from_status(status: int, message: str) -> Error:
    """The exception for a C status code and its thread-local message."""
    cls = _BY_STATUS.get(status, Error)
    return cls(message or f"pycutlass_rt failed with status {status}", status)
