"""Property-based tests of the front door: generated calls, each valid or with one fault.

A case starts valid (random shapes, layouts, padded or transposed views, size-1 dims with
odd strides, every form of c, scalars of many numeric types, capsules) and may get one
injected fault whose exception class and message the test knows in advance. Outcome:
exactly that documented exception, naming the argument; or, for a valid case, the right
answer on a GPU (fp64 reference) and NoDeviceError without one. Never a crash, a hang or
another exception.
"""

import ctypes
import fractions

import numpy as np
import pytest

import pycutlass_rt as pcr

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

EXAMPLES = 10_000
F16 = np.float16


def has_gpu():
    from helpers import gpu_reason

    return gpu_reason() is None


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


# fault -> (exception class, message fragment; "{v}" is the operand the fault hits)
FAULTS = {
    None: (None, None),
    "shape": (pcr.InvalidArgumentError, "shape mismatch"),
    "ndim": (pcr.InvalidArgumentError, "{v} must be a 2-D matrix"),
    "dtype_unknown": (pcr.DTypeError, "a has a dtype pycutlass_rt does not handle"),
    "dtype_mixed": (pcr.UnsupportedError, "a and b must share a dtype"),
    "dtype_out": (pcr.UnsupportedError, "no kernel in this build computes"),
    "negative_stride": (pcr.InvalidArgumentError, "{v} has a negative stride"),
    "zero_stride": (pcr.InvalidArgumentError, "{v} has a zero stride"),
    "no_unit_stride": (pcr.InvalidArgumentError, "is neither row- nor column-major"),
    "read_only_d": (pcr.ReadOnlyError, "d is read-only"),
    "d_aliases_input": (pcr.OverlapError, "d overlaps a"),
    "c_overlaps_d": (pcr.OverlapError, "c overlaps d"),
    "scalar_type": (pcr.DTypeError, "{s} must be a real number"),
    "scalar_value": (pcr.InvalidArgumentError, "must be finite numbers"),
    "beta_without_c": (pcr.InvalidArgumentError, "c is None but beta"),
    "kernel_name": (pcr.KernelNotFoundError, "no kernel named"),
    "not_a_tensor": (pcr.DTypeError, "{v}: "),
    "consumed_capsule": (pcr.InvalidArgumentError, "already consumed"),
    "stream": (pcr.DTypeError, "stream: cannot get a CUDA stream handle"),
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


@hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
)
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
