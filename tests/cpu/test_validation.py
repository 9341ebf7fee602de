"""Front-door checks on host arrays: DLPack parsing, canonical form, and every error path.

Everything here is decided before any device work, so it runs without a GPU; a valid
call then needs the GPU (NoDeviceError here, a result on a GPU machine).
"""

import ctypes

import numpy as np
import pytest
from helpers import built_kernels

import pycutlass_rt as pcr
from pycutlass_rt import _call, _dlpack, _lib, errors
from pycutlass_rt._abi import (
    PCR_KERNEL_SELECT,
    PCR_STREAM_FROM_PRODUCER,
    Activation,
    BiasAxis,
    CMode,
    DLDataTypeCode,
    DLDeviceType,
    Epilogue,
    ScaleKind,
    Staged,
    Status,
)

F16 = np.float16


def mats(m=4, n=6, k=8, dtype=F16):
    rng = np.random.default_rng(0)
    return (
        rng.integers(-4, 5, (m, k)).astype(dtype),
        rng.integers(-4, 5, (k, n)).astype(dtype),
        np.zeros((m, n), dtype),
    )


class _Cai:
    """A minimal __cuda_array_interface__ producer over host memory (parsed, never run)."""

    def __init__(self, arr, strides=None, stream=None):
        self.__cuda_array_interface__ = {
            "shape": arr.shape,
            "typestr": "<f2",
            "data": (arr.ctypes.data, False),
            "version": 3,
            "strides": strides,
            "stream": stream,
        }


def describe(
    lib,
    a,
    b,
    c,
    d,
    alpha=1.0,
    beta=0.0,
    bias=None,
    activation=0,
    scale_a=None,
    scale_b=None,
    math=0,
    aux=None,
    amax=None,
):
    """(status, problem) from the C describe step; NO_DEVICE still fills the problem.
    ``activation``: a pcr_activation code, or what pcr.gemm takes."""
    act = _call.Act(activation) if isinstance(activation, int) else _call.activation_of(activation)
    objs, _, _, keep = _dlpack.prepare(
        (a, b, c, d, bias, scale_a, scale_b, aux, amax, None), _call.NAMES, None, None
    )
    p = _lib.Problem()
    st = lib.pcr_py_describe(
        *objs[:4],
        alpha,
        beta,
        _call.extras(objs, act, math),
        ctypes.byref(p),
        None,
        0,
    )
    return st, p


def expect_valid(lib, *args, **kw):
    st, p = describe(lib, *args, **kw)
    assert st in (0, errors.ERR_NO_DEVICE), lib.last_error()
    return p


def expect_valid_if_built(lib, dtypes, epilogue, *args, **kw):
    """expect_valid where the build holds a kernel of ``dtypes`` (input, output) and
    ``epilogue``; elsewhere (a filtered build) the UnsupportedError saying so."""
    if any((k.dtype_a, k.dtype_d, k.epilogue) == (*dtypes, epilogue) for k in built_kernels()):
        return expect_valid(lib, *args, **kw)
    st, _ = describe(lib, *args, **kw)
    assert st == errors.ERR_UNSUPPORTED and "no kernel in this build computes" in lib.last_error()
    return None


@pytest.mark.parametrize(
    "la,lb,ld,expect",
    [
        ("r", "r", "r", (0, 0, 0)),  # tt
        ("r", "c", "r", (0, 1, 0)),  # tn
        ("c", "r", "r", (1, 0, 0)),  # nt
        ("c", "c", "r", (1, 1, 0)),  # nn
        ("r", "r", "c", (1, 1, 1)),  # column-major d: D^T = B^T A^T
        ("c", "c", "c", (0, 0, 1)),
    ],
)
def test_canonical_layouts(lib, la, lb, ld, expect):
    a, b, d = mats()
    conv = lambda x, order: x if order == "r" else np.asfortranarray(x)  # noqa: E731
    p = expect_valid(lib, conv(a, la), conv(b, lb), None, conv(d, ld))
    assert (p.layout_a, p.layout_b, p.transposed) == expect
    m, n = (4, 6) if not p.transposed else (6, 4)
    assert (p.m, p.n, p.k) == (m, n, 8)


def test_padded_and_sliced_views(lib):
    big = np.zeros((16, 40), F16)
    a = big[:4, :8]  # leading dimension 40
    b = np.zeros((8, 32), F16)[:, 3:9]  # shifted pointer: 6 bytes off 16
    d = np.zeros((4, 16), F16)[:, :6]
    p = expect_valid(lib, a, b, None, d)
    assert p.align_a == 16 and p.align_b == 2 and p.align_d == 4


def test_alignment_of_odd_sizes(lib):
    a, b, d = mats(127, 1000, 4097)
    p = expect_valid(lib, a, b, None, d)
    assert p.align_a == 2 and p.align_b == 16 and p.align_d == 16


def test_size_one_dims_take_any_stride(lib):
    a = np.zeros((1, 8), F16)
    a_odd = np.lib.stride_tricks.as_strided(a, (1, 8), (12345, 2))
    b = np.zeros((8, 1), F16)
    b_odd = np.lib.stride_tricks.as_strided(b, (8, 1), (2, 999))
    d = np.zeros((1, 1), F16)
    p = expect_valid(lib, a_odd, b_odd, None, d)
    assert (p.m, p.n, p.k) == (1, 1, 8)


def test_strided_vector_is_column_major(lib):
    # a 1 x K view with element stride 2 has no unit stride along K, but is a valid
    # column-major matrix with leading dimension 2
    a = np.zeros((1, 16), F16)[:, ::2]
    _, b, d = mats(1, 6, 8)
    p = expect_valid(lib, a, b, None, d)
    assert p.layout_a == 1


@pytest.mark.parametrize(
    "beta,c_kind,mode",
    [
        (0.0, None, CMode.C_NONE),
        (1.0, "same", CMode.C_READ),
        (1.0, "is_d", CMode.C_READ),
        (1.0, "col", CMode.C_COPIED),
        (1.0, "f32", CMode.C_COPIED),
        (1.0, "broadcast", CMode.C_COPIED),
        (0.0, "same", CMode.C_NONE),
    ],
)
def test_c_modes(lib, beta, c_kind, mode):
    a, b, d = mats()
    c = {
        None: None,
        "same": np.ones_like(d),
        "is_d": d,
        "col": np.asfortranarray(np.ones_like(d)),
        "f32": np.ones(d.shape, np.float32),
        "broadcast": np.broadcast_to(np.ones((1, 6), F16), (4, 6)),
    }[c_kind]
    p = expect_valid(lib, a, b, c, d, beta=beta)
    assert p.c_mode == mode


