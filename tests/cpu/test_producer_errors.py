"""Failing and misbehaving tensor producers, through every Python-object entry point.

The documented behaviour (pycutlass_rt.h, Python-object entry points; _dlpack.py): a
producer's own exception (from ``__dlpack__``, ``__dlpack_device__``, its exchange API's
export or current-stream function) propagates unchanged; a ``BufferError`` from
``__dlpack__`` (DLPack's "cannot export") becomes InvalidArgumentError; an answer that is
not what DLPack specifies is a pycutlass_rt error (DTypeError, or Error with status
ERR_PYTHON for an exchange API that fails without saying why). Never a SystemError, which
CPython raises when a builtin returns a value with an exception set.

Everything here fails before any device work, so it runs without a GPU. Producers with the
C exchange API (as torch has) are built from a small C library compiled here, whose
functions call back into Python: ctypes callbacks cannot leave an exception set.
"""

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import pycutlass_rt as pcr
from pycutlass_rt import _lib, errors
from pycutlass_rt._abi import PCR_STREAM_FROM_PRODUCER, DLDataTypeCode, DLDeviceType, DLTensor

F16 = np.float16
INCLUDE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "native", "include")


class ProducerError(Exception):
    """A producer's own failure, which must reach the caller unchanged."""


_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
# PyCapsule_New keeps the name pointer: the names live as long as the module
_NAMES = {
    name: ctypes.create_string_buffer(name)
    for name in (b"not_a_tensor", b"dlpack_exchange_api", b"something_else")
}


def capsule(pointer, name):
    return _capsule_new(pointer, ctypes.addressof(_NAMES[name]), None)


# ---- numpy-like producers (the Python side reads them) ---------------------------------


class Fake:
    """Wraps a numpy array; `fault` says which of its DLPack methods misbehaves, and how."""

    def __init__(self, array, fault):
        self.array, self.fault = array, fault
        self.error = ProducerError(f"{fault} of a {array.shape} array")

    def __dlpack__(self, **kw):
        if self.fault == "dlpack_raises":
            raise self.error
        if self.fault == "dlpack_refuses":
            raise BufferError("this tensor cannot be exported")
        if self.fault == "dlpack_returns_int":
            return 42
        if self.fault == "dlpack_returns_other_capsule":
            return capsule(self.array.ctypes.data, b"not_a_tensor")
        return self.array.__dlpack__(**kw)

    def __dlpack_device__(self):
        if self.fault == "device_raises":
            raise self.error
        if self.fault == "device_returns_none":
            return None
        if self.fault == "device_returns_words":
            return ("cpu", 0)
        if self.fault == "device_returns_one_value":
            return (1,)
        return self.array.__dlpack_device__()


#: fault -> what the caller gets: ProducerError is the fake's own exception
FAULTS = {
    "dlpack_raises": ProducerError,
    "device_raises": ProducerError,
    "dlpack_refuses": pcr.InvalidArgumentError,
    "dlpack_returns_int": pcr.DTypeError,
    "dlpack_returns_other_capsule": pcr.DTypeError,
    "device_returns_none": pcr.DTypeError,
    "device_returns_words": pcr.DTypeError,
    "device_returns_one_value": pcr.DTypeError,
}


class _NoLibrary:
    """Stands in for the library of a plan shell: these calls must fail before reaching C."""

    def __getattr__(self, name):
        raise AssertionError(f"{name} reached the library")

    def pcr_plan_destroy(self, handle):  # the shell's close()
        pass


def plan_shell():
    """A Gemm plan as far as running it on new tensors goes, without the GPU building one."""
    plan = pcr.Gemm.__new__(pcr.Gemm)
    plan._handle, plan._lib, plan._act, plan._math = 1, _NoLibrary(), 0, 0
    return plan


def operands(victim, fault):
    """(a, b, d) of a valid 4x6x8 GEMM, `victim` replaced by a faulty producer of it."""
    ops = {"a": np.ones((4, 8), F16), "b": np.ones((8, 6), F16), "d": np.zeros((4, 6), F16)}
    ops[victim] = Fake(ops[victim], fault)
    return ops["a"], ops["b"], ops["d"], ops[victim]


