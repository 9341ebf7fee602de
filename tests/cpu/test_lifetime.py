"""DLPack lifetime: every capsule a producer exports is deleted exactly once.

A counting producer exports versioned DLPack capsules whose deleter counts calls; the
front door reads them (without consuming) and the capsule destructor then runs the
deleter, as the DLPack protocol requires, whatever the call's outcome.
"""

import ctypes
import gc

import numpy as np
import pytest

import pycutlass_rt as pcr
from pycutlass_rt import _lib
from pycutlass_rt._abi import DLDataTypeCode, DLDeviceType


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Versioned(ctypes.Structure):
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _lib.DLTensor),
    ]


# The destructor receives the dying capsule as a raw pointer: touching it as a Python
# object there would resurrect it. Private prototypes keep ctypes.pythonapi untouched.
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PyCapsule_New = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR
)(("PyCapsule_New", ctypes.pythonapi))
_PyCapsule_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


class CountingProducer:
    """Exports a host numpy array through versioned capsules and counts deleter calls."""

    exported = 0
    deleted = 0
    _live = {}

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        cls = CountingProducer
        mt = _Versioned()
        mt.version = _Version(1, 0)
        shape = (ctypes.c_int64 * 2)(*self.array.shape)
        strides = (ctypes.c_int64 * 2)(*(s // self.array.itemsize for s in self.array.strides))
        t = mt.dl_tensor
        t.data, t.ndim = self.array.ctypes.data, 2
        t.device.device_type, t.device.device_id = DLDeviceType.CPU, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = DLDataTypeCode.Float, 8 * self.array.itemsize, 1
        t.shape, t.strides = shape, strides
        mt.deleter = _DELETER_FN
        cls._live[ctypes.addressof(mt)] = (mt, shape, strides, self.array)
        cls.exported += 1
        return _PyCapsule_New(ctypes.addressof(mt), b"dltensor_versioned", _DESTRUCTOR_FN)


def _delete(addr):
    CountingProducer.deleted += 1
    CountingProducer._live.pop(addr, None)


def _destroy(capsule):
    # DLPack: an unconsumed capsule's destructor calls the deleter; a consumed one's not
    if _PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        addr = _PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        _Versioned.from_address(addr).deleter(addr)


_DELETER_FN = _DELETER(_delete)
_DESTRUCTOR_FN = _CAPSULE_DESTRUCTOR(_destroy)


@pytest.mark.parametrize("calls", [2000])
def test_each_exported_capsule_is_deleted_exactly_once(calls):
    rng = np.random.default_rng(0)
    a = CountingProducer(rng.integers(-4, 5, (16, 8)).astype(np.float16))
    b = CountingProducer(rng.integers(-4, 5, (8, 24)).astype(np.float16))
    good_d = CountingProducer(np.zeros((16, 24), np.float16))
    bad_d = CountingProducer(np.zeros((15, 24), np.float16))
    before_e, before_d = CountingProducer.exported, CountingProducer.deleted
    outcomes = set()
    for i in range(calls):
        try:
            pcr.gemm(a, b, None, good_d if i % 2 else bad_d)
            outcomes.add("ok")
        except pcr.Error as e:
            outcomes.add(type(e).__name__)
    gc.collect()
    assert CountingProducer.exported - before_e == 3 * calls
    assert CountingProducer.deleted - before_d == 3 * calls
    assert not CountingProducer._live
    assert "InvalidArgumentError" in outcomes and outcomes - {"InvalidArgumentError"}