def err(exc, match, *args, **kw):
    with pytest.raises(exc, match=match):
        pcr.gemm(*args, **kw)


def test_shape_and_rank_errors():
    a, b, d = mats()
    err(pcr.InvalidArgumentError, "shape mismatch", a, b.T, None, d)
    err(pcr.InvalidArgumentError, "shape mismatch", a, b, None, d[:3])
    err(pcr.InvalidArgumentError, "c is 3x6 but d is 4x6", a, b, np.zeros((3, 6), F16), d, beta=1.0)
    err(pcr.InvalidArgumentError, "2-D matrix", a[None, None], b, None, d)
    err(pcr.InvalidArgumentError, "2-D matrix", a, b, None, np.zeros(24, F16))


def test_dimensions_past_int32_are_refused():
    # 32-bit problem coordinates in every kernel: refuse rather than wrap around
    huge = np.lib.stride_tricks.as_strided(np.zeros(8, F16), (2**31, 8), (0, 2))
    a, b, d = mats(k=8)
    err(pcr.UnsupportedError, "a has a dimension past 2\\^31 - 1024", huge, b, None, d)
    err(pcr.UnsupportedError, "b has a dimension past 2\\^31 - 1024", a, huge.T, None, d)
    # within a tile or a pad of 2^31, tile counts and padded extents would wrap in int32
    near = np.lib.stride_tricks.as_strided(np.zeros(8, F16), (8, 2**31 - 1), (2, 0))
    err(pcr.UnsupportedError, "a has a dimension past 2\\^31 - 1024", near, near.T, None, d)
    # element counts past 2^31 with 32-bit dimensions are fine (64-bit offsets; tests/gpu)
    tall = np.lib.stride_tricks.as_strided(np.zeros(8, F16), (2**31 - 1024, 8), (0, 2))
    err(pcr.InvalidArgumentError, "zero stride", tall, b, None, d)


def test_stride_errors():
    a, b, d = mats()
    err(pcr.InvalidArgumentError, "negative stride", a[:, ::-1], b, None, d)
    err(pcr.InvalidArgumentError, "negative stride", a, b[::-1], None, d)
    err(pcr.InvalidArgumentError, "zero stride", np.broadcast_to(a[:1], a.shape), b, None, d)
    no_unit = np.lib.stride_tricks.as_strided(np.zeros(256, F16), (4, 8), (32, 4))
    err(pcr.InvalidArgumentError, "neither row- nor column-major", no_unit, b, None, d)
    rows_overlap = np.lib.stride_tricks.as_strided(np.zeros(256, F16), (4, 8), (8, 2))
    err(pcr.InvalidArgumentError, "neither row- nor column-major", rows_overlap, b, None, d)
    err(
        pcr.InvalidArgumentError,
        "neither row- nor column-major",
        a,
        b,
        None,
        np.zeros((8, 12), F16)[::2, ::2],
    )


def test_dtype_errors():
    a, b, d = mats()
    err(
        pcr.DTypeError,
        "dtype pycutlass_rt does not handle",
        a.astype(np.int16),
        b.astype(np.int16),
        None,
        d,
    )
    err(pcr.UnsupportedError, "must share a dtype", a, b.astype(np.float32), None, d)
    with pytest.raises(pcr.UnsupportedError, match="available: .*float16 x float16 -> float16"):
        pcr.gemm(a, b, None, d.astype(np.float64))
    err(pcr.DTypeError, "not a tensor", [[1.0]], b, None, d)
    err(TypeError, "not a tensor", a, "b", None, d)