#: Python entry point -> call on (a, b, d); moe_gemm's x and out are a and d
ENTRY_POINTS = {
    "gemm": lambda a, b, d: pcr.gemm(a, b, None, d),
    "explain": lambda a, b, d: pcr.explain(a, b, None, d),
    "Gemm": lambda a, b, d: pcr.Gemm(a, b, None, d),
    "plan call": lambda a, b, d: plan_shell()(a, b, None, d),
    "grouped_gemm": lambda a, b, d: pcr.grouped_gemm([a], [b], None, [d]),
    "moe_gemm": lambda a, b, d: pcr.moe_gemm(
        a, np.ones((1, 8, 6), F16), np.array([0, 4], np.int32), d
    ),
}


@pytest.mark.parametrize("victim", ["a", "d"])
@pytest.mark.parametrize(
    "entry, fault",
    [
        (entry, fault)
        for entry in ENTRY_POINTS
        for fault in FAULTS
        # capsule names are read in C, past the plan shell (a real plan needs a GPU)
        if (entry, fault) != ("plan call", "dlpack_returns_other_capsule")
    ],
)
def test_python_producers(lib, entry, fault, victim):
    a, b, d, fake = operands(victim, fault)
    expected = FAULTS[fault]
    with pytest.raises(expected) as info:
        ENTRY_POINTS[entry](a, b, d)
    assert not isinstance(info.value, SystemError)
    if expected is ProducerError:
        assert info.value is fake.error  # unchanged, not wrapped
    else:
        assert f"{victim}:" in str(info.value) or f"{victim} is" in str(info.value)


# ---- producers with the C exchange API (the library reads them) ------------------------

EXCHANGE_C = r"""
/* A DLPack C exchange API whose two functions call Python callables (set with fake_set):
 * export(obj) -> address of a DLTensor, stream(device) -> a stream handle. A callable that
 * raises leaves its exception set; one that returns 0 fails without an exception. */
#include <string.h>
#include "pycutlass_rt.h"

typedef struct _object PyObject;
PyObject* PyObject_CallFunctionObjArgs(PyObject* callable, ...);
PyObject* PyLong_FromLong(long value);
void* PyLong_AsVoidPtr(PyObject* value);
void Py_DecRef(PyObject* object);

typedef struct Header {
  DLPackVersion version;
  struct Header* prev_api;
} Header;
typedef struct {
  Header header;
  void *managed_tensor_allocator, *managed_tensor_from_py_object_no_sync,
      *managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(int device_type, int32_t device_id, void** out_stream);
} Api;

static PyObject *g_export, *g_stream;

static int call(PyObject* fn, PyObject* arg, void** out) {
  PyObject* r = PyObject_CallFunctionObjArgs(fn, arg, NULL);
  if (!r) return -1;
  *out = PyLong_AsVoidPtr(r);
  Py_DecRef(r);
  return *out ? 0 : -1;
}

static int export_tensor(void* obj, DLTensor* out) {
  void* tensor;
  if (call(g_export, (PyObject*)obj, &tensor)) return -1;
  memcpy(out, tensor, sizeof *out);
  return 0;
}

static int work_stream(int device_type, int32_t device_id, void** out) {
  PyObject* device = PyLong_FromLong(device_id);
  int st = call(g_stream, device, out);
  Py_DecRef(device);
  return st;
}

Api fake_api = {{{1, 0}, NULL}, NULL, NULL, NULL, export_tensor, work_stream};
Api fake_api_v2 = {{{2, 0}, NULL}, NULL, NULL, NULL, export_tensor, work_stream};

void fake_set(PyObject* export_fn, PyObject* stream_fn) {
  g_export = export_fn;
  g_stream = stream_fn;
}
"""


class Exchange:
    """The API's two functions, as the compiled stand-in calls them."""

    def __init__(self, helper):
        self.helper = helper
        self.error = ProducerError("the producer failed")
        self.behave()

    def behave(self, export="ok", stream="ok"):
        """Each of "ok", "raise" (this producer's error) or "silent" (0, no exception)."""

        def answer(how, value):
            if how == "raise":
                raise self.error
            return value if how == "ok" else 0

        # the callables stay referenced here while the C side holds them
        self.callables = (
            lambda obj: answer(export, ctypes.addressof(obj.dl)),
            lambda device: answer(stream, 0x5000),
        )
        self.helper.fake_set(*self.callables)


