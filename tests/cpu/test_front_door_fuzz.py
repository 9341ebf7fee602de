"""Property-based tests of the front door: generated calls, each valid or with one fault.

A case starts valid and may get one injected fault whose exception class and message the
test knows in advance. Outcome: exactly that documented exception, naming the argument;
or, for a valid case, the right answer on a GPU (fp64 reference) and NoDeviceError
without one. Never a crash, a hang or another exception. The tests, and what they make:

* test_front_door: 2-D numpy operands (random shapes, layouts, padded or transposed views,
  size-1 dims with odd strides, every form of c, scalars of many numeric types, capsules);
* test_batches: 3-D batches, inputs shared by batch 1, 2-D or batch stride 0, L = 0,
  padded batch strides, and the batch faults (mismatched L, overlapping outputs, ...);
* test_epilogues: bias in each broadcast form, activations, scale_a/scale_b as numbers
  (folded into alpha), per-tensor and per-row/column tensors, and their faults;
* test_plans: test_front_door's cases through pcr.Gemm, which must raise what gemm raises;
* test_grouped: pcr.grouped_gemm over lists of 0-4 groups of their own sizes;
* test_cuda_array_interface: operands through __cuda_array_interface__ producers;
* test_torch_tensors, test_torch_grouped: the same through torch (skipped without torch).

What a valid call without a kernel of its dtypes in this build raises is asked of
pycutlass_rt.kernels(), so filtered builds (CI's) know their outcomes too.
"""

import ctypes
import fractions
import functools
import math

import numpy as np
import pytest
from helpers import built_kernels

import pycutlass_rt as pcr

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

# generated calls per test; the CI total (torch absent) is their sum less the torch ones
EXAMPLES = {
    "front_door": 5_000,
    "batches": 4_000,
    "epilogues": 4_000,
    "plans": 1_500,  # two calls each without a GPU: pcr.Gemm and gemm
    "grouped": 2_000,
    "cai": 2_000,
    "torch": 1_500,
    "torch_grouped": 500,
}
F16, F32, F64, I8, I32 = np.float16, np.float32, np.float64, np.int8, np.int32


def has_gpu():
    from helpers import gpu_reason

    return gpu_reason() is None


def fuzz(test):
    """hypothesis settings of a test: EXAMPLES[test] calls, reproducible."""
    return hypothesis.settings(
        max_examples=EXAMPLES[test],
        deadline=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
    )


def dtype_name(dtype) -> str:
    """pycutlass_rt's name of a numpy or torch dtype ("float16", "float8_e4m3fn", ...)."""
    text = str(dtype)
    return text[len("torch.") :] if text.startswith("torch.") else np.dtype(dtype).name


EPILOGUE_RANK = {"linear": 0, "biasact": 1, "scaled": 2}  # each computes the ones before it


@functools.cache
def build_has(dtype_in: str, dtype_out: str, epilogue: str = "linear") -> bool:
    """Whether this build holds a kernel of these dtypes with (at least) this epilogue."""
    rank = EPILOGUE_RANK[epilogue]
    return any(
        k.dtype_a == dtype_in and k.dtype_d == dtype_out and EPILOGUE_RANK[k.epilogue] >= rank
        for k in built_kernels()
        if not k.grouped
    )


NO_KERNEL = (pcr.UnsupportedError, "no kernel in this build computes")


def valid(dtype_in, dtype_out, epilogue="linear"):
    """The outcome of a call without a fault: (None, None) (it runs), or the UnsupportedError
    a build without a kernel of these dtypes and epilogue raises before it needs a GPU."""
    return (None, None) if build_has(dtype_in, dtype_out, epilogue) else NO_KERNEL


def raises(call, exc, msg):
    """call() must raise exactly the documented exc (a pcr.Error) with msg in its message."""
    with pytest.raises(exc) as info:
        call()
    assert isinstance(info.value, pcr.Error), repr(info.value)
    assert msg in str(info.value), (msg, str(info.value))
    return info.value


def settle(call, exc, msg) -> bool:
    """Checks the outcome of a case: exc with msg; or, valid (exc None), NoDeviceError
    without a GPU. True: a valid case on a GPU, whose results the caller checks."""
    if exc is not None:
        raises(call, exc, msg)
        return False
    if not has_gpu():
        raises(call, pcr.NoDeviceError, "")
        return False
    return True


def gpu_gemm(args, kw, d, ref, rtol=1e-3, atol=0.26):
    """On a GPU: gemm(*args, **kw) must write ``ref`` (float64, rounded to d's dtype) into
    d; or, where explain() finds no kernel of this build for the problem (a filtered
    build, a layout or alignment it lacks), raise UnsupportedError."""
    why = pcr.explain(*args, **{k: v for k, v in kw.items() if k != "stream"})
    if why.kernel is None and "no GEMM work" not in why.reason:
        raises(lambda: pcr.gemm(*args, **kw), pcr.UnsupportedError, "kernel")
        return
    assert pcr.gemm(*args, **kw) is d
    compare(d, ref, rtol, atol)


def compare(d, ref, rtol=1e-3, atol=0.26):
    """d against a float64 reference rounded to d's dtype (inputs are small integers)."""
    out = np.asarray(d, np.float64)
    want = np.asarray(np.broadcast_to(ref, out.shape)).astype(np.asarray(d).dtype)
    if np.issubdtype(np.asarray(d).dtype, np.integer):
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out, want.astype(np.float64), rtol=rtol, atol=atol)


def view(rng_bits, rows, cols, dtype, layout, pad, offset, fill):
    """A rows x cols view with the given layout, padding of the leading dimension and a
    pointer offset in elements, filled with small integers (exact products)."""
    lead, inner = (rows, cols) if layout == "t" else (cols, rows)
    buf = np.empty(offset + lead * (inner + pad) + 1, dtype)
    buf[:] = fill
    base = buf[offset : offset + lead * (inner + pad)].reshape(lead, inner + pad)[:, :inner]
    base[...] = np.asarray(rng_bits.integers(-4, 5, base.shape), dtype)
    return base if layout == "t" else base.T


def scalar(kind, value):
    return {
        "float": float,
        "int": int,
        "np32": np.float32,
        "np64": np.float64,
        "np16": np.float16,
        "npint": np.int64,
        "frac": fractions.Fraction,
    }[kind](value)


#: the library's answer to each fault the tests below inject, shared by them all:
#: (exception class, message fragment; "{v}" is the operand the fault hits)
ERRORS = {
    "shape": (pcr.InvalidArgumentError, "shape mismatch"),
    "ndim": (pcr.InvalidArgumentError, "{v} must be a 2-D matrix"),
    "dtype_unknown": (pcr.DTypeError, "a has a dtype pycutlass_rt does not handle"),
    "dtype_mixed": (pcr.UnsupportedError, "a and b must share a dtype"),
    "dtype_out": NO_KERNEL,
    "negative_stride": (pcr.InvalidArgumentError, "{v} has a negative stride"),
    "zero_stride": (pcr.InvalidArgumentError, "{v} has a zero stride"),
    "negative_batch_stride": (pcr.InvalidArgumentError, "{v} has a negative batch dimension"),
    "no_unit_stride": (pcr.InvalidArgumentError, "is neither row- nor column-major"),
    "read_only_d": (pcr.ReadOnlyError, "d is read-only"),
    "d_aliases_a": (pcr.OverlapError, "d overlaps a"),
    "scalar_value": (pcr.InvalidArgumentError, "must be finite numbers"),
    "beta_without_c": (pcr.InvalidArgumentError, "c is None but beta"),
}


def errors_of(*faults, **more) -> dict:
    """A test's fault table: the shared answers to ``faults``, and ``more`` of its own."""
    return {**{f: ERRORS[f] for f in faults}, **more}


FAULTS = {
    None: (None, None),
    **errors_of(
        "shape",
        "ndim",
        "dtype_unknown",
        "dtype_mixed",
        "dtype_out",
        "negative_stride",
        "zero_stride",
        "no_unit_stride",
        "read_only_d",
        "scalar_value",
        "beta_without_c",
        d_aliases_input=ERRORS["d_aliases_a"],
        c_overlaps_d=(pcr.OverlapError, "c overlaps d"),
        scalar_type=(pcr.DTypeError, "{s} must be a real number"),
        kernel_name=(pcr.KernelNotFoundError, "no kernel named"),
        not_a_tensor=(pcr.DTypeError, "{v}: "),
        consumed_capsule=(pcr.InvalidArgumentError, "already consumed"),
        stream=(pcr.DTypeError, "stream: cannot get a CUDA stream handle"),
    ),
}
BAD_SCALARS = ["1.0", 1j, None, True, [1.0]]