@pytest.mark.parametrize("bad", ["1", 1j, None, True, [1.0]])
def test_bad_scalars(bad):
    a, b, d = mats()
    err(pcr.DTypeError, "alpha must be a real number", a, b, None, d, alpha=bad)
    err(pcr.DTypeError, "beta must be a real number", a, b, None, d, beta=bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scalars(bad):
    a, b, d = mats()
    err(pcr.InvalidArgumentError, "finite", a, b, None, d, alpha=bad)


def test_beta_without_c():
    a, b, d = mats()
    err(pcr.InvalidArgumentError, "c is None but beta", a, b, None, d, beta=0.5)


def test_read_only_output_and_inputs():
    a, b, d = mats()
    ro = d.copy()
    ro.flags.writeable = False
    err(pcr.ReadOnlyError, "d is read-only", a, b, None, ro)
    a.flags.writeable = False  # read-only inputs are fine
    try:
        pcr.gemm(a, b, None, d)
    except pcr.NoDeviceError:
        pass


def test_aliasing():
    a, b, d = mats(6, 6, 6)
    err(pcr.OverlapError, "d overlaps a", a, b, None, a)
    err(pcr.OverlapError, "d overlaps b", a, b, None, b)
    buf = np.zeros((4, 12), F16)
    err(pcr.OverlapError, "c overlaps d", a[:4], b, buf[:, 1:7], buf[:, :6], beta=1.0)


def test_host_mixed_with_device_is_rejected(lib):
    a, b, d = mats()
    a_cap = a.__dlpack__()
    # a CUDA operand built through the __cuda_array_interface__ path
    objs = [a_cap, None, None, d.__dlpack__()]
    cap, keep = _dlpack.cai_capsule(_Cai(b), "b", lambda ptr: 0)
    objs[1] = cap
    st = lib.gemm(*objs[:4], 1.0, 0.0, None, -1, 0, 0)
    assert st == errors.ERR_DEVICE_MISMATCH and "host" in lib.last_error()


def test_cuda_array_interface_is_parsed(lib):
    a, b, d = mats()
    caps, keep = zip(
        *[_dlpack.cai_capsule(_Cai(x), n, lambda p: 0) for x, n in ((a, "a"), (b, "b"), (d, "d"))]
    )
    p = _lib.Problem()
    st = lib.pcr_py_describe(
        caps[0], caps[1], None, caps[2], 1.0, 0.0, None, ctypes.byref(p), None, 0
    )
    assert st in (0, errors.ERR_NO_DEVICE), lib.last_error()
    assert (p.m, p.n, p.k, p.layout_a) == (4, 6, 8, 0)
    cap_t, _ = _dlpack.cai_capsule(_Cai(a, strides=(2, 16)), "a", lambda p: 0)  # column-major view
    assert lib.pcr_py_describe(
        cap_t, caps[1], None, caps[2], 1.0, 0.0, None, ctypes.byref(p), None, 0
    ) in (
        0,
        errors.ERR_NO_DEVICE,
    )
    assert p.layout_a == 1
    with pytest.raises(pcr.DTypeError, match="not supported"):
        _dlpack.cai_capsule(
            type(
                "X",
                (),
                {
                    "__cuda_array_interface__": {
                        "shape": (1,),
                        "typestr": "<c8",
                        "data": (0, False),
                        "version": 3,
                    }
                },
            )(),
            "a",
            None,
        )


def test_capsules_are_read_once_and_consumed_ones_rejected(lib):
    a, b, d = mats()
    cap = a.__dlpack__(max_version=(1, 0))
    ctypes.pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ctypes.pythonapi.PyCapsule_SetName(cap, b"used_dltensor_versioned")
    st = lib.gemm(cap, b.__dlpack__(), None, d.__dlpack__(), 1.0, 0.0, None, -1, 0, 0)
    assert st == errors.ERR_INVALID_ARGUMENT and "already consumed" in lib.last_error()
    # an unconsumed capsule passed by the user is left for its destructor (deleter runs once)
    cap = a.__dlpack__()
    pcr_call = lambda: pcr.gemm(cap, b, None, d)  # noqa: E731
    for _ in range(2):
        try:
            pcr_call()
        except pcr.NoDeviceError:
            pass


def test_unknown_kernel_name():
    a, b, d = mats()
    err(pcr.KernelNotFoundError, "no kernel named 'nope'", a, b, None, d, kernel="nope")
    err(pcr.DTypeError, "kernel must be a kernel name", a, b, None, d, kernel=3)


def test_stream_handles():
    class Proto:
        def __cuda_stream__(self):
            return (0, 1234)

    class Torchish:
        cuda_stream = 77

    class Cupyish:
        ptr = 99

    assert _dlpack.stream_handle(5) == 5
    assert _dlpack.stream_handle(Proto()) == 1234
    assert _dlpack.stream_handle(Torchish()) == 77
    assert _dlpack.stream_handle(Cupyish()) == 99
    assert _dlpack.dlpack_stream_code(0) == 1 and _dlpack.dlpack_stream_code(42) == 42
    with pytest.raises(pcr.DTypeError):
        _dlpack.stream_handle("default")
    with pytest.raises(pcr.InvalidArgumentError):
        _dlpack.stream_handle(-3)


def test_hot_path_is_one_c_call_with_the_stream_decided(monkeypatch):
    """A plain GEMM of exchange-API tensors goes to the library's builtin in one call: the
    producer's stream without ``stream``, a handle as given (flags 0); arguments it does
    not check go the general way, which refuses them; a failed hot call raises at once
    (work it enqueued never runs twice) and only a new problem is selected the general
    way."""

    class Tensor:  # stands in for a type with __dlpack_c_exchange_api__ (C reads it)
        pass

    class Library:
        status = 0
        calls: list = []

        def gemm(self, *args):
            self.calls.append(args)
            return self.status

        def error(self, status):
            return errors.from_status(status, "refused")

    lib = Library()
    monkeypatch.setattr(_lib, "loaded", lib)
    monkeypatch.setattr(_dlpack, "EXCHANGE_TYPES", {Tensor})
    a, b, d = Tensor(), Tensor(), Tensor()
    assert pcr.gemm(a, b, None, d) is d
    assert pcr.gemm(a, b, d, d, 2, 1, stream=7) is d  # int scalars: C reads them as floats
    (*ops, alpha, beta, extra, kernel, flags, stream), second = lib.calls
    assert ops == [a, b, None, d] and (alpha, beta, extra) == (1.0, 0.0, None)
    assert (kernel, flags, stream) == (PCR_KERNEL_SELECT, PCR_STREAM_FROM_PRODUCER, 0)
    assert second[2:6] == (d, d, 2, 1) and second[-2:] == (0, 7)
    with pytest.raises(pcr.DTypeError):
        pcr.gemm(a, b, None, d, True)  # a bool is no scalar: refused the general way
    with pytest.raises(pcr.InvalidArgumentError, match="negative"):
        pcr.gemm(a, b, None, d, stream=-3)  # not an accepted handle: the general way
    for status in (Status.ERR_INVALID_ARGUMENT, Status.ERR_CUDA):
        lib.status, lib.calls[:] = status, []
        with pytest.raises(errors.from_status(status, "").__class__, match="refused"):
            pcr.gemm(a, b, None, d)
        assert len(lib.calls) == 1, f"{status!r}: a failed call was made again"


def test_valid_call_without_gpu_raises_no_device(has_gpu):
    if has_gpu:
        pytest.skip("a GPU is present: tests/gpu covers valid calls")
    a, b, d = mats()
    with pytest.raises(pcr.NoDeviceError, match="no NVIDIA driver|no usable CUDA device"):
        pcr.gemm(a, b, None, d)
    with pytest.raises(pcr.NoDeviceError):
        pcr.explain(a, b, None, d)


def test_exception_hierarchy():
    assert issubclass(pcr.InvalidArgumentError, ValueError) and issubclass(
        pcr.DTypeError, TypeError
    )
    assert issubclass(pcr.UnsupportedError, NotImplementedError)
    assert issubclass(pcr.NoKernelForArchError, pcr.UnsupportedError)
    for status in range(1, 14):
        e = errors.from_status(status, "msg")
        assert isinstance(e, pcr.Error) and e.status == status
    e = errors.from_status(errors.ERR_CUDA, "launch: cudaErrorLaunchFailure (unspecified)")
    assert isinstance(e, pcr.CudaError) and e.cuda_error == "cudaErrorLaunchFailure"


def view(x, strides=None, shape=None):
    """A hand-built DLTensor of host array x (float16, or x's int32), as a C caller makes."""
    shape = shape or x.shape
    t = _lib.DLTensor()
    t.data, t.ndim = x.ctypes.data, len(shape)
    t.device.device_type, t.device.device_id = DLDeviceType.CPU, 0
    code = DLDataTypeCode.Int if x.dtype == np.int32 else DLDataTypeCode.Float
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, x.dtype.itemsize * 8, 1
    t.shape = (ctypes.c_int64 * len(shape))(*shape)
    t.strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
    t._keep = (t.shape, t.strides)
    return t


def test_pure_c_entry_points(lib):
    """pcr_describe / pcr_gemm on hand-built DLTensors (the ABI for non-Python callers)."""
    a, b, d = mats(4, 6, 8)
    p = _lib.Problem()
    st = lib.pcr_describe(view(a), view(b), None, view(d), 1.0, 0.0, None, ctypes.byref(p), None, 0)
    assert st in (0, errors.ERR_NO_DEVICE) and (p.m, p.n, p.k) == (4, 6, 8)
    # strides given explicitly, in elements: b read as column-major through its transpose
    bt = np.ascontiguousarray(b.T)
    st = lib.pcr_describe(
        view(a), view(bt, (1, 8), (8, 6)), None, view(d), 1.0, 0.0, None, ctypes.byref(p), None, 0
    )
    assert st in (0, errors.ERR_NO_DEVICE) and p.layout_b == 1
    st = lib.pcr_gemm(view(a), view(b), None, None, 1.0, 0.0, None, -1, None, None)
    assert st == errors.ERR_INVALID_ARGUMENT and "required" in lib.last_error()
    st = lib.pcr_gemm(view(a), view(b), None, view(d), 1.0, 0.0, None, 10**6, None, None)
    assert st in (errors.ERR_KERNEL_NOT_FOUND, errors.ERR_NO_DEVICE)


def test_pure_c_plans_and_grouped_calls(lib, has_gpu):
    """The rest of the ABI for non-Python callers (Python reaches the same work through the
    pcr_py_* functions): plans on DLTensors, grouped and MoE GEMMs. Host operands pass the
    front door, then meet the device step (a GPU) or the GPU-only rule (no GPU)."""
    a, b, d = mats(4, 6, 8)
    gpu_only = errors.ERR_INVALID_ARGUMENT if has_gpu else errors.ERR_NO_DEVICE
    plan = ctypes.c_void_p()
    args = (view(a), view(b), None, view(d), 1.0, 0.0, None, -1, None)
    assert lib.pcr_plan_create(*args, None) == errors.ERR_INVALID_ARGUMENT
    assert "plan is NULL" in lib.last_error()
    assert lib.pcr_plan_create(*args, ctypes.byref(plan)) == gpu_only and not plan.value
    assert (
        lib.pcr_plan_run_with(None, view(a), view(b), None, view(d), None, None)
        == errors.ERR_INVALID_ARGUMENT
        and "plan is NULL" in lib.last_error()
    )

    def group(x):
        return (ctypes.POINTER(_lib.DLTensor) * 1)(ctypes.pointer(view(x)))

    keep = [group(x) for x in (a, b, d)]
    # a group's dtypes are known by the build's grouped kernels: without f16 ones, refused
    f16_grouped = any(k.grouped and k.dtype_a == "float16" for k in built_kernels())
    assert lib.pcr_grouped_gemm(*keep[:2], None, keep[2], 1, 1.0, 0.0, None, -1, None, None) == (
        gpu_only if f16_grouped else errors.ERR_UNSUPPORTED
    )
    assert lib.pcr_grouped_gemm(None, None, None, None, 0, 1.0, 0.0, None, -1, None, None) == 0
    assert (
        lib.pcr_grouped_gemm(None, None, None, None, -1, 1.0, 0.0, None, -1, None, None)
        == errors.ERR_INVALID_ARGUMENT
        and "count >= 0" in lib.last_error()
    )
    w, offsets = np.ones((1, 8, 6), F16), np.array([0, 4], np.int32)
    assert (
        lib.pcr_moe_gemm(view(a), view(b), view(offsets), view(d), 1.0, None, -1, None, None)
        == errors.ERR_INVALID_ARGUMENT
        and "w must be 3-D" in lib.last_error()
    )
    assert (
        lib.pcr_moe_gemm(view(a), view(w), None, view(d), 1.0, None, -1, None, None)
        == errors.ERR_INVALID_ARGUMENT
        and "offsets and out are required" in lib.last_error()
    )


def test_operands_on_two_gpus_are_rejected(lib):
    a, b, d = mats()
    caps = [
        _dlpack.cai_capsule(_Cai(x), n, lambda p, dev=dev: dev)
        for x, n, dev in ((a, "a", 0), (b, "b", 1), (d, "d", 0))
    ]
    st = lib.gemm(caps[0][0], caps[1][0], None, caps[2][0], 1.0, 0.0, None, -1, 0, 0)
    assert st == errors.ERR_DEVICE_MISMATCH
    assert "b is on cuda:1 but d is on cuda:0" in lib.last_error()


def test_jax_outputs_are_refused():
    a, b, d = mats()

    class Array:  # stands in for jax.Array: exports through __dlpack__, immutable
        __module__ = "jaxlib._jax"

        def __dlpack__(self, **kw):
            return d.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    err(pcr.ReadOnlyError, "JAX arrays are immutable", a, b, None, Array())


def test_bias_broadcasts_like_numpy(lib):
    """(N,) and (1, N) add per column, (M, 1) per row; a column-major d flips the axis."""
    a, b, d = mats(4, 6, 8)
    col, row = BiasAxis.BIAS_PER_COLUMN, BiasAxis.BIAS_PER_ROW
    for bias, axis in (
        (np.zeros(6, F16), col),
        (np.zeros((1, 6), F16), col),
        (np.zeros((4, 1), F16), row),
        (np.zeros((1, 1, 6), F16), col),
    ):
        p = expect_valid(lib, a, b, None, d, bias=bias)
        assert (p.bias, p.epilogue, p.align_bias) == (axis, Epilogue.EPI_BIASACT, 16), bias.shape
    p = expect_valid(lib, a, b, None, np.asfortranarray(d), bias=np.zeros(6, F16))
    assert p.transposed and p.bias == row
    p = expect_valid(lib, a, b, None, d, activation=Activation.ACT_SILU)
    assert (p.bias, p.activation, p.epilogue) == (
        BiasAxis.BIAS_NONE,
        Activation.ACT_SILU,
        Epilogue.EPI_BIASACT,
    )
    assert expect_valid(lib, a, b, None, d).epilogue == 0


def test_bias_and_activation_errors():
    a, b, d = mats(4, 6, 8)
    bias5, bias_i16 = np.zeros(5, F16), np.zeros(6, np.int16)
    err(pcr.InvalidArgumentError, r"shape \(5,\) does not broadcast", a, b, None, d, bias=bias5)
    err(pcr.UnsupportedError, "bias is int16 but d is float16", a, b, None, d, bias=bias_i16)
    err(pcr.InvalidArgumentError, "does not broadcast", a, b, None, d, bias=np.zeros((4, 6), F16))
    err(
        pcr.UnsupportedError,
        "bias is float32 but d is float16",
        a,
        b,
        None,
        d,
        bias=np.zeros(6, np.float32),
    )
    err(
        pcr.InvalidArgumentError,
        "bias must be contiguous",
        a,
        b,
        None,
        d,
        bias=np.zeros(12, F16)[::2],
    )
    err(
        pcr.UnsupportedError,
        "one bias vector serves the whole batch",
        a,
        b,
        None,
        d,
        bias=np.zeros((2, 1, 6), F16),
    )
    err(pcr.OverlapError, "d overlaps bias", a, b, None, d, bias=d[0])
    err(
        pcr.InvalidArgumentError,
        "activation must be None or one of",
        a,
        b,
        None,
        d,
        activation="softplus",
    )
    err(pcr.InvalidArgumentError, "activation must be None or one of", a, b, None, d, activation=1)
    # parameters: clamp needs its bounds; each a real number, finite; min <= max (C's check)
    for act, exc, match in [
        ("clamp", pcr.InvalidArgumentError, r"takes \('clamp', min, max\)"),
        (("leaky_relu", 0.1, 0.2), pcr.InvalidArgumentError, r"\('leaky_relu', negative_slope\)"),
        (("relu", 1.0), pcr.InvalidArgumentError, "takes no parameters"),
        (("clamp", "0", 1), pcr.DTypeError, "clamp's min must be a real number"),
        (("clamp", 1, -1), pcr.InvalidArgumentError, "clamp: min 1 is above max -1"),
        (("leaky_relu", float("inf")), pcr.InvalidArgumentError, "parameters must be finite"),
    ]:
        err(exc, match, a, b, None, d, activation=act)
    # where a build has float16 -> float32 kernels but none with a fused epilogue (those are
    # outside the default tier)
    d32 = np.zeros((4, 6), np.float32)
    f16_f32 = {
        k.epilogue for k in built_kernels() if (k.dtype_a, k.dtype_d) == ("float16", "float32")
    }
    if "linear" in f16_f32 and "biasact" not in f16_f32:
        err(
            pcr.UnsupportedError,
            "float16 -> float32 with a fused bias/activation epilogue; "
            "available with a fused bias/activation epilogue: float16 x float16 -> float16",
            a,
            b,
            None,
            d32,
            bias=np.zeros(6, np.float32),
        )


def test_int32_epilogues_stay_exact(lib):
    """int8 -> int32 computes in int32: a bias (int32), relu and clamp to integer bounds
    are valid; every other activation, and a clamp to fractions, is refused up front."""
    a = np.ones((4, 8), np.int8)
    b = np.ones((6, 8), np.int8).T  # K-major b: tn, the int8 kernels' layout
    d = np.zeros((4, 6), np.int32)
    bias = np.arange(6, dtype=np.int32)
    for act in (None, "relu", ("clamp", -3, 5)):
        expect_valid_if_built(
            lib, ("int8", "int32"), "biasact", a, b, None, d, bias=bias, activation=act
        )
    for act in ("gelu", "silu", "sigmoid", "tanh", "hardswish", ("leaky_relu", 0.5)):
        name = act if isinstance(act, str) else act[0]
        err(
            pcr.UnsupportedError,
            f"their activations are relu and clamp .*not {name}",
            a,
            b,
            None,
            d,
            activation=act,
        )
    err(
        pcr.InvalidArgumentError,
        r"clamp's bounds must be integers .*\(got -0.5, 3\)",
        a,
        b,
        None,
        d,
        activation=("clamp", -0.5, 3),
    )
    err(
        pcr.UnsupportedError,
        "bias is float32 but d is int32",
        a,
        b,
        None,
        d,
        bias=np.zeros(6, np.float32),
    )


def test_aux_takes_ds_form_and_nothing_else(lib):
    """aux (the pre-activation) is d's twin: its shape, dtype and layout, overlapping
    nothing; a problem with it needs the aux epilogue, which no scale tensor joins."""
    a, b = np.ones((4, 8), F16), np.ones((8, 6), F16)
    d, aux = np.zeros((4, 6), F16), np.zeros((4, 6), F16)
    bias = np.zeros(6, F16)
    f16 = ("float16", "float16")
    p = expect_valid_if_built(lib, f16, "aux", a, b, None, d, bias=bias, activation="gelu", aux=aux)
    assert p is None or p.epilogue == Epilogue.EPI_AUX
    # both column-major: computed transposed
    p = expect_valid_if_built(lib, f16, "aux", a, b, None, d.T.copy().T, aux=aux.T.copy().T)
    assert p is None or (p.epilogue, p.transposed) == (Epilogue.EPI_AUX, 1)
    err(pcr.InvalidArgumentError, "aux takes d's shape", a, b, None, d, aux=np.zeros((4, 5), F16))
    err(
        pcr.UnsupportedError,
        "pass aux in d's dtype",
        a,
        b,
        None,
        d,
        aux=np.zeros((4, 6), np.float32),
    )
    err(pcr.UnsupportedError, "aux must have d's layout", a, b, None, d, aux=aux.T.copy().T)
    err(pcr.OverlapError, "aux overlaps d", a, b, None, d, aux=d)
    err(pcr.OverlapError, "aux overlaps a", a, b, None, d, aux=a[:, :6])
    batch, shared = np.zeros((2, 4, 6), F16), np.zeros((1, 4, 6), F16)
    one_for_all = np.lib.stride_tricks.as_strided(shared, batch.shape, (0, *shared.strides[1:]))
    err(pcr.OverlapError, "aux's matrices overlap", a, b, None, batch, aux=one_for_all)
    frozen = aux.copy()
    frozen.flags.writeable = False
    err(pcr.ReadOnlyError, "aux is read-only", a, b, None, d, aux=frozen)
    x8, w8 = np.ones((4, 16), np.int8), np.ones((6, 16), np.int8).T
    s = np.ones(4, np.float32)
    err(pcr.UnsupportedError, "aux with scale_a/scale_b", x8, w8, None, d, scale_a=s, aux=aux)


def test_amax_is_one_float32_value_overlapping_nothing(lib):
    """amax (max |d|) is one float32 element of any shape; it asks for the aux epilogue
    (with or without aux, bias or activation), and like aux it aliases no operand."""
    a, b = np.ones((4, 8), F16), np.ones((8, 6), F16)
    d, aux = np.zeros((4, 6), F16), np.zeros((4, 6), F16)
    f16 = ("float16", "float16")
    for amax in (np.zeros((), np.float32), np.zeros(1, np.float32), np.zeros((1, 1), np.float32)):
        p = expect_valid_if_built(lib, f16, "aux", a, b, None, d, amax=amax)
        assert p is None or p.epilogue == Epilogue.EPI_AUX
    p = expect_valid_if_built(
        lib, f16, "aux", a, b, None, d, activation="relu", aux=aux, amax=np.zeros((), np.float32)
    )
    assert p is None or p.epilogue == Epilogue.EPI_AUX
    for bad in (np.zeros(2, np.float32), np.zeros((), np.float16), np.zeros((0,), np.float32)):
        err(pcr.InvalidArgumentError, "amax is one float32 value", a, b, None, d, amax=bad)
    whole = np.zeros(32, np.float32)
    d32 = whole[:24].reshape(4, 6)
    a32, b32 = np.ones((4, 8), np.float32), np.ones((8, 6), np.float32)
    err(pcr.OverlapError, "amax overlaps d", a32, b32, None, d32, amax=whole[3:4])
    err(pcr.OverlapError, "amax overlaps a", a, b, None, d, amax=a.view(np.float32)[0, :1])
    frozen = np.zeros((), np.float32)
    frozen.flags.writeable = False
    err(pcr.ReadOnlyError, "amax is read-only", a, b, None, d, amax=frozen)
    # with quantized inputs amax rides the dequantizing epilogue (out_scale)
    x8, w8 = np.ones((4, 16), np.int8), np.ones((6, 16), np.int8).T
    st, p = describe(
        lib, x8, w8, None, d, scale_a=np.ones(4, np.float32), amax=np.zeros((), np.float32)
    )
    assert p.out_scale == 1 and p.epilogue == Epilogue.EPI_SCALED
    assert st in (0, errors.ERR_NO_DEVICE) or "reducing amax" in lib.last_error()
    # no aux epilogue for float32: the error says which dtypes have one
    err(
        pcr.UnsupportedError,
        "float32 -> float32 with a fused bias/activation epilogue writing aux or amax",
        a32,
        b32,
        None,
        np.zeros((4, 6), np.float32),
        amax=np.zeros((), np.float32),
    )


def test_batches_are_described(lib):
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, (3, 4, 8)).astype(F16)
    b = rng.integers(-4, 5, (8, 6)).astype(F16)  # shared by the batch
    d = np.zeros((3, 4, 6), F16)
    p = expect_valid(lib, a, b, None, d)
    assert (p.batch, p.m, p.n, p.k) == (3, 4, 6, 8)
    p = expect_valid(lib, a[:, :, :], np.broadcast_to(b, (3, 8, 6)), None, d)  # stride 0
    assert p.batch == 3
    # a batch stride that is not a multiple of 16 bytes lowers the alignment
    padded = np.zeros((3 * 4 * 8 + 3,), F16)
    odd = np.lib.stride_tricks.as_strided(padded, (3, 4, 8), (2 * (4 * 8 + 1), 16, 2))
    assert expect_valid(lib, odd, b, None, d).align_a == 2