class ExchangeTensor:
    """A CUDA tensor (never touched: every call here fails before device work)."""

    def __init__(self, shape, code=DLDataTypeCode.Float, bits=16):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.dl = DLTensor()
        self.dl.data = 0x100000
        self.dl.device.device_type, self.dl.device.device_id = DLDeviceType.CUDA, 0
        self.dl.ndim = len(shape)
        self.dl.dtype.code, self.dl.dtype.bits, self.dl.dtype.lanes = code, bits, 1
        self.dl.shape = self.shape


@pytest.fixture(scope="module")
def exchange(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in exchange API")
    tmp = tmp_path_factory.mktemp("exchange")
    (tmp / "exchange.c").write_text(EXCHANGE_C)
    so = tmp / "libexchange.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-I", INCLUDE, "-o", str(so), str(tmp / "exchange.c")], check=True
    )
    helper = ctypes.PyDLL(str(so))
    helper.fake_set.argtypes = [ctypes.py_object, ctypes.py_object]
    helper.fake_set.restype = None
    state = Exchange(helper)
    api = ctypes.addressof(ctypes.c_char.in_dll(helper, "fake_api"))
    api_v2 = ctypes.addressof(ctypes.c_char.in_dll(helper, "fake_api_v2"))
    # one type per form of __dlpack_c_exchange_api__: the library caches it per type
    state.types = {
        "valid": type(
            "Valid",
            (ExchangeTensor,),
            {"__dlpack_c_exchange_api__": capsule(api, b"dlpack_exchange_api")},
        ),
        "wrong capsule name": type(
            "WrongName",
            (ExchangeTensor,),
            {"__dlpack_c_exchange_api__": capsule(api, b"something_else")},
        ),
        "version 2": type(
            "Version2",
            (ExchangeTensor,),
            {"__dlpack_c_exchange_api__": capsule(api_v2, b"dlpack_exchange_api")},
        ),
        "not a capsule": type("NotCapsule", (ExchangeTensor,), {"__dlpack_c_exchange_api__": 42}),
    }
    yield state
    helper.fake_set(None, None)


def tensors(kind, exchange):
    """a (4x8), b (8x6), d (4x6), w (1x8x6) and offsets (2) of the given exchange type."""
    tp = exchange.types[kind]
    return (tp((4, 8)), tp((8, 6)), tp((4, 6)), tp((1, 8, 6)), tp((2,), DLDataTypeCode.Int, 32))


def c_entry_points(lib):
    """Each Python-object entry point on exchange tensors (a, b, d, w, offsets), the
    producer's stream asked for where the call takes one."""
    flags = PCR_STREAM_FROM_PRODUCER

    def arrays(*objs):
        return [(ctypes.py_object * 1)(o) for o in objs]

    def plan_create(a, b, d, w, o):
        handle = ctypes.c_void_p()
        st = lib.pcr_py_plan_create(
            a, b, None, d, 1.0, 0.0, None, -1, ctypes.byref(_lib.Problem()), ctypes.byref(handle)
        )
        assert not handle.value
        return st

    return {
        "builtin gemm": lambda a, b, d, w, o: lib.gemm(a, b, None, d, 1.0, 0.0, None, -1, flags, 0),
        "pcr_py_describe": lambda a, b, d, w, o: lib.pcr_py_describe(
            a, b, None, d, 1.0, 0.0, None, ctypes.byref(_lib.Problem()), None, 0
        ),
        "pcr_py_plan_create": plan_create,
        "pcr_py_grouped_gemm": lambda a, b, d, w, o: lib.pcr_py_grouped_gemm(
            *arrays(a, b), None, *arrays(d), None, 1, 1.0, 0.0, -1, flags, 0, None
        ),
        "pcr_py_moe_gemm": lambda a, b, d, w, o: lib.pcr_py_moe_gemm(
            a, w, o, d, 1.0, None, -1, flags, 0, None
        ),
        "gemm": lambda a, b, d, w, o: pcr.gemm(a, b, None, d),
        "explain": lambda a, b, d, w, o: pcr.explain(a, b, None, d),
        "Gemm": lambda a, b, d, w, o: pcr.Gemm(a, b, None, d),
        "grouped_gemm": lambda a, b, d, w, o: pcr.grouped_gemm([a], [b], None, [d]),
        "moe_gemm": lambda a, b, d, w, o: pcr.moe_gemm(a, w, o, d),
    }