@st.composite
def cases(draw):
    return dict(
        mnk=draw(st.tuples(*[st.integers(1, 24)] * 3)),
        dtype_out=draw(st.sampled_from([np.float16, np.float32])),
        layouts=draw(st.tuples(*[st.sampled_from("tn")] * 4)),
        pads=draw(st.tuples(*[st.integers(0, 3)] * 4)),
        offsets=draw(st.tuples(*[st.integers(0, 2)] * 4)),
        c_form=draw(st.sampled_from(["none", "plain", "is_d", "f32", "broadcast"])),
        alpha=scalar(
            draw(st.sampled_from(["float", "int", "np32", "np64", "np16", "npint", "frac"])),
            draw(st.sampled_from([1, 2, -1, 0, 0.5])),
        ),
        beta=scalar(
            draw(st.sampled_from(["float", "np32", "int"])), draw(st.sampled_from([1, -0.5]))
        ),
        fault=draw(st.sampled_from(list(FAULTS))),
        victim=draw(st.sampled_from("abd")),
        pick=draw(st.integers(0, 59)),
        capsule_a=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def build(case):
    """The call to make and what must come of it, or None when the fault does not apply.

    Returns (args, kwargs, expected exception or None, message fragment, reference inputs).
    """
    rng = np.random.default_rng(case["seed"])
    m, n, k = case["mnk"]
    lt, pads, offs, dout = case["layouts"], case["pads"], case["offsets"], case["dtype_out"]
    a = view(rng, m, k, F16, lt[0], pads[0], offs[0], 0)
    b = view(rng, k, n, F16, lt[1], pads[1], offs[1], 0)
    d = view(rng, m, n, dout, lt[3], pads[3], offs[3], np.nan)
    c = {
        "none": None,
        "plain": view(rng, m, n, dout, lt[2], pads[2], offs[2], 0),
        "is_d": d,
        "f32": view(rng, m, n, np.float32, lt[2], pads[2], offs[2], 0),
        "broadcast": np.broadcast_to(np.asarray(rng.integers(-4, 5, (1, n)), dout), (m, n)),
    }[case["c_form"]]
    alpha, beta = case["alpha"], case["beta"] if c is not None else 0.0
    kw = {}
    fault, v, pick = case["fault"], case["victim"], case["pick"]
    exc, msg = FAULTS[fault]
    ops = {"a": a, "b": b, "d": d}
    x = ops[v]
    if fault == "shape":
        b = view(rng, k + 1, n, F16, lt[1], 0, 0, 0)
    elif fault == "ndim":
        ops[v] = x[None, None]  # 4-D (3-D is a batch)
    elif fault == "dtype_unknown":
        a, b = a.astype(np.int16), b.astype(np.int16)
    elif fault == "dtype_mixed":
        b = b.astype(np.float32)
    elif fault == "dtype_out":
        d = np.zeros((m, n), np.float64)
        if case["c_form"] == "is_d":
            c, beta = None, 0.0
    elif fault == "negative_stride":
        if x.shape[0] < 2:
            return None
        ops[v] = x[::-1]
    elif fault == "zero_stride":
        if x.shape[0] < 2:
            return None
        ops[v] = np.broadcast_to(x[:1], x.shape)
        if v == "d":  # numpy exports broadcast views read-only, which is checked first
            exc, msg = pcr.ReadOnlyError, "d is read-only"
    elif fault == "no_unit_stride":
        if min(x.shape) < 2:
            return None
        ops[v] = np.zeros((x.shape[0] * 2, x.shape[1] * 2), x.dtype)[::2, ::2]
    elif fault == "read_only_d":
        d = d.copy()
        d.flags.writeable = False
        c, beta = None, 0.0
    elif fault == "d_aliases_input":
        if dout != F16 or k != n:
            return None
        d, c, beta = a, None, 0.0
    elif fault == "c_overlaps_d":
        if n < 2:  # d[:, 1] is c[:, 0]: a real overlap needs two columns
            return None
        buf = np.zeros((m, n + 1), dout)
        d, c, beta = buf[:, :n], buf[:, 1:], 1.0
    elif fault == "scalar_type":
        name = "alpha" if pick % 2 else "beta"
        if name == "alpha":
            alpha = BAD_SCALARS[pick % 5]
        else:
            beta = BAD_SCALARS[pick % 5]
        msg = msg.format(s=name)
    elif fault == "scalar_value":
        alpha = [float("nan"), float("inf"), -float("inf")][pick % 3]
    elif fault == "beta_without_c":
        c, beta = None, 0.5
    elif fault == "kernel_name":
        kw["kernel"] = "sm90_not_a_kernel"
    elif fault == "not_a_tensor":
        ops[v] = [[1.0]] if pick % 2 else object()
    elif fault == "consumed_capsule":
        cap = a.__dlpack__()
        ctypes.pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
        ctypes.pythonapi.PyCapsule_SetName(cap, b"used_dltensor")
        a = cap
    elif fault == "stream":
        kw["stream"] = "default"
    if fault in ("ndim", "negative_stride", "zero_stride", "no_unit_stride", "not_a_tensor"):
        a, b, d = ops["a"], ops["b"], ops["d"]
        if v == "d" and case["c_form"] == "is_d":
            c, beta = None, 0.0
        msg = msg.format(v=v)
    ref_inputs = (a, b, None if c is None else np.array(c), alpha, beta)  # c may be d: copy
    if fault is None and case["capsule_a"]:
        a = a.__dlpack__()  # a capsule is an operand too
    return (a, b, c, d, alpha, beta), kw, exc, msg, ref_inputs


@fuzz("front_door")
@hypothesis.given(cases())
def test_front_door(case):
    built = build(case)
    hypothesis.assume(built is not None)
    hypothesis.event(f"fault: {case['fault']}")
    args, kw, exc, msg, (a, b, c, alpha, beta) = built
    d = args[3]
    if exc is None:
        if not has_gpu():
            with pytest.raises(pcr.NoDeviceError):
                pcr.gemm(*args, **kw)
            return
        assert pcr.gemm(*args, **kw) is d
        ref = float(alpha) * (a.astype(np.float64) @ b.astype(np.float64))
        if c is not None and float(beta) != 0:
            ref += float(beta) * np.asarray(c, np.float64)
        # integer inputs: exact up to the rounding of c into d's dtype
        np.testing.assert_allclose(d.astype(np.float64), ref.astype(d.dtype), rtol=1e-3, atol=0.26)
        return
    with pytest.raises(exc) as info:
        pcr.gemm(*args, **kw)
    assert isinstance(info.value, pcr.Error)
    assert msg in str(info.value), (case["fault"], str(info.value))


# ---- batches ----------------------------------------------------------------------------


def batch_view(rng, batch, rows, cols, dtype, layout, pad, gap, fill):
    """A (batch, rows, cols) view: matrices of the given layout with `pad` elements past
    each row (or column) and `gap` elements between matrices, filled with small integers.
    The strides are set explicitly: numpy gives a freshly made empty array all-zero
    strides, which a batch of 0 would carry into the call."""
    lead, inner = (rows, cols) if layout == "t" else (cols, rows)
    ld = inner + pad
    step = max(lead * ld + gap, 1)  # empty matrices too: a reversed batch has a negative step
    buf = np.empty(max(batch, 1) * step + 1, dtype)
    buf[:] = fill
    e = buf.itemsize
    strides = (step * e, ld * e, e) if layout == "t" else (step * e, e, ld * e)
    x = np.lib.stride_tricks.as_strided(buf, (batch, rows, cols), strides, writeable=True)
    x[...] = np.asarray(rng.integers(-4, 5, x.shape), dtype)
    return x


BATCH_FAULTS = {
    None: (None, None),
    "batch_mismatch": (pcr.InvalidArgumentError, None),  # message built per case
    "d_2d": (None, None),  # a 2-D d: invalid iff an input holds L != 1 matrices
    **errors_of(
        "ndim",
        "negative_batch_stride",
        "shape",
        "dtype_mixed",
        "read_only_d",
        "d_aliases_a",
        d_overlap=(pcr.OverlapError, "d's matrices overlap"),
    ),
}
#: an input's form: its own L matrices, one (L = 1), a 2-D matrix, or one by batch stride 0
FORMS = ["full", "one", "2d", "bcast"]


@st.composite
def batch_cases(draw):
    return dict(
        batch=draw(st.integers(0, 4)),
        mnk=draw(st.tuples(*[st.integers(0, 10)] * 3)),
        forms=draw(st.tuples(*[st.sampled_from(FORMS)] * 3)),  # a, b, c
        c_form=draw(st.sampled_from(["none", "c", "is_d"])),
        layouts=draw(st.tuples(*[st.sampled_from("tn")] * 4)),
        pads=draw(st.tuples(*[st.integers(0, 2)] * 4)),
        gaps=draw(st.tuples(*[st.integers(0, 3)] * 4)),
        dtype_out=draw(st.sampled_from([F16, F32])),
        alpha=draw(st.sampled_from([1.0, -1, 0.5, 2])),
        beta=draw(st.sampled_from([1.0, -0.5, 0.0])),
        fault=draw(st.sampled_from([None] * 3 + list(BATCH_FAULTS))),
        victim=draw(st.sampled_from("abcd")),
        pick=draw(st.integers(0, 59)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def build_batch(case):
    """(args, expected exception or None, message, reference inputs), or None where the
    fault does not apply to the case."""
    rng = np.random.default_rng(case["seed"])
    L, (m, n, k), forms = case["batch"], case["mnk"], list(case["forms"])
    lt, pads, gaps, dout = case["layouts"], case["pads"], case["gaps"], case["dtype_out"]
    fault, v, pick, c_form = case["fault"], case["victim"], case["pick"], case["c_form"]
    # some faults need a case of their own kind: adjust the drawn one
    if fault == "batch_mismatch" and v == "d":
        v = "abc"[pick % 3]
    if fault == "negative_batch_stride":
        L = max(L, 2)
        if v != "d":
            forms["abc".index(v)] = "full"
        if v == "c" and c_form == "none":
            c_form = "c"
    if fault == "d_overlap":
        L, m, n = max(L, 2), max(m, 1), max(n, 1)
    if fault == "d_aliases_a":
        L, m, n, k, dout, forms[0] = max(L, 1), max(m, 1), max(n, 1), max(n, 1), F16, "full"

    def operand(form, rows, cols, dtype, i, batch=L):
        if form == "full":
            return batch_view(rng, batch, rows, cols, dtype, lt[i], pads[i], gaps[i], 0)
        one = batch_view(rng, 1, rows, cols, dtype, lt[i], pads[i], gaps[i], 0)
        return {"one": one, "2d": one[0], "bcast": np.broadcast_to(one, (batch, rows, cols))}[form]

    a = operand(forms[0], m, k, F16, 0)
    b = operand(forms[1], k, n, F16, 1)
    d = batch_view(rng, L, m, n, dout, lt[3], pads[3], gaps[3], np.nan)
    c = {"none": None, "c": operand(forms[2], m, n, dout, 2), "is_d": d}[c_form]
    alpha, beta = case["alpha"], case["beta"] if c is not None else 0.0
    exc, msg = BATCH_FAULTS[fault]
    ops = {"a": a, "b": b, "c": c, "d": d}
    shapes = {"a": (m, k, F16, 0), "b": (k, n, F16, 1), "c": (m, n, dout, 2)}
    if fault == "batch_mismatch":
        other = [x for x in (0, 2, 3, 4, 5) if x != L][pick % 4]
        rows, cols, dtype, i = shapes[v]
        ops[v] = operand("full", rows, cols, dtype, i, batch=other)
        msg = (
            f"d holds 1 matrices but {v} holds {other}"
            if L == 1
            else f"batch mismatch: {v} holds {other} matrices, d {L}"
        )
    elif fault == "d_2d":
        ops["d"] = d = d[0] if L == 1 else batch_view(rng, 1, m, n, dout, lt[3], 0, 0, np.nan)[0]
        if c_form == "is_d":
            ops["c"] = d
        for x in "abc":  # checked in this order
            y = ops[x]
            if y is not None and y.ndim == 3 and y.shape[0] != 1:
                exc, msg = pcr.InvalidArgumentError, f"d holds 1 matrices but {x} holds {len(y)}"
                break
    elif fault == "ndim":
        if ops[v] is None:
            return None
        ops[v] = ops[v][(None,) * (4 - ops[v].ndim)]
    elif fault == "negative_batch_stride":
        ops[v] = ops[v][::-1]
    elif fault == "d_overlap":
        s0, s1 = (x // d.itemsize for x in d.strides[1:])
        extent = (m - 1) * s0 + (n - 1) * s1 + 1  # one matrix, in elements
        step = pick % extent  # less than that: the matrices share memory
        buf = np.full((L - 1) * step + extent, np.nan, dout)
        e = buf.itemsize
        ops["d"] = np.lib.stride_tricks.as_strided(
            buf, (L, m, n), (step * e, s0 * e, s1 * e), writeable=True
        )
    elif fault == "shape":
        ops["b"] = operand(forms[1], k + 1, n, F16, 1)
    elif fault == "dtype_mixed":
        ops["b"] = operand(forms[1], k, n, F32, 1)
    elif fault == "read_only_d":
        d.flags.writeable = False
    elif fault == "d_aliases_a":
        ops["d"], ops["c"], beta = a, None, 0.0
    if fault == "d_overlap" and c_form == "is_d":
        ops["c"] = ops["d"]  # c stays d's own view
    a, b, c, d = ops["a"], ops["b"], ops["c"], ops["d"]
    if exc is None:
        exc, msg = valid("float16", dtype_name(dout))
    elif msg is not None:
        msg = msg.format(v=v)
    ref = (a, b, None if c is None else np.array(c), alpha, beta)  # c may be d: copied
    return (a, b, c, d, alpha, beta), exc, msg, ref


@fuzz("batches")
@hypothesis.given(batch_cases())
def test_batches(case):
    """3-D batches: (L, M, K) @ (L, K, N) -> (L, M, N), inputs shared across the batch
    (batch 1, 2-D, batch stride 0), L = 0, gaps between matrices, and one batch fault."""
    built = build_batch(case)
    hypothesis.assume(built is not None)
    hypothesis.event(f"fault: {case['fault']}")
    args, exc, msg, (a, b, c, alpha, beta) = built
    hypothesis.event(f"outcome: {exc.__name__ if exc else 'valid'}")
    if not settle(lambda: pcr.gemm(*args), exc, msg):
        return
    d = args[3]
    ref = float(alpha) * np.matmul(a.astype(F64), b.astype(F64))
    if c is not None and float(beta) != 0:
        ref = ref + float(beta) * c.astype(F64)
    if d.ndim == 2:
        ref = ref.reshape(ref.shape[-2:])
    gpu_gemm(args, {}, d, ref)


# ---- bias, activations, scales ---------------------------------------------------------


def aligned(n, dtype, misalign=0):
    """A contiguous vector of n elements at a 16-byte aligned address (plus `misalign`
    bytes), holding small powers of two."""
    dt = np.dtype(dtype)
    buf = np.zeros(n * dt.itemsize + 32, np.uint8)
    start = (-buf.ctypes.data) % 16 + misalign
    v = buf[start : start + n * dt.itemsize].view(dt)
    v[:] = np.random.default_rng(n).choice([0.5, 1.0, 2.0], n).astype(dt)
    return v


def erf(x):
    return np.vectorize(math.erf)(x)


ACTIVATIONS = {
    None: lambda x: x,
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.01 * x),
    ("leaky_relu", 0.2): lambda x: np.where(x >= 0, x, 0.2 * x),
    ("clamp", -0.5, 0.75): lambda x: np.clip(x, -0.5, 0.75),
    ("clamp", -3, 5): lambda x: np.clip(x, -3, 5),
}
#: the activations int32 outputs take (computed exactly, in int32): relu, clamp to integers
INT32_ACTIVATIONS = (None, "none", "relu", ("clamp", -3, 5))
BAD_ACTIVATIONS = ["softplus", "RELU", "", 1, b"relu", "gelu-tanh", object()]
#: (a and b, d): float inputs and int8 ones (scale tensors: int8, fp8, float16, bfloat16)
EPI_DTYPES = [(F16, F16), (F16, F32), (F32, F32), (I8, I32), (I8, F16), (I8, F32)]
#: bias shapes: per column (N,), (1, N), (1, 1, N); per row (M, 1), (1, M, 1)
BIAS_FORMS = [None, "n", "1n", "11n", "m1", "1m1"]
SCALE_NUMBERS = [2, -1, 1.0, 0.5, np.float32(2), fractions.Fraction(1, 2), np.int64(-2)]
EPI_FAULTS = {
    None: (None, None),
    "bias_shape": (pcr.InvalidArgumentError, "does not broadcast against d"),
    "bias_ndim": (pcr.InvalidArgumentError, "bias must be a vector of shape"),
    "bias_batch": (pcr.UnsupportedError, "one bias vector serves the whole batch"),
    "bias_dtype": (pcr.UnsupportedError, "bias is {bias} but d is {d}"),
    "bias_strided": (pcr.InvalidArgumentError, "bias must be contiguous"),
    "bias_overlaps_d": (pcr.OverlapError, "d overlaps bias"),
    "activation": (pcr.InvalidArgumentError, "activation must be None or one of"),
    "scale_not_quantized": (pcr.UnsupportedError, "scale_a and scale_b apply to int8, fp8,"),
    "scale_dtype": (pcr.UnsupportedError, "{s} must be float32"),
    "scale_length": (pcr.InvalidArgumentError, "{s} has {count} elements; pass one"),
    "scale_ndim": (pcr.InvalidArgumentError, "{s} must be a scalar or a vector, got 3-D"),
    "scale_misaligned": (pcr.MisalignedError, "{s} must be a contiguous vector at a 16-byte"),
    "scale_type": (pcr.DTypeError, "{s}: "),
    "scale_nonfinite": (pcr.InvalidArgumentError, "{s} must be a finite number"),
    "scale_int32_fraction": (pcr.InvalidArgumentError, "int32 outputs are computed exactly"),
    "scale_overlaps_d": (pcr.OverlapError, "d overlaps {s}"),
    "math": (pcr.InvalidArgumentError, "math must be None or one of 'ieee', 'tf32', 'fast_accum'"),
    "kernel_name": (pcr.KernelNotFoundError, "no kernel named"),
}


@st.composite
def epilogue_cases(draw):
    return dict(
        dtypes=draw(st.sampled_from(EPI_DTYPES[:1] * 4 + EPI_DTYPES)),  # mostly fp16
        mnk=draw(st.tuples(*[st.integers(1, 12)] * 3)),
        layouts=draw(st.tuples(*[st.sampled_from("tn")] * 3)),  # a, b, d
        bias=draw(st.sampled_from(BIAS_FORMS)),
        activation=draw(st.sampled_from(list(ACTIVATIONS))),
        scales=draw(st.tuples(*[st.sampled_from([None, "number", "tensor", "vector"])] * 2)),
        scale_shapes=draw(st.tuples(st.integers(0, 2), st.integers(0, 1))),
        numbers=draw(st.tuples(*[st.sampled_from(SCALE_NUMBERS)] * 2)),
        c_is_d=draw(st.booleans()),
        alpha=draw(st.sampled_from([1, -1, 2, 0.5])),
        fault=draw(st.sampled_from([None] * 4 + list(EPI_FAULTS))),
        victim=draw(st.sampled_from(["scale_a", "scale_b"])),
        pick=draw(st.integers(0, 59)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def scale_tensor(kind, s, m, n, shape_pick, dtype=F32, misalign=0):
    """A scale tensor for s ("scale_a": one per row of a, "scale_b": one per column of b):
    one element (shapes (), (1,), (1, 1)) or a vector ((M,) / (M, 1); (N,) / (1, N))."""
    count = 1 if kind == "tensor" else (m if s == "scale_a" else n)
    v = aligned(count, dtype, misalign)
    if kind == "tensor":
        return v.reshape([(), (1,), (1, 1)][shape_pick % 3])
    if shape_pick % 2:
        return v.reshape((count, 1) if s == "scale_a" else (1, count))
    return v


def build_epilogue(case):
    """(args, kwargs, exception or None, message, reference inputs), or None where the fault
    does not apply to the case."""
    rng = np.random.default_rng(case["seed"])
    (din, dout), (m, n, k), lt = case["dtypes"], case["mnk"], case["layouts"]
    fault, s, pick = case["fault"], case["victim"], case["pick"]
    # some faults need a case of their own kind: adjust the drawn one
    din, dout = {
        "scale_not_quantized": (F32, F32),
        "scale_int32_fraction": (I8, I32),
        "scale_overlaps_d": (I8, F32),
    }.get(fault, (din, dout))
    if fault in ("bias_strided", "scale_misaligned"):
        m, n = max(m, 2), max(n, 2)
    quantized, int_out = din == I8, dout == I32
    a = view(rng, m, k, din, lt[0], pick % 2, 0, 0)
    b = view(rng, k, n, din, lt[1], 0, pick % 3, 0)
    d = view(rng, m, n, dout, lt[2], 0, 0, 0 if int_out else np.nan)
    c, beta = (d, 1) if case["c_is_d"] else (None, 0)
    alpha = case["alpha"] if not int_out else int(case["alpha"] * 2)  # int32 d: integers
    bias = None
    if case["bias"] is not None:
        shape = {"n": (n,), "1n": (1, n), "11n": (1, 1, n), "m1": (m, 1), "1m1": (1, m, 1)}
        bias = np.asarray(rng.integers(-4, 5, shape[case["bias"]]), dout)
    act = case["activation"]
    scales = {}
    for name, kind, number, shape_pick in zip(
        ("scale_a", "scale_b"), case["scales"], case["numbers"], case["scale_shapes"]
    ):
        if kind in ("tensor", "vector") and not quantized:
            kind = "number"  # scale tensors on float inputs are a fault of their own
        if kind == "number" and int_out and float(number) != int(number):
            number = 2  # int32 d: alpha times the scales stays an integer
        scales[name] = (
            None
            if kind is None
            else number
            if kind == "number"
            else scale_tensor(kind, name, m, n, shape_pick)
        )
    kw = {"bias": bias, "activation": act, **scales}
    exc, msg = EPI_FAULTS[fault]
    count = {"scale_a": m, "scale_b": n}[s]
    if fault == "bias_shape":
        shapes = [(n + 1,), (m + 1, 1), (1, n + 1)] + ([(m, n)] if m > 1 and n > 1 else [])
        kw["bias"] = np.zeros(shapes[pick % len(shapes)], dout)
    elif fault == "bias_ndim":
        kw["bias"] = np.zeros([(), (1, 1, 1, n)][pick % 2], dout)
    elif fault == "bias_batch":
        kw["bias"] = np.zeros([(2, 1, n), (3, m, 1)][pick % 2], dout)
    elif fault == "bias_dtype":
        other = [x for x in (F16, F32, F64, I8, I32) if x != dout][pick % 4]
        kw["bias"] = np.zeros(n, other)
        msg = msg.format(bias=np.dtype(other).name, d=np.dtype(dout).name)
    elif fault == "bias_strided":
        kw["bias"] = np.zeros(2 * n, dout)[::2]
    elif fault == "bias_overlaps_d":
        kw["bias"] = np.lib.stride_tricks.as_strided(d, (n,), (d.itemsize,))  # d's first n
    elif fault == "activation":
        kw["activation"] = BAD_ACTIVATIONS[pick % len(BAD_ACTIVATIONS)]
    elif fault == "scale_not_quantized":
        kw[s] = scale_tensor(["tensor", "vector"][pick % 2], s, m, n, pick // 2)
    elif fault == "scale_dtype":
        kind, dtype = ["tensor", "vector"][pick % 2], [F16, F64][pick // 2 % 2]
        kw[s] = scale_tensor(kind, s, m, n, pick // 4, dtype)
    elif fault == "scale_length":
        wrong = [(count + 1,), (1, count) if s == "scale_a" else (count, 1)][pick % 2]
        if wrong[0] == wrong[-1] == 1 or (len(wrong) == 2 and count == 1):
            wrong = (count + 1,)
        kw[s] = np.ones(wrong, F32)
        count = int(np.prod(wrong))
    elif fault == "scale_ndim":
        kw[s] = np.ones((1, 1, 1), F32)
    elif fault == "scale_misaligned":
        kw[s] = aligned(count, F32, 4) if pick % 2 else aligned(2 * count, F32)[::2]
    elif fault == "scale_type":
        kw[s] = ["2", 1j, [1.0], b"1"][pick % 4]
    elif fault == "scale_nonfinite":
        kw[s] = [math.inf, -math.inf, math.nan, np.float32("inf")][pick % 4]
    elif fault == "scale_int32_fraction":
        kw[s] = [1 / 3, fractions.Fraction(1, 3), np.float64(2 / 3)][pick % 3]
    elif fault == "scale_overlaps_d":
        buf = aligned(m * n + 4, F32)
        d = buf[: m * n].reshape(m, n) if lt[2] == "t" else buf[: m * n].reshape(n, m).T
        d[...] = np.nan
        c = d if c is not None else None
        kw[s] = buf[: count if pick % 2 else 1]  # d's own memory, as a vector or one value
    elif fault == "math":
        kw["math"] = ["fast", 1, "TF32", "ieee754"][pick % 4]
    elif fault == "kernel_name":
        kw["kernel"] = "sm80_no_such_kernel"
    if exc is None:
        kinds = [x for x in (kw["scale_a"], kw["scale_b"]) if isinstance(x, np.ndarray)]
        fused = kw["bias"] is not None or kw["activation"] not in (None, "none")
        vector = any(x.size > 1 for x in kinds)
        epi = "scaled" if vector or (kinds and fused) else "biasact" if fused else "linear"
        exc, msg = valid(dtype_name(din), dtype_name(dout), epi)
        if int_out and act not in INT32_ACTIVATIONS:  # refused before the build is asked
            exc, msg = (
                (pcr.InvalidArgumentError, "clamp's bounds must be integers")
                if isinstance(act, tuple) and act[0] == "clamp"
                else (pcr.UnsupportedError, "their activations are relu and clamp")
            )
    else:
        msg = msg.format(s=s, count=count)
    kw = {key: x for key, x in kw.items() if x is not None}
    ref = (a, b, None if c is None else np.array(c), alpha, beta, kw)
    return (a, b, c, d, alpha, beta), kw, exc, msg, ref


def epilogue_reference(a, b, c, alpha, beta, kw):
    """act(alpha * (scale_a * a) @ (b * scale_b) + beta * c + bias) in float64 (batches too)."""
    x = float(alpha) * np.matmul(a.astype(F64), b.astype(F64))
    for s, shape in (("scale_a", (-1, 1)), ("scale_b", (1, -1))):  # a row's, b column's
        v = kw.get(s)
        if v is not None:
            x = x * (np.asarray(v, F64).reshape(shape) if np.ndim(v) else float(v))
    if c is not None and beta:
        x = x + float(beta) * c.astype(F64)
    bias = kw.get("bias")
    if bias is not None:  # (N,), (1, N), (1, 1, N), (M, 1), (1, M, 1)
        x = x + bias.astype(F64).reshape(bias.shape[-2:] if bias.ndim > 1 else bias.shape)
    return ACTIVATIONS[kw.get("activation")](x)


@fuzz("epilogues")
@hypothesis.given(epilogue_cases())
def test_epilogues(case):
    """bias (per column, per row, each shape numpy broadcasts), activations, scale_a and
    scale_b as numbers, per-tensor values or vectors; one fault among their misuses."""
    built = build_epilogue(case)
    hypothesis.assume(built is not None)
    hypothesis.event(f"fault: {case['fault']}")
    args, kw, exc, msg, ref = built
    hypothesis.event(f"outcome: {exc.__name__ if exc else 'valid'}")
    if settle(lambda: pcr.gemm(*args, **kw), exc, msg):
        gpu_gemm(args, kw, args[3], epilogue_reference(*ref), rtol=2e-3)


# ---- plans ------------------------------------------------------------------------------


@fuzz("plans")
@hypothesis.given(cases())
def test_plans(case):
    """test_front_door's cases through pcr.Gemm: construction validates as gemm does, so a
    faulty case raises gemm's exception with gemm's message. A valid one is refused as
    host (numpy) operands are, with a GPU; without one, NoDeviceError, as gemm."""
    hypothesis.assume(case["fault"] != "stream")  # Gemm takes none (run() does)
    built = build(case)
    hypothesis.assume(built is not None)
    hypothesis.event(f"fault: {case['fault']}")
    args, kw, exc, msg, _ = built
    if exc is None:
        exc, msg = valid("float16", dtype_name(case["dtype_out"]))
    if exc is None:
        exc, msg = (
            (pcr.InvalidArgumentError, "a plan needs GPU tensors; host (numpy) operands")
            if has_gpu()
            else (pcr.NoDeviceError, "")
        )
    planned = raises(lambda: pcr.Gemm(*args, **kw), exc, msg)
    if case["fault"] is not None or not has_gpu():
        args, kw = build(case)[:2]  # fresh capsules
        called = raises(lambda: pcr.gemm(*args, **kw), exc, msg)
        assert str(planned) == str(called)
    if case["fault"] is None and case["pick"] % 8 == 0:
        raises(
            lambda: pcr.Gemm(*args[:3], None, *args[4:], **kw),
            pcr.InvalidArgumentError,
            "Gemm needs d, the output tensor",
        )


# ---- grouped GEMMs ----------------------------------------------------------------------

#: faults of one group's operands, found where that group is validated (in group order)
GROUP_FAULTS = {
    **errors_of(
        "shape",
        "dtype_unknown",
        "dtype_out",
        "d_aliases_a",
        "negative_stride",
        "ndim",
        # checked after the "group g: " prefix: the message from its start
        dtype_mixed=(pcr.UnsupportedError, "a is float16 but b is float32; a and b must share"),
    ),
    "batch": (None, None),  # a 3-D group: "grouped GEMMs take 2-D GPU matrices" (a GPU)
    "dtype_differs": (None, None),  # valid alone; the groups must agree (checked last)
    "layout_differs": (None, None),
}
#: group faults found as the groups' operands are read, all before any group is validated
READ_FAULTS = {
    "read_only_d": (pcr.ReadOnlyError, "d is read-only"),
    "missing": (pcr.InvalidArgumentError, "a, b and d are required"),
}
GROUPED_FAULTS = [
    None,
    None,
    "lengths",
    "not_a_tensor",
    "alpha_type",
    "kernel_name",
    "stream",
    "alpha_nan",
    *READ_FAULTS,
    *GROUP_FAULTS,
]


@st.composite
def grouped_cases(draw):
    count = draw(st.integers(0, 4))
    return dict(
        groups=[
            dict(
                mnk=draw(st.tuples(*[st.sampled_from([0, 1, 2, 3, 5, 8, 13])] * 3)),
                pads=draw(st.tuples(*[st.integers(0, 2)] * 3)),
                c=draw(st.sampled_from(["none", "plain", "is_d"])),
            )
            for _ in range(count)
        ],
        layouts=draw(st.tuples(*[st.sampled_from("tn")] * 3)),  # a, b, d: shared
        dtype_out=draw(st.sampled_from([F16, F32])),
        cs_none=draw(st.booleans()),
        alpha=draw(st.sampled_from([1.0, -2, 0.5])),
        beta=draw(st.sampled_from([0.0, 1.0, -0.5])),
        fault=draw(st.sampled_from(GROUPED_FAULTS)),
        group=draw(st.integers(0, 3)),
        victim=draw(st.sampled_from("abcd")),
        pick=draw(st.integers(0, 59)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def grouped_kernel_built(dtype_in: str, dtype_out: str) -> bool:
    """Whether the build holds a grouped kernel of these dtypes (without block scales):
    what makes a group's dtypes known, before the device is asked for."""
    return any(
        k.grouped and k.scale_m == "none" and k.dtype_a == dtype_in and k.dtype_d == dtype_out
        for k in built_kernels(block_scaled=None)
    )


def grouped_device_outcome(group=0, dtype_in="float16", dtype_out="float16"):
    """What a group that passes every check before the device meets: UnsupportedError in a
    build without grouped kernels of its dtypes; else NoDeviceError without a GPU; with
    one, numpy operands are host arrays, which grouped GEMMs refuse."""
    if not grouped_kernel_built(dtype_in, dtype_out):
        return pcr.UnsupportedError, f"group {group}: no kernel in this build computes"
    if has_gpu():
        return pcr.InvalidArgumentError, f"group {group}: grouped GEMMs take 2-D GPU matrices"
    return pcr.NoDeviceError, f"group {group}: "


def out_name(Ds, dout) -> str:
    """Group 0's output dtype as the library names it (a fault may have changed it)."""
    d0 = Ds[0] if Ds else None
    return np.dtype(d0.dtype if isinstance(d0, np.ndarray) else dout).name


def build_grouped(case):
    """(args, kwargs, exception or None, message), or None where the fault does not apply.

    Python checks every argument first (lengths, scalars, kernel, stream, what is a
    tensor); then the groups are validated in order, each as gemm validates a call, and
    the first that fails names itself. Each group's validation ends with the device, so
    on this machine group 0 meets the device outcome (grouped_device_outcome) before the
    later groups, or the agreement between groups, are looked at."""
    rng = np.random.default_rng(case["seed"])
    lt, dout, fault, pick = case["layouts"], case["dtype_out"], case["fault"], case["pick"]
    sizes = [list(grp["mnk"]) for grp in case["groups"]]
    if (
        fault in GROUP_FAULTS
        or fault in READ_FAULTS
        or fault in ("not_a_tensor", "stream", "alpha_nan")
    ):
        if not sizes:
            return None  # no group to hold the fault
    g = case["group"] % max(len(sizes), 1)
    v = case["victim"]
    w = "d" if v == "c" else v  # the victim of a group fault: a, b or d
    # some faults need a group of their own kind: adjust the drawn one
    if fault == "d_aliases_a":
        m, n, _ = sizes[g]
        sizes[g], dout = [max(m, 1), max(n, 1), max(n, 1)], F16
    if fault == "negative_stride":
        rows, cols = {"a": (0, 2), "b": (2, 1), "d": (0, 1)}[w]  # (M, K), (K, N), (M, N)
        sizes[g][rows], sizes[g][cols] = max(sizes[g][rows], 2), max(sizes[g][cols], 1)
    As, Bs, Cs, Ds = [], [], [], []
    for (m, n, k), grp in zip(sizes, case["groups"]):
        a = view(rng, m, k, F16, lt[0], grp["pads"][0], 0, 0)
        b = view(rng, k, n, F16, lt[1], grp["pads"][1], 0, 0)
        d = view(rng, m, n, dout, lt[2], grp["pads"][2], 0, np.nan)
        c = {"none": None, "plain": view(rng, m, n, dout, "t", 0, 0, 0), "is_d": d}[grp["c"]]
        As.append(a), Bs.append(b), Cs.append(c), Ds.append(d)
    alpha, beta, kw = case["alpha"], case["beta"], {}
    exc, msg = None, None
    if fault == "lengths":
        lists = [As, Bs, Cs, Ds]
        x = lists[pick % 4]
        if pick % 8 < 4 or not x:
            x.append(x[0] if x else None)
        else:
            x.pop()
        got = [len(y) for y in lists]
        exc = pcr.InvalidArgumentError
        msg = f"As, Bs, Cs and Ds need one entry per group; got {got[0]}, {got[1]}, {got[2]}"
        msg += f" and {got[3]}"
    elif fault == "not_a_tensor":
        [As, Bs, Cs, Ds]["abcd".index(v)][g] = [[1.0]] if pick % 2 else object()
        exc, msg = pcr.DTypeError, f"{v}: "
    elif fault == "alpha_type":
        alpha = ["1", None, 1j, True][pick % 4]
        exc, msg = pcr.DTypeError, "alpha must be a real number"
    elif fault == "kernel_name":
        kw["kernel"] = "sm90_no_such_grouped_kernel"
        exc, msg = pcr.KernelNotFoundError, "no kernel named"
    elif fault == "stream":
        kw["stream"] = ["default", 1.5, object()][pick % 3]
        exc, msg = pcr.DTypeError, "stream: cannot get a CUDA stream handle"
    elif fault == "alpha_nan":  # shared by the groups: group 0 finds it
        alpha = [math.nan, math.inf][pick % 2]
        exc, msg = pcr.InvalidArgumentError, "group 0: alpha and beta must be finite numbers"
    elif fault in READ_FAULTS:
        if fault == "read_only_d":
            Ds[g], Cs[g] = Ds[g].copy(), None
            Ds[g].flags.writeable = False
        else:
            [As, Bs, Ds]["abd".index(w)][g] = None
        exc, msg = READ_FAULTS[fault]
        msg = f"group {g}: {msg}"
    elif fault in GROUP_FAULTS:
        m, n, k = sizes[g]
        exc, msg = GROUP_FAULTS[fault]
        x = {"a": As, "b": Bs, "d": Ds}[w]
        if fault == "shape":
            Bs[g] = view(rng, k + 1, n, F16, lt[1], 0, 0, 0)
        elif fault == "dtype_mixed":
            Bs[g] = Bs[g].astype(F32)
        elif fault == "dtype_unknown":
            As[g], Bs[g] = As[g].astype(np.int16), Bs[g].astype(np.int16)
        elif fault == "dtype_out":
            Ds[g], Cs[g] = np.zeros((m, n), F64), None
            exc, msg = valid("float16", "float64")
        elif fault == "d_aliases_a":
            Ds[g], Cs[g] = As[g], None
        elif fault == "negative_stride":
            x[g], Cs[g] = x[g][::-1], None
        elif fault == "ndim":
            x[g], Cs[g] = x[g][None, None], None
        elif fault == "batch":
            As[g], Bs[g] = np.stack([As[g]] * 2), np.stack([Bs[g]] * 2)  # a batch of 2
            Ds[g], Cs[g] = np.zeros((2, m, n), dout), None
        elif fault == "dtype_differs":
            Ds[g], Cs[g] = np.zeros((m, n), F32 if dout == F16 else F16), None
        elif fault == "layout_differs":
            As[g] = np.asfortranarray(As[g]) if lt[0] == "t" else np.ascontiguousarray(As[g])
        if exc is not None:
            msg = f"group {g}: {msg.format(v=w)}"
        if g > 0 or exc is None:
            # group 0, valid, meets the device first (a 3-D group is refused after it)
            exc, msg = grouped_device_outcome(0, "float16", out_name(Ds, dout))
    if case["cs_none"] and fault != "lengths" and all(x is None for x in Cs):
        Cs = None
    if exc is None and As:
        exc, msg = grouped_device_outcome(0, "float16", out_name(Ds, dout))
    return (As, Bs, Cs, Ds, alpha, beta), kw, exc, msg


@fuzz("grouped")
@hypothesis.given(grouped_cases())
def test_grouped(case):
    """pcr.grouped_gemm over lists of 0-4 groups, each its own M, N, K (empty groups
    included), with or without c, and one fault: lists of different lengths, a group that
    is no tensor, bad scalars, kernel or stream, or a fault in one group's operands."""
    built = build_grouped(case)
    hypothesis.assume(built is not None)
    hypothesis.event(f"fault: {case['fault']}")
    args, kw, exc, msg = built
    hypothesis.event(f"outcome: {exc.__name__ if exc else 'valid'}")
    if exc is None:  # no group: nothing to do, no GPU needed
        assert pcr.grouped_gemm(*args, **kw) == []
        return
    raises(lambda: pcr.grouped_gemm(*args, **kw), exc, msg)


# ---- __cuda_array_interface__ -----------------------------------------------------------


class _Cai:
    """A __cuda_array_interface__ producer (the protocol a property of the type, as
    numba's device arrays have it) over a numpy view. An empty view's pointer is 0, as
    the interface has it; other pointers are host memory, which CUDA does not own."""

    def __init__(self, x, typestr=None, strides="given", stream=None, read_only=False):
        self.x = x  # kept alive
        given = tuple(x.strides) if strides == "given" else strides
        self._cai = {
            "shape": tuple(x.shape),
            "typestr": typestr or x.dtype.str,
            "data": (x.ctypes.data if x.size else 0, read_only),
            "version": 3,
            "strides": given,
        }
        if stream != "absent":
            self._cai["stream"] = stream

    @property
    def __cuda_array_interface__(self):
        return self._cai


def cai_device_outcome():
    """What a call meets once it asks CUDA where a (host) pointer lives: NoDeviceError
    without a GPU; with one, the pointer is no CUDA device memory."""
    if has_gpu():
        return pcr.InvalidArgumentError, "is not CUDA device memory"
    return pcr.NoDeviceError, ""


#: checks made in Python before any operand is read
CAI_PY_FAULTS = {
    "scalar_type": (pcr.DTypeError, "alpha must be a real number"),
    "activation": (pcr.InvalidArgumentError, "activation must be None or one of"),
    "kernel_name": (pcr.KernelNotFoundError, "no kernel named"),
    "stream": (pcr.DTypeError, "stream: cannot get a CUDA stream handle"),
    "not_a_tensor": (pcr.DTypeError, "{v}: "),
    "read_only_d": (pcr.ReadOnlyError, "d exposes a read-only __cuda_array_interface__"),
}
#: faults of one operand's interface, found as it is read (operands in the order a, b, c, d)
CAI_READ_FAULTS = {
    "cai_stream": (pcr.InvalidArgumentError, "__cuda_array_interface__ stream"),
    "cai_typestr": (pcr.DTypeError, "{v}: __cuda_array_interface__ dtype"),
    "cai_strides": (pcr.InvalidArgumentError, "{v}: strides"),
}
#: faults the library finds in the operands themselves: reachable without a GPU only when
#: no operand has memory (a batch of 0 matrices, pointers 0)
CAI_C_FAULTS = errors_of(
    "shape",
    "dtype_mixed",
    "dtype_unknown",
    "dtype_out",
    "ndim",
    "negative_stride",
    "zero_stride",
    "negative_batch_stride",
    "no_unit_stride",
    "beta_without_c",
    "scalar_value",
)


#: faults of an interface's strides (a host array among the operands has none)
CAI_STRIDE_FAULTS = ("negative_stride", "zero_stride", "negative_batch_stride", "no_unit_stride")
#: faults found after the check that all operands live on one side (host or GPU)
CAI_LATE_FAULTS = ("no_unit_stride", "dtype_out")


@st.composite
def cai_cases(draw):
    return dict(
        empty=draw(st.booleans()),  # a batch of 0 matrices: every pointer is 0
        mnk=draw(st.tuples(*[st.integers(1, 10)] * 3)),
        layouts=draw(st.tuples(*[st.sampled_from("tn")] * 4)),
        pads=draw(st.tuples(*[st.integers(0, 2)] * 4)),
        dtype_out=draw(st.sampled_from([F16, F32])),
        c_form=draw(st.sampled_from(["none", "plain", "is_d"])),
        streams=draw(st.tuples(*[st.sampled_from([None, 1, "absent"])] * 4)),
        omit_strides=draw(st.tuples(*[st.booleans()] * 4)),
        numpy=draw(st.sampled_from([None, None, "a", "b", "c"])),  # one host array among them
        alpha=draw(st.sampled_from([1.0, 2, -0.5])),
        beta=draw(st.sampled_from([0.0, 1.0])),
        fault=draw(st.sampled_from([None] * 3 + [*CAI_PY_FAULTS, *CAI_READ_FAULTS, *CAI_C_FAULTS])),
        victim=draw(st.sampled_from("abcd")),
        pick=draw(st.integers(0, 59)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def build_cai(case):
    """(args, kwargs, exception or None, message), or None where the fault does not apply.

    The outcome follows the order of the checks: Python's (arguments, what is a tensor,
    a read-only d); then each operand's interface in the order a, b, c, d (its stream,
    dtype and strides), where the first with memory has CUDA asked about its pointer
    (cai_device_outcome); then the library's own checks of the operands."""
    rng = np.random.default_rng(case["seed"])
    (m, n, k), lt, pads, dout = case["mnk"], case["layouts"], case["pads"], case["dtype_out"]
    fault, v, pick, empty = case["fault"], case["victim"], case["pick"], case["empty"]
    # with memory, its pointer is asked about before the library's checks: an empty case
    empty = empty or fault in CAI_C_FAULTS
    if empty and fault in ("negative_stride", "zero_stride", "no_unit_stride"):
        return None  # an empty batch's matrix strides are never read: no fault to find
    batch = 0 if empty else None

    def matrix(rows, cols, dtype, i):
        x = batch_view(rng, 1 if batch is None else batch, rows, cols, dtype, lt[i], pads[i], 0, 0)
        return x[0] if batch is None else x

    arrays = {"a": matrix(m, k, F16, 0), "b": matrix(k, n, F16, 1), "d": matrix(m, n, dout, 3)}
    arrays["c"] = None if case["c_form"] == "none" else matrix(m, n, dout, 2)
    typestrs = {x: None for x in "abcd"}
    strides = {x: "given" for x in "abcd"}
    streams = dict(zip("abcd", case["streams"]))
    read_only, alpha, beta, kw = False, case["alpha"], case["beta"], {}
    for i, x in enumerate("abcd"):
        y = arrays[x]
        if case["omit_strides"][i] and y is not None and y.flags.c_contiguous and y.size:
            strides[x] = None  # compact row-major: the interface may leave strides out
    if v == "c" and fault in ("zero_stride", "no_unit_stride"):
        v = "a"  # c may be a broadcast view, or of any layout (copied into d)
    if v == "c" and fault not in CAI_PY_FAULTS:
        if arrays["c"] is None:
            v = "d" if fault in CAI_C_FAULTS else "a"
        elif case["c_form"] == "is_d":
            v = "d"  # c is d's own producer
    exc, msg = (
        CAI_PY_FAULTS.get(fault) or CAI_READ_FAULTS.get(fault) or CAI_C_FAULTS.get(fault)
    ) or (None, None)
    e = {x: y.itemsize for x, y in arrays.items() if y is not None}
    if fault == "scalar_type":
        alpha = ["2", None, 1j, True][pick % 4]
    elif fault == "activation":
        kw["activation"] = BAD_ACTIVATIONS[pick % len(BAD_ACTIVATIONS)]
    elif fault == "kernel_name":
        kw["kernel"] = "sm80_no_such_kernel"
    elif fault == "stream":
        kw["stream"] = ["default", 1.5, object()][pick % 3]
    elif fault == "read_only_d":
        read_only = True
    elif fault == "cai_stream":
        streams[v] = [0, True, 1.5, "1"][pick % 4]
    elif fault == "cai_typestr":
        typestrs[v] = ["<u2", ">f2", "<c8", "<i2", "|b1", "<f16"][pick % 6]
    elif fault == "cai_strides":
        y = arrays[v]
        strides[v] = (*y.strides[:-1], y.strides[-1] + 1)  # not a whole number of elements
    elif fault == "shape":
        arrays["b"] = matrix(k + 1, n, F16, 1)
    elif fault == "dtype_mixed":
        arrays["b"] = matrix(k, n, F32, 1)
    elif fault == "dtype_unknown":
        typestrs["a"] = typestrs["b"] = "|u1"  # read, but no GEMM takes uint8
    elif fault == "dtype_out":
        arrays["d"] = matrix(m, n, F64, 3)
        exc, msg = valid("float16", "float64")
        if case["c_form"] == "is_d":
            arrays["c"] = None
    elif fault == "ndim":
        arrays[v] = arrays[v][None]
    elif fault in ("negative_stride", "zero_stride"):
        y = arrays[v]
        dim = 1 + pick % 2
        if y.shape[dim] < 2:
            dim = 3 - dim
        if y.shape[dim] < 2:
            return None  # a size-1 dimension's stride says nothing
        given = list(y.strides)
        given[dim] = -given[dim] if fault == "negative_stride" else 0
        strides[v] = tuple(given)
    elif fault == "negative_batch_stride":
        strides[v] = (-arrays[v].strides[0] - e[v], *arrays[v].strides[1:])
    elif fault == "no_unit_stride":
        y = arrays[v]
        if min(y.shape[1:]) < 2:
            return None
        strides[v] = (y.strides[0], 2 * y.shape[2] * e[v], 2 * e[v])
    elif fault == "beta_without_c":
        arrays["c"], beta = None, 0.5
    elif fault == "scalar_value":
        alpha = [math.nan, math.inf][pick % 2]
    c_is_d = case["c_form"] == "is_d" and arrays["c"] is not None and fault != "ndim"
    if beta and arrays["c"] is None and fault != "beta_without_c":
        beta = 0.0
    host = case["numpy"]  # a host array among producers that claim the GPU
    if fault in CAI_READ_FAULTS or (fault in CAI_STRIDE_FAULTS and v == host):
        host = None  # the fault is in that operand's interface
    ops = {}
    for x in "abcd":
        if arrays[x] is None:
            ops[x] = None
        elif x == host:
            ops[x] = arrays[x]
        else:
            ops[x] = _Cai(arrays[x], typestrs[x], strides[x], streams[x], read_only and x == "d")
    if c_is_d:
        ops["c"] = ops["d"]
    if fault == "not_a_tensor":
        if ops[v] is None:
            return None
        ops[v] = [[1.0]] if pick % 2 else object()
    # the outcome, in the order of the checks
    if fault in CAI_PY_FAULTS:
        if fault == "read_only_d" and not isinstance(ops["d"], _Cai):
            return None
        return (ops["a"], ops["b"], ops["c"], ops["d"], alpha, beta), kw, exc, msg.format(v=v)
    for x in "abcd":
        y = ops[x]
        if not isinstance(y, _Cai):
            continue
        if fault in CAI_READ_FAULTS and y is ops[v]:
            return (ops["a"], ops["b"], ops["c"], ops["d"], alpha, beta), kw, exc, msg.format(v=x)
        if y.__cuda_array_interface__["data"][0]:
            exc, msg = cai_device_outcome()
            break
    else:
        mixed = isinstance(ops["d"], _Cai) and any(isinstance(ops[x], np.ndarray) for x in "abc")
        if mixed and (exc is None or fault in CAI_LATE_FAULTS):
            # host arrays and GPU ones do not mix: checked after the operands' shapes
            exc, msg = pcr.DeviceMismatchError, "is a host array but d is a GPU array"
        elif exc is None:
            exc, msg = valid("float16", dtype_name(dout))
        if fault == "dtype_unknown" and host == "a":
            msg = msg.replace("a has", "b has")  # a host array keeps its float16
        if msg is not None:
            msg = msg.format(v=v)
    return (ops["a"], ops["b"], ops["c"], ops["d"], alpha, beta), kw, exc, msg


@fuzz("cai")
@hypothesis.given(cai_cases())
def test_cuda_array_interface(case):
    """Operands through __cuda_array_interface__ (over host memory: no GPU memory here),
    with or without strides and streams, mixed with a numpy array, and one fault: in the
    arguments, in an operand's interface, or (with no memory to ask CUDA about: a batch
    of 0 matrices) in the operands' shapes, dtypes and strides."""
    built = build_cai(case)
    hypothesis.assume(built is not None)
    hypothesis.event(f"fault: {case['fault']}")
    args, kw, exc, msg = built
    hypothesis.event(f"outcome: {exc.__name__ if exc else 'valid'}")
    if settle(lambda: pcr.gemm(*args, **kw), exc, msg):
        assert pcr.gemm(*args, **kw) is args[3]  # an empty batch: nothing to compute


# ---- torch ------------------------------------------------------------------------------

TORCH_DTYPES = [
    ("float16", "float16"),
    ("float16", "float32"),
    ("bfloat16", "bfloat16"),
    ("bfloat16", "float32"),
    ("float32", "float32"),
    ("float8_e4m3fn", "bfloat16"),
    ("float8_e4m3fn", "float16"),
    ("float8_e5m2", "bfloat16"),
]
TORCH_FAULTS = {
    None: (None, None),
    "shape": (pcr.InvalidArgumentError, "shape mismatch"),
    "ndim": (pcr.InvalidArgumentError, "{v} must be a 2-D matrix or a 3-D batch"),
    "dtype_unknown": (pcr.DTypeError, "a has a dtype pycutlass_rt does not handle"),
    "dtype_mixed": (pcr.UnsupportedError, "a and b must share a dtype"),
    "zero_stride": (pcr.InvalidArgumentError, "{v} has a zero stride"),
    "no_unit_stride": (pcr.InvalidArgumentError, "is neither row- nor column-major"),
    "d_aliases_a": (pcr.OverlapError, "d overlaps a"),
    "batch_mismatch": (pcr.InvalidArgumentError, "batch mismatch: b holds"),
    "bias_shape": (pcr.InvalidArgumentError, "does not broadcast against d"),
    "bias_dtype": (pcr.UnsupportedError, "bias is {bias} but d is {d}"),
    "activation": (pcr.InvalidArgumentError, "activation must be None or one of"),
    "scale_length": (pcr.InvalidArgumentError, "scale_a has {count} elements"),
    "scale_not_quantized": (pcr.UnsupportedError, "scale_a and scale_b apply to int8, fp8,"),
    "scalar_value": (pcr.InvalidArgumentError, "alpha and beta must be finite numbers"),
    "beta_without_c": (pcr.InvalidArgumentError, "c is None but beta"),
    "kernel_name": (pcr.KernelNotFoundError, "no kernel named"),
}


def tview(torch, rng, batch, rows, cols, dtype, layout, pad, device, fill=0.0):
    """A torch (rows, cols) view, or (batch, rows, cols) batch, of the given layout with
    `pad` elements past each row (or column), filled with small integers."""
    lead, inner = (rows, cols) if layout == "t" else (cols, rows)
    count = 1 if batch is None else max(batch, 1)
    base = torch.full((count, lead, inner + pad), fill, dtype=torch.float32)
    values = rng.integers(-4, 5, (count, lead, inner)).astype(np.float32)
    base[:, :, :inner] = torch.from_numpy(values)
    x = base.to(device=device, dtype=getattr(torch, dtype))[:, :, :inner]
    if layout == "n":
        x = x.transpose(1, 2)
    return x[0] if batch is None else x[:batch]


def torch_device(torch) -> str:
    return "cuda" if has_gpu() and torch.cuda.is_available() else "cpu"


class _CaiOf:
    """A tensor seen only through its __cuda_array_interface__ (as numba would pass it)."""

    def __init__(self, t):
        self.t = t
        self._cai = t.__cuda_array_interface__

    @property
    def __cuda_array_interface__(self):
        return self._cai


@st.composite
def torch_cases(draw):
    return dict(
        dtypes=draw(st.sampled_from(TORCH_DTYPES)),
        batch=draw(st.sampled_from([None, None, 0, 1, 2, 3])),
        mnk=draw(st.tuples(*[st.sampled_from([1, 2, 3, 5, 8, 13, 16])] * 3)),
        layouts=draw(st.tuples(*[st.sampled_from("tn")] * 4)),
        pads=draw(st.tuples(*[st.integers(0, 2)] * 4)),
        c_form=draw(st.sampled_from(["none", "plain", "is_d"])),
        bias=draw(st.sampled_from([None, None, "n", "1n", "m1"])),
        activation=draw(
            st.sampled_from([None, None, *(a for a in ACTIVATIONS if a not in (None, "none"))])
        ),
        scales=draw(st.sampled_from([None, "numbers", "tensors", "vectors"])),
        form=draw(st.sampled_from(["tensor", "tensor", "capsule", "cai"])),
        api=draw(st.sampled_from(["gemm", "plan"])),
        alpha=draw(st.sampled_from([1.0, -1, 0.5])),
        beta=draw(st.sampled_from([1.0, -0.5])),
        fault=draw(st.sampled_from([None] * 4 + list(TORCH_FAULTS))),
        victim=draw(st.sampled_from("abd")),
        pick=draw(st.integers(0, 59)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def build_torch(torch, case):
    """(args, kwargs, exception or None, message, reference inputs), or None where the
    fault does not apply to the case."""
    rng = np.random.default_rng(case["seed"])
    dev = torch_device(torch)
    (din, dout), L, (m, n, k) = case["dtypes"], case["batch"], case["mnk"]
    lt, pads, fault, v = case["layouts"], case["pads"], case["fault"], case["victim"]
    pick = case["pick"]
    if fault == "batch_mismatch":
        L = L if L and L > 1 else 2
    if fault in ("zero_stride", "no_unit_stride"):
        m, n, k = max(m, 2), max(n, 2), max(k, 2)
    if fault == "d_aliases_a":  # a (M, K) that can be d (M, N)
        din, k, L = dout, n, None if L == 0 else L
    quantized = din.startswith("float8")

    def t(rows, cols, dtype, i, fill=0.0, batch=L):
        return tview(torch, rng, batch, rows, cols, dtype, lt[i], pads[i], dev, fill)

    a, b = t(m, k, din, 0), t(k, n, din, 1)
    d = t(m, n, dout, 3, math.nan)
    c = {"none": None, "plain": t(m, n, dout, 2), "is_d": d}[case["c_form"]]
    alpha, beta = case["alpha"], case["beta"] if c is not None else 0.0
    kw = {}
    if case["bias"] is not None:
        shape = {"n": (n,), "1n": (1, n), "m1": (m, 1)}[case["bias"]]
        kw["bias"] = torch.from_numpy(rng.integers(-4, 5, shape).astype(np.float32)).to(
            device=dev, dtype=getattr(torch, dout)
        )
    if case["activation"] is not None:
        kw["activation"] = case["activation"]
    if case["scales"] == "numbers" or (case["scales"] and not quantized):
        kw["scale_a"], kw["scale_b"] = 2, 0.5
    elif case["scales"]:
        rows, cols = (m, n) if case["scales"] == "vectors" else (1, 1)
        kw["scale_a"] = torch.full((rows, 1), 2.0, device=dev)
        kw["scale_b"] = torch.full((1, cols), 0.5, device=dev)
    exc, msg = TORCH_FAULTS[fault]
    ops = {"a": a, "b": b, "d": d}
    x = ops[v]
    if fault in ("zero_stride", "no_unit_stride") and not x.numel():
        return None  # an empty batch's matrix strides are never read: no fault to find
    if fault == "shape":
        ops["b"] = t(k + 1, n, din, 1)
    elif fault == "ndim":
        ops[v] = x[(None,) * (4 - x.dim())]
    elif fault == "dtype_unknown":
        ops["a"], ops["b"] = a.float().to(torch.int16), b.float().to(torch.int16)
    elif fault == "dtype_mixed":
        ops["b"] = b.float().to(torch.float16 if din != "float16" else torch.float32)
    elif fault == "zero_stride":
        if x.shape[-2] < 2:
            return None  # a size-1 dimension's stride says nothing: no fault to find
        ops[v] = x[..., :1, :].expand(x.shape)
    elif fault == "no_unit_stride":
        rows, cols = x.shape[-2:]
        ops[v] = t(2 * rows, 2 * cols, str(x.dtype)[6:], 0)[..., ::2, ::2]
    elif fault == "d_aliases_a":
        ops["d"], c, beta = a, None, 0.0
    elif fault == "batch_mismatch":
        ops["b"] = t(k, n, din, 1, batch=L + 1)
        msg = f"batch mismatch: b holds {L + 1} matrices, d {L}"
    elif fault == "bias_shape":
        kw["bias"] = torch.zeros(n + 1, device=dev, dtype=getattr(torch, dout))
    elif fault == "bias_dtype":
        other = "float32" if dout != "float32" else "float16"
        kw["bias"] = torch.zeros(n, device=dev, dtype=getattr(torch, other))
        msg = msg.format(bias=other, d=dout)
    elif fault == "activation":
        kw["activation"] = BAD_ACTIVATIONS[pick % len(BAD_ACTIVATIONS)]
    elif fault == "scale_length":
        kw["scale_a"] = torch.ones(m + 1, device=dev)
        msg = msg.format(count=m + 1)
    elif fault == "scale_not_quantized":
        if din != "float32":  # scale tensors apply to the other dtypes
            return None
        kw["scale_a"] = torch.ones(1, device=dev)
    elif fault == "scalar_value":
        alpha = [math.nan, math.inf][pick % 2]
    elif fault == "beta_without_c":
        c, beta = None, 0.5
    elif fault == "kernel_name":
        kw["kernel"] = "sm90_no_such_kernel"
    if fault in ("ndim", "zero_stride", "no_unit_stride") and v == "d" and c is d:
        c, beta = None, 0.0
    a, b, d = ops["a"], ops["b"], ops["d"]
    if exc is None:
        scaled = [s for s in ("scale_a", "scale_b") if torch.is_tensor(kw.get(s))]
        vector = any(kw[s].numel() > 1 for s in scaled)
        fused = "bias" in kw or "activation" in kw
        epi = "scaled" if vector or (scaled and fused) else "biasact" if fused else "linear"
        exc, msg = valid(din, dout, epi)
    else:
        msg = msg.format(v=v)
    if case["form"] == "capsule":
        a = a.__dlpack__()
    elif case["form"] == "cai" and dev == "cuda" and din in ("float16", "float32"):
        a = _CaiOf(a)
    host = lambda y: None if y is None else y.float().cpu().numpy()  # noqa: E731
    ref = (
        host(ops["a"]),
        host(b),
        host(c),
        alpha,
        beta,
        {s: host(y) if torch.is_tensor(y) else y for s, y in kw.items() if s != "kernel"},
    )
    return (a, b, c, d, alpha, beta), kw, exc, msg, ref


def check_torch_gpu(torch, case, args, kw, ref, cuda):
    """On a GPU: the call (or, with CUDA tensors, the plan) must compute the reference."""
    a, b, c, d, alpha, beta = args
    want = epilogue_reference(*ref)
    start = None if c is not d else d.clone()
    why = pcr.explain(*args, **kw)
    if why.kernel is None and "no GEMM work" not in why.reason:
        make = pcr.gemm if case["api"] == "gemm" else pcr.Gemm
        raises(lambda: make(*args, **kw), pcr.UnsupportedError, "kernel")
        return
    got = lambda: d.float().cpu().numpy()  # noqa: E731
    rtol = 1e-2 if d.dtype == torch.bfloat16 else 2e-3  # compared in float32: bf16 rounds
    if case["api"] == "gemm":
        assert pcr.gemm(*args, **kw) is d
        compare(got(), want, rtol, 0.3)
        return
    assert cuda  # plans refuse host tensors
    plan = pcr.Gemm(*args, **kw)
    plan.run()
    torch.cuda.synchronize()
    compare(got(), want, rtol, 0.3)
    if start is not None:
        d.copy_(start)  # c is d: the next run reads it again
    else:
        d.fill_(math.nan)
    tensors = {s: kw[s] for s in ("bias", "scale_a", "scale_b") if torch.is_tensor(kw.get(s))}
    assert plan(a, b, c, d, **tensors) is d
    torch.cuda.synchronize()
    compare(got(), want, rtol, 0.3)
    plan.close()
    raises(plan.run, pcr.InvalidArgumentError, "this plan was closed")


@fuzz("torch")
@hypothesis.given(torch_cases())
def test_torch_tensors(case):
    """torch tensors (CUDA ones on a GPU, host ones otherwise): float16, bfloat16, float32
    and fp8, 2-D and batched, bias, activations and scales, passed as tensors, capsules
    or (CUDA) through __cuda_array_interface__, to gemm and to pcr.Gemm (with run() and a
    call on the tensors again, on a GPU), each valid or with one fault."""
    torch = pytest.importorskip("torch")  # hypothesis passes the skip on
    built = build_torch(torch, case)
    hypothesis.assume(built is not None)
    hypothesis.event(f"fault: {case['fault']}")
    args, kw, exc, msg, ref = built
    hypothesis.event(f"outcome: {exc.__name__ if exc else 'valid'}")
    cuda = torch_device(torch) == "cuda"
    if exc is None and case["api"] == "plan" and has_gpu() and not cuda:
        exc, msg = pcr.InvalidArgumentError, "a plan needs GPU tensors"
    call = pcr.gemm if case["api"] == "gemm" else pcr.Gemm
    if settle(lambda: call(*args, **kw), exc, msg):
        check_torch_gpu(torch, case, args, kw, ref, cuda)


TORCH_GROUP_FAULTS = [None, None, "lengths", "shape", "dtype_differs", "layout_differs", "none_d"]


@st.composite
def torch_grouped_cases(draw):
    count = draw(st.integers(1, 4))
    return dict(
        sizes=[draw(st.tuples(*[st.sampled_from([0, 8, 16, 24])] * 3)) for _ in range(count)],
        pads=draw(st.sampled_from([0, 8])),
        dtype=draw(st.sampled_from(["float16", "bfloat16"])),
        layouts=draw(st.tuples(*[st.sampled_from("tn")] * 3)),
        with_c=draw(st.booleans()),
        beta=draw(st.sampled_from([0.0, 1.0])),
        fault=draw(st.sampled_from(TORCH_GROUP_FAULTS)),
        group=draw(st.integers(0, 3)),
        pick=draw(st.integers(0, 59)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def torch_grouped_outcome(groups, fault, g, cuda):
    """What grouped_gemm must do with these groups (each (dtype, canonical layout, has
    work)) and a fault in group g: faults of one group are found in group order; then the
    groups must agree with the first that has work (the lead) in dtypes and, where both
    have work, layouts. Without CUDA tensors, group 0 meets the device first."""
    if not cuda:
        if fault == "shape" and g == 0:
            return pcr.InvalidArgumentError, "group 0: shape mismatch"
        return grouped_device_outcome(0, groups[0][0], groups[0][0])
    if fault == "shape":
        return pcr.InvalidArgumentError, f"group {g}: shape mismatch"
    works = [w for _, _, w in groups]
    lead = next((i for i, w in enumerate(works) if w), len(groups) - 1)
    for i, (dtype, layout, w) in enumerate(groups):
        if dtype != groups[lead][0] or (w and layout != groups[lead][1]):
            return pcr.InvalidArgumentError, f"group {i} differs from group {lead} in dtypes"
    return None, None


@fuzz("torch_grouped")
@hypothesis.given(torch_grouped_cases())
def test_torch_grouped(case):
    """pcr.grouped_gemm on torch tensors: 1-4 groups of their own sizes (empty ones
    included), and one fault: lists of different lengths, a group with mismatched shapes,
    a missing d, or a group whose dtype or layout differs from the others'."""
    torch = pytest.importorskip("torch")
    from helpers import canonical_layout, runnable_kernels

    rng = np.random.default_rng(case["seed"])
    dev = torch_device(torch)
    cuda = dev == "cuda"
    lt, pad, fault, pick = case["layouts"], case["pads"], case["fault"], case["pick"]
    g = case["group"] % len(case["sizes"])
    As, Bs, Cs, Ds, described = [], [], [], [], []
    for i, (m, n, k) in enumerate(case["sizes"]):
        dtype, la = case["dtype"], lt[0]
        if fault == "dtype_differs" and i == g:
            dtype = "bfloat16" if dtype == "float16" else "float16"
        if fault == "layout_differs" and i == g:
            la = "n" if la == "t" else "t"
        As.append(tview(torch, rng, None, m, k, dtype, la, pad, dev))
        Bs.append(tview(torch, rng, None, k, n, dtype, lt[1], pad, dev))
        Ds.append(tview(torch, rng, None, m, n, dtype, lt[2], pad, dev, math.nan))
        Cs.append(tview(torch, rng, None, m, n, dtype, "t", 0, dev) if case["with_c"] else None)
        described.append((dtype, canonical_layout(la, lt[1], lt[2]), bool(m and n and k)))
    exc, msg = torch_grouped_outcome(described, fault, g, cuda)
    if fault == "lengths":
        [As, Bs, Cs, Ds][pick % 4].append(As[0])
        got = [len(x) for x in (As, Bs, Cs, Ds)]
        exc = pcr.InvalidArgumentError
        msg = f"need one entry per group; got {got[0]}, {got[1]}, {got[2]} and {got[3]}"
    elif fault == "none_d":
        Ds[g] = None
        exc, msg = pcr.InvalidArgumentError, f"group {g}: a, b and d are required"
    elif fault == "shape":
        m, n, k = case["sizes"][g]
        Bs[g] = tview(torch, rng, None, k + 1, n, case["dtype"], lt[1], pad, dev)
    hypothesis.event(f"fault: {fault}")
    hypothesis.event(f"outcome: {exc.__name__ if exc else 'valid'}")
    call = lambda: pcr.grouped_gemm(As, Bs, Cs, Ds, 1.0, case["beta"])  # noqa: E731
    if not settle(call, exc, msg):
        return
    layout = described[0][1]  # the groups agree
    kernels = runnable_kernels(grouped=True)
    if any(w for _, _, w in described) and not any(
        k.dtype_a == case["dtype"] and k.layout == layout for k in kernels
    ):
        raises(call, pcr.UnsupportedError, "kernel")  # a build without such grouped kernels
        return
    assert all(x is y for x, y in zip(call(), Ds))
    torch.cuda.synchronize()
    for a, b, c, d in zip(As, Bs, Cs, Ds):
        want = a.double().cpu().numpy() @ b.double().cpu().numpy()
        if c is not None and case["beta"]:
            want = want + case["beta"] * c.double().cpu().numpy()
        compare(d.float().cpu().numpy(), want, 1e-2, 0.3)  # bf16 too