def test_batch_errors():
    a, b, d = np.zeros((3, 4, 8), F16), np.zeros((2, 8, 6), F16), np.zeros((3, 4, 6), F16)
    err(pcr.InvalidArgumentError, "batch mismatch: b holds 2 matrices", a, b, None, d)
    err(
        pcr.InvalidArgumentError,
        "d holds 1 matrices but a holds 3",
        a,
        np.zeros((8, 6), F16),
        None,
        np.zeros((4, 6), F16),
    )
    shared_d = np.lib.stride_tricks.as_strided(np.zeros((4, 6), F16), (3, 4, 6), (0, 12, 2))
    err(pcr.OverlapError, "d's matrices overlap", a, np.zeros((8, 6), F16), None, shared_d)
    err(
        pcr.InvalidArgumentError,
        "2-D matrix or a 3-D batch",
        np.zeros((1, 1, 4, 8), F16),
        np.zeros((8, 6), F16),
        None,
        np.zeros((4, 6), F16),
    )


def test_grouped_front_door_checks():
    a, b, d = mats()
    with pytest.raises(pcr.InvalidArgumentError, match="one entry per group; got 1, 1, 1 and 2"):
        pcr.grouped_gemm([a], [b], None, [d, d])
    with pytest.raises(pcr.InvalidArgumentError, match="one entry per group"):
        pcr.grouped_gemm([a], [b], [None, None], [d])
    with pytest.raises(pcr.KernelNotFoundError):
        pcr.grouped_gemm([a], [b], None, [d], kernel="nope")
    with pytest.raises(pcr.DTypeError, match="alpha"):
        pcr.moe_gemm(a, b[None], np.zeros(2, np.int32), d, alpha="x")
    # an empty group list is a no-op that needs no GPU
    assert pcr.grouped_gemm([], [], None, []) == []
    with pytest.raises(pcr.DTypeError, match="stream"):
        pcr.grouped_gemm([], [], None, [], stream="not a stream")