C_ENTRY_POINTS = list(c_entry_points(lib=None))  # names only: the calls read lib when made
#: entry points that ask the producer for its current stream (before any device work)
ASK_STREAM = {
    "builtin gemm",
    "pcr_py_grouped_gemm",
    "pcr_py_moe_gemm",
    "gemm",
    "grouped_gemm",
    "moe_gemm",
}


def outcome(call, lib):
    """The exception a call raises, or the one its returned status stands for."""
    try:
        st = call()
    except Exception as e:  # noqa: BLE001  (SystemError included: the test rejects it)
        return e
    return lib.error(st) if st else None


@pytest.mark.parametrize(
    "entry, fault",
    [
        (entry, f"{part} {how}")
        for entry in C_ENTRY_POINTS
        for part in ("export", "stream")
        for how in ("raises", "fails silently")
        if part == "export" or entry in ASK_STREAM
    ],
)
def test_exchange_api_producers(lib, exchange, entry, fault):
    part, how = fault.split(" ", 1)
    exchange.behave(**{part: "raise" if how == "raises" else "silent"})
    try:
        error = outcome(lambda: c_entry_points(lib)[entry](*tensors("valid", exchange)), lib)
    finally:
        exchange.behave()
    assert not isinstance(error, SystemError), error
    if how == "raises":
        assert error is exchange.error  # the producer's own exception, unchanged
    else:
        assert isinstance(error, pcr.Error) and error.status == errors.ERR_PYTHON, error
        assert "exchange API" in str(error) and ("stream" in str(error)) == (part == "stream")


@pytest.mark.parametrize("kind", ["wrong capsule name", "version 2", "not a capsule"])
@pytest.mark.parametrize("entry", C_ENTRY_POINTS)
def test_unusable_exchange_apis_are_dtype_errors(lib, exchange, entry, kind):
    error = outcome(lambda: c_entry_points(lib)[entry](*tensors(kind, exchange)), lib)
    assert isinstance(error, pcr.DTypeError), error
    assert "__dlpack_c_exchange_api__" in str(error)


@pytest.mark.parametrize(
    "extras,match",
    [
        ((None, None, None, "relu", 0, 0.0, 0.0, None, None, None, None), "activation and math"),
        ((None, None, None, 0, 2.5, 0.0, 0.0, None, None, None, None), "activation and math"),
        ((None, None, None, 2**70, 0, 0.0, 0.0, None, None, None, None), "activation and math"),
        ((None, None, None, 8, 0, "0.2", 0.0, None, None, None, None), "parameters must be floats"),
        (
            (None, None, None, 0, 0, 0.0, 0.0, (1, 0, 0, 1, 1, 1), None, None, None),
            "conv must be None or 8 ints",
        ),
        (
            (None, None, None, 0, 0, 0.0, 0.0, (1, 0, 0, 1, 1, 1, 1, "1"), None, None, None),
            "conv must be None",
        ),
        ((None, None, None, 0, 0), "extras must be the tuple"),
        ((None, None, None, 0, 0, 0.0, 0.0, None, None), "extras must be the tuple"),
    ],
)
def test_extras_of_the_wrong_type(lib, extras, match):
    """The extras tuple's activation and math must be ints and the activation's parameters
    floats; anything else was read with a Python exception left set (a SystemError from
    the builtin)."""
    a, b, d = np.ones((4, 8), F16), np.ones((8, 6), F16), np.zeros((4, 6), F16)
    for call in (
        lambda: lib.gemm(
            a.__dlpack__(), b.__dlpack__(), None, d.__dlpack__(), 1.0, 0.0, extras, -1, 0, 0
        ),
        lambda: lib.pcr_py_describe(
            a.__dlpack__(),
            b.__dlpack__(),
            None,
            d.__dlpack__(),
            1.0,
            0.0,
            extras,
            ctypes.byref(_lib.Problem()),
            None,
            0,
        ),
    ):
        error = outcome(call, lib)
        assert isinstance(error, pcr.InvalidArgumentError), error
        assert match in str(error)


# ---- lying producers: a versioned capsule made by hand -----------------------------------

_NAMES[b"dltensor_versioned"] = ctypes.create_string_buffer(b"dltensor_versioned")


class _Versioned(ctypes.Structure):
    """DLPack 1.x's DLManagedTensorVersioned."""

    _fields_ = [
        ("version", ctypes.c_uint32 * 2),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


def versioned(array, flags=0, shape=True):
    """A capsule exporting ``array`` (host memory) as DLPack 1.0 would, with ``flags`` and,
    unless ``shape``, a NULL shape pointer."""
    m = _Versioned()
    m.version[0], m.version[1] = 1, 1
    m.flags = flags
    t = m.dl_tensor
    t.data = array.ctypes.data
    t.device.device_type, t.device.device_id = DLDeviceType.CPU, 0
    t.ndim = array.ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = DLDataTypeCode.Float, 16, 1
    dims = (ctypes.c_int64 * array.ndim)(*array.shape)
    t.shape = dims if shape else None
    t.strides = None
    cap = capsule(ctypes.addressof(m), b"dltensor_versioned")
    return cap, (m, dims, array)  # the second keeps the memory alive


def test_a_capsule_without_a_shape_is_refused_not_read(lib):
    a, b, d = np.ones((4, 8), F16), np.ones((8, 6), F16), np.zeros((4, 6), F16)
    bad, keep = versioned(a, shape=False)
    error = outcome(
        lambda: lib.gemm(bad, b.__dlpack__(), None, d.__dlpack__(), 1.0, 0.0, None, -1, 0, 0), lib
    )
    assert isinstance(error, pcr.InvalidArgumentError) and "without a shape" in str(error)
    del keep


def test_an_output_exported_as_a_copy_is_refused(lib):
    """DLPack 1.1's IS_COPIED: writes to the copy would never reach the producer's array."""
    a, b, d = np.ones((4, 8), F16), np.ones((8, 6), F16), np.zeros((4, 6), F16)
    copied, keep = versioned(d, flags=2)
    error = outcome(
        lambda: lib.gemm(a.__dlpack__(), b.__dlpack__(), None, copied, 1.0, 0.0, None, -1, 0, 0),
        lib,
    )
    assert isinstance(error, pcr.ReadOnlyError) and "IS_COPIED" in str(error)
    readable, keep2 = versioned(a, flags=2)  # a copied input is fine to read
    error = outcome(
        lambda: lib.gemm(readable, b.__dlpack__(), None, d.__dlpack__(), 1.0, 0.0, None, -1, 0, 0),
        lib,
    )
    assert not isinstance(error, pcr.ReadOnlyError)
    del keep, keep2


class _ReadOnlyCai:
    """A GPU-looking array whose __cuda_array_interface__ says its data is read-only."""

    def __init__(self, shape, typestr):
        self.shape, self.typestr = shape, typestr

    @property
    def __cuda_array_interface__(self):
        data = (0x10000000, True)
        return {"shape": self.shape, "typestr": self.typestr, "data": data, "version": 3}


@pytest.mark.parametrize("output", ["d", "aux", "amax"])
def test_a_read_only_cai_output_is_refused_before_anything(output):
    """Every output (d, aux, amax), not d alone: nothing is read or written."""
    a, b = np.ones((4, 8), F16), np.ones((8, 4), F16)
    d = np.empty((4, 4), F16)
    kwargs = {}
    if output == "d":
        d = _ReadOnlyCai((4, 4), "<f2")
    elif output == "aux":
        kwargs = dict(aux=_ReadOnlyCai((4, 4), "<f2"), activation="gelu")
    else:
        kwargs = dict(amax=_ReadOnlyCai((), "<f4"))
    with pytest.raises(pcr.ReadOnlyError, match=f"{output} exposes a read-only"):
        pcr.gemm(a, b, None, d, **kwargs)