def test_scales_are_checked(lib):
    i8 = np.int8
    a, b = mats(4, 6, 8, i8)[:2]
    d16 = np.zeros((4, 6), F16)
    # scale tensors apply to int8, fp8, float16 and bfloat16 inputs, not to float32 ones
    a16, b16, _ = mats()
    a32, b32, d32 = mats(4, 6, 8, np.float32)
    err(
        pcr.UnsupportedError,
        "int8, fp8, float16",
        a32,
        b32,
        None,
        d32,
        scale_a=np.ones(4, np.float32),
    )
    err(pcr.UnsupportedError, "must be float32", a, b, None, d16, scale_a=np.ones(4, np.float16))
    err(
        pcr.InvalidArgumentError,
        "pass one .per tensor. or 4",
        a,
        b,
        None,
        d16,
        scale_a=np.ones(6, np.float32),
    )
    err(pcr.InvalidArgumentError, "or 6", a, b, None, d16, scale_b=np.ones((6, 1), np.float32))
    err(pcr.MisalignedError, "contiguous", a, b, None, d16, scale_b=np.ones(12, np.float32)[::2])
    # kinds, and their roles once d is column-major (computed as d^T = b^T a^T)
    vector, tensor = ScaleKind.SCALE_VECTOR, ScaleKind.SCALE_TENSOR
    for dd, want in ((d16, (vector, tensor)), (np.asfortranarray(d16), (tensor, vector))):
        st, p = describe(
            lib,
            a,
            b,
            None,
            dd,
            scale_a=np.ones((4, 1), np.float32),
            scale_b=np.ones((1, 1), np.float32),
        )
        assert (p.scale_m, p.scale_n) == want, lib.last_error()
        assert st in (0, errors.ERR_NO_DEVICE, errors.ERR_UNSUPPORTED)
        if st == 0 or st == errors.ERR_NO_DEVICE:
            assert p.epilogue == Epilogue.EPI_SCALED
        else:
            assert "dequantizing" in lib.last_error()
    # Python numbers are folded into alpha: no dequantizing epilogue is needed
    st, p = describe(lib, a16, b16, None, d16)
    assert pcr._call.host_scales(2.0, 0.5, 3) == (3.0, None, None)


def test_int32_outputs_take_integer_scalars():
    a, b = mats(4, 6, 8, np.int8)[:2]
    d = np.zeros((4, 6), np.int32)
    err(pcr.InvalidArgumentError, r"must be\s+integers", a, b, None, d, 0.5)
    err(pcr.InvalidArgumentError, "integers", a, b, d, d, 1.0, 0.25)
    err(pcr.InvalidArgumentError, "int32's range", a, b, None, d, 2.0**31)


def test_math_selects_tf32_kernels(lib):
    a, b, d = mats(dtype=np.float32)
    st, p = describe(lib, a, b, None, d, math=1)
    assert p.dtype_a == 5 and p.dtype_b == 5, "tf32 math: the problem asks for TF32 kernels"
    st, p = describe(lib, a, b, None, d)
    assert p.dtype_a == 3, "float32 is fp32-accurate by default"
    a16, b16, d16 = mats()
    st, p = describe(lib, a16, b16, None, d16, math=1)
    assert p.dtype_a == 1, "math does not apply to half precision"
    st, _ = describe(lib, a, b, None, d, math=7)
    assert st == errors.ERR_INVALID_ARGUMENT and "math" in lib.last_error()
    err(pcr.InvalidArgumentError, "'ieee', 'tf32', 'fast_accum'", a, b, None, d, math="fast")


def test_unsupported_combination_lists_the_existing_ones():
    a, b, _ = mats(dtype=np.float64)
    with pytest.raises(pcr.UnsupportedError, match="available: .*float16 x float16 -> float16"):
        pcr.gemm(a, b, None, np.zeros((4, 6), np.float16))


class _CaiProducer:
    """A __cuda_array_interface__ producer as numba's arrays are (the protocol on the type)."""

    def __init__(self, arr, read_only=False):
        self._cai = {
            "shape": arr.shape,
            "typestr": "<f2",
            "version": 3,
            "strides": None,
            "data": (arr.ctypes.data, read_only),
        }

    @property
    def __cuda_array_interface__(self):
        return self._cai


def test_a_read_only_cuda_array_interface_output_is_refused():
    a, b, d = mats()
    with pytest.raises(pcr.ReadOnlyError, match="read-only __cuda_array_interface__"):
        pcr.gemm(_CaiProducer(a), _CaiProducer(b), None, _CaiProducer(d, read_only=True))


def test_d_may_not_overlap_the_scales():
    """The dequantizing epilogue reads the scale vectors while it writes d."""
    a, b = np.ones((4, 8), np.int8), np.ones((8, 6), np.int8)
    d = np.zeros((4, 6), np.float32)
    err(pcr.OverlapError, "d overlaps scale_a", a, b, None, d, scale_a=d.reshape(-1)[:4])
    err(pcr.OverlapError, "d overlaps scale_b", a, b, None, d, scale_b=d.reshape(-1)[4:10])


class _CaiType:
    """A producer whose type has __cuda_array_interface__ (a property, as numba's)."""

    def __init__(self, cai):
        self._cai = cai.__cuda_array_interface__

    @property
    def __cuda_array_interface__(self):
        return self._cai


@pytest.mark.parametrize(
    "streams, launch, waits",
    [
        ((None, None, None), None, []),  # no stream named: nothing to wait for
        ((7, None, 1), None, [(0, 7)]),  # a on stream 7; d on the legacy stream, the call's
        ((7, 9, 2), 5, [(5, 7), (5, 9), (5, 2)]),  # an explicit stream waits for each
        ((5, 5, 5), 5, []),  # already the call's stream
    ],
)
def test_cai_operands_streams_are_waited_for(streams, launch, waits):
    """The __cuda_array_interface__ rule: a consumer synchronizes with the stream the
    producer names before reading (1 is the legacy default stream, 2 per-thread)."""
    a, b, d = mats()
    seen = []
    ops = [_CaiType(_Cai(x, stream=s)) for x, s in zip((a, b, d), streams)]
    _dlpack.prepare(
        (ops[0], ops[1], None, ops[2]) + (None,) * (len(_call.NAMES) - 4),  # no extras
        _call.NAMES,
        launch,
        lambda ptr: 0,
        lambda consumer, producer: seen.append((consumer, producer)),
    )
    assert seen == waits


def test_cai_stream_zero_is_refused():
    a, _, _ = mats()
    with pytest.raises(pcr.InvalidArgumentError, match="0 is disallowed"):
        _dlpack.cai_stream(_Cai(a, stream=0))


def test_fresh_numpy_empty_batches_are_empty_not_broadcast(lib):
    """numpy gives a freshly made empty array all-zero strides: an empty batch, not a
    broadcast view (found by the front-door fuzz)."""
    a, b, d = (np.zeros(s, F16) for s in ((0, 4, 8), (0, 8, 6), (0, 4, 6)))
    p = expect_valid(lib, a, b, None, d)
    assert (p.batch, p.m, p.n, p.k) == (0, 4, 6, 8)


@pytest.mark.parametrize("which", ["scale_a", "scale_b"])
def test_boolean_scales_are_refused_like_boolean_scalars(which):
    a, b, d = mats()
    with pytest.raises(pcr.DTypeError, match=f"{which} must be a real number"):
        pcr.gemm(a, b, None, d, **{which: False})


def test_interleaved_batched_outputs_that_share_no_element_are_accepted(lib):
    """d's matrices side by side in one buffer's rows (heads of an attention output,
    d.transpose(1, 0, 2) of (M, L, N)): no element is shared, so no overlap; matrices
    that do share elements (a batch stride within a row) are still refused."""
    a, b = np.ones((3, 4, 8), F16), np.ones((3, 8, 6), F16)
    heads = np.zeros((4, 3, 6), F16).transpose(1, 0, 2)
    p = expect_valid(lib, a, b, None, heads)
    assert (p.batch, p.m, p.n) == (3, 4, 6)
    buf = np.zeros(4 * 6 + 2 * 3, F16)
    shared = np.lib.stride_tricks.as_strided(buf, (3, 4, 6), (3 * 2, 6 * 2, 2))
    st, _ = describe(lib, a, b, None, shared)
    assert st == errors.ERR_OVERLAP and "d's matrices overlap" in lib.last_error()


def gpu_view(shape, strides, code, bits, data=0x10000000):
    """A hand-built DLTensor said to be on cuda:0 (describe reads its shape, never its
    memory): data at a 256-byte-aligned address, strides in elements."""
    t = _lib.DLTensor()
    t.data, t.ndim = data, len(shape)
    t.device.device_type, t.device.device_id = DLDeviceType.CUDA, 0
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = (ctypes.c_int64 * len(shape))(*shape)
    t.strides = (ctypes.c_int64 * len(shape))(*strides)
    t._keep = (t.shape, t.strides)
    return t


@pytest.mark.parametrize("k", [202, 588])
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "bfloat16"])
def test_small_misaligned_problems_stage_only_without_an_any_alignment_kernel(lib, dtype, k):
    """181x1024x202 (rows of K elements 2- or 4-byte aligned) is too small to stage where an
    any-alignment kernel takes it, and staged where none does (no fp8 kernel reads
    misaligned rows): otherwise it could not run at all. 181x1024x588 (a corpus shape) is
    staged either way: its K loop is long enough for the any-alignment kernels' slow
    loads to cost more than a copy."""
    tn = [
        x for x in built_kernels() if (x.dtype_a, x.dtype_d, x.layout) == (dtype, "bfloat16", "tn")
    ]
    if not tn:
        pytest.skip(f"no {dtype} -> bfloat16 tn kernel in this build")
    code, bits = (
        (DLDataTypeCode.Float8_e4m3fn, 8)
        if dtype == "float8_e4m3fn"
        else (DLDataTypeCode.Bfloat, 16)
    )
    m, n = 181, 1024
    a = gpu_view((m, k), (k, 1), code, bits)
    b = gpu_view((k, n), (1, k), code, bits, data=0x20000000)  # column-major: tn
    d = gpu_view((m, n), (n, 1), DLDataTypeCode.Bfloat, 16, data=0x30000000)
    p = _lib.Problem()
    st = lib.pcr_describe(a, b, None, d, 1.0, 0.0, None, ctypes.byref(p), None, 0)
    assert st in (0, errors.ERR_NO_DEVICE), lib.last_error()
    assert (p.m, p.n, p.k, p.layout_a, p.layout_b) == (m, n, k, 0, 1)
    a1 = any(x.align[0] == 1 and not x.grouped for x in tn)
    staged = Staged.STAGED_A | Staged.STAGED_B
    assert p.staged == (0 if a1 and k < 512 else staged), (dtype, a1, p.staged)


@pytest.mark.parametrize("operand", ["a", "b", "d", "bias"])
def test_addresses_off_the_element_size_are_refused(lib, operand):
    """A bfloat16 view at an odd address would fault every kernel (a sticky misaligned
    address for the context): refused before any launch."""
    bf16 = (DLDataTypeCode.Bfloat, 16)
    a = gpu_view((64, 128), (128, 1), *bf16, data=0x10000000 + (operand == "a"))
    b = gpu_view((128, 32), (1, 128), *bf16, data=0x20000000 + (operand == "b"))
    d = gpu_view((64, 32), (32, 1), *bf16, data=0x30000000 + (operand == "d"))
    x = _lib.Extras()
    if operand == "bias":
        x.bias = ctypes.pointer(gpu_view((32,), (1,), *bf16, data=0x40000001))
    p = _lib.Problem()
    st = lib.pcr_describe(a, b, None, d, 1.0, 0.0, ctypes.byref(x), ctypes.byref(p), None, 0)
    assert st == errors.ERR_MISALIGNED and "element size" in lib.last_error(), lib.last_error()


def test_alpha_past_floats_range_is_an_invalid_argument():
    a, b, d = mats()
    err(pcr.InvalidArgumentError, "alpha must be finite", a, b, None, d, alpha=10**400)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("which", ["scale_a", "scale_b"])
def test_a_non_finite_host_scale_is_named(which, bad):
    """A Python-number scale is folded into alpha: a NaN or infinity is refused under its
    own name, not alpha's, before anything runs."""
    a, b, d = np.ones((4, 8), F16), np.ones((8, 4), F16), np.zeros((4, 4), F16)
    with pytest.raises(pcr.InvalidArgumentError, match=f"{which} must be a finite number"):
        pcr.gemm(a, b, None, d, **{which: bad})
    assert not d.any()
