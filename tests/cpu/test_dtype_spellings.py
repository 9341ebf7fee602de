"""Dtype names: one spelling out (torch's), both in (torch's and kernel names' words),
through one parser, in the Python API and on the command line."""

import json
import subprocess
import sys

import pytest

import pycutlass_rt as pcr
from pycutlass_rt import _dtypes, _gemm, _tune
from pycutlass_rt._abi import Dtype
from pycutlass_rt._dtypes import DTYPE_BYTES, DTYPE_NAMES, DTYPE_TOKENS, dtype_name

#: each dtype's two spellings: torch's (the library's), and kernel names' word
BOTH = [
    ("float16", "f16"),
    ("bfloat16", "bf16"),
    ("float32", "f32"),
    ("float64", "f64"),
    ("tfloat32", "tf32"),
    ("float8_e4m3fn", "e4m3"),
    ("float8_e5m2", "e5m2"),
    ("int8", "s8"),
    ("int32", "s32"),
]


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "pycutlass_rt", *args], capture_output=True, text=True, timeout=300
    )


def test_the_two_spellings_are_the_abis():
    assert sorted(BOTH) == sorted((name, token) for token, name in DTYPE_TOKENS.items())
    assert set(DTYPE_NAMES) == set(Dtype) - {Dtype.DTYPE_INVALID}
    assert set(DTYPE_BYTES) == set(DTYPE_NAMES.values())


@pytest.mark.parametrize("name, token", BOTH)
def test_either_spelling_gives_torchs(name, token):
    assert dtype_name(name) == dtype_name(token) == name
    assert dtype_name(token.upper()) == dtype_name(f" {name} ") == name


def test_framework_dtypes_give_their_names():
    np = pytest.importorskip("numpy")
    assert dtype_name(np.dtype("float16")) == "float16"
    assert dtype_name(np.int8) == "int8"  # the scalar type, "<class 'numpy.int8'>"
    assert dtype_name(np.dtype(np.float32)) == "float32"


def test_torch_dtypes_give_their_names():
    torch = pytest.importorskip("torch")
    assert dtype_name(torch.bfloat16) == "bfloat16"
    assert dtype_name(torch.float8_e4m3fn) == "float8_e4m3fn"


@pytest.mark.parametrize("bad", ["bfloat17", "int4", "", None, 3, "float8"])
def test_an_unknown_dtype_lists_both_spellings(bad):
    with pytest.raises(pcr.DTypeError) as e:
        dtype_name(bad, "out_dtype")
    msg = str(e.value)
    assert msg.startswith(f"out_dtype {bad!r}: one of float16, bfloat16")
    assert "(or f16, bf16" in msg
    assert isinstance(e.value, TypeError)


def test_kernel_names_use_the_words_and_kernelinfo_the_names(lib):
    for k in pcr.kernels():
        assert {k.dtype_a, k.dtype_b, k.dtype_acc, k.dtype_d} <= set(DTYPE_BYTES)
        if k.op == "gemm":  # sm90_bf16_bf16_f32_bf16_tn_...: a's, b's, acc's, d's words
            words = k.name.split("_")[1:5]
            assert [dtype_name(w) for w in words] == [k.dtype_a, k.dtype_b, k.dtype_acc, k.dtype_d]


def test_one_parser_serves_every_entry_point():
    # the tables' old home hands on the same objects
    from pycutlass_rt import _kernels

    assert _kernels.DTYPE_NAMES is DTYPE_NAMES and _kernels.DTYPE_TOKENS is DTYPE_TOKENS
    assert _kernels.DTYPE_BYTES is DTYPE_BYTES
    assert _dtypes.dtype_name is dtype_name


# ---- tune ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, out_dtype, want",
    [
        ("bf16", None, ("bfloat16", "bfloat16")),
        ("bf16", "f32", ("bfloat16", "float32")),
        ("e4m3", "bf16", ("float8_e4m3fn", "bfloat16")),
        ("s8", None, ("int8", "int32")),
        ("tf32", None, ("tfloat32", "float32")),
        ("float16", "f32", ("float16", "float32")),
    ],
)
def test_tune_takes_either_spelling_and_keeps_torchs(dtype, out_dtype, want):
    spec = _tune.spec_of((8, 16, 32), dtype, out_dtype)
    assert (spec.dtype, spec.out_dtype) == want
    item = {"m": 8, "n": 16, "k": 32, "dtype": dtype, "out_dtype": out_dtype}
    assert (_tune.spec_of(item).dtype, _tune.spec_of(item).out_dtype) == want


def test_tune_refuses_an_unknown_dtype_before_anything_runs():
    with pytest.raises(pcr.DTypeError, match="tune: dtype 'bf17'"):
        pcr.tune([(8, 8, 8)], dtype="bf17")
    with pytest.raises(pcr.DTypeError, match="tune: out_dtype 'fp33'"):
        pcr.tune([(8, 8, 8)], out_dtype="fp33")
    with pytest.raises(pcr.DTypeError, match="inputs and their outputs"):
        pcr.tune([(8, 8, 8)], dtype="f32", out_dtype="f16")  # both known, no such pair


# ---- matmul, quantize, jax ----------------------------------------------------------------


@pytest.mark.parametrize("out_dtype", ["f32", "float32", "F32"])
def test_matmul_out_dtype_either_way(monkeypatch, out_dtype):
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(_gemm, "gemm", lambda a, b, c, d, **kw: d)
    a, b = np.ones((5, 8), np.float16), np.ones((8, 3), np.float16)
    assert pcr.matmul(a, b, out_dtype=out_dtype).dtype == np.float32
    assert pcr.matmul(a, b, out_dtype=np.float32).dtype == np.float32
    out = np.empty((5, 3), np.float32)
    assert pcr.matmul(a, b, out=out, out_dtype=out_dtype) is out
    with pytest.raises(pcr.InvalidArgumentError, match="out is float32 but out_dtype is float16"):
        pcr.matmul(a, b, out=out, out_dtype="f16")
    with pytest.raises(pcr.DTypeError, match="out_dtype 'f33'"):
        pcr.matmul(a, b, out_dtype="f33")


def test_matmul_out_dtype_as_torch_names_it(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(_gemm, "gemm", lambda a, b, c, d, **kw: d)
    a = torch.ones(5, 8, dtype=torch.float16)
    for out_dtype in (torch.float32, "float32", "f32"):
        assert pcr.matmul(a, a.t(), out_dtype=out_dtype).dtype == torch.float32


def test_quantize_takes_either_spelling():
    np = pytest.importorskip("numpy")
    x = np.ones((4, 8), np.float32)
    for int8 in ("int8", "s8", "S8", np.int8):  # past the name: numpy is host memory
        with pytest.raises(pcr.DeviceMismatchError, match="host arrays are not taken"):
            pcr.quantize(x, int8)
    for fp8 in ("float8_e4m3fn", "e4m3"):  # past the name: numpy has no fp8
        with pytest.raises(pcr.UnsupportedError, match="numpy has no float8_e4m3fn"):
            pcr.quantize(x, fp8)
    for bad in ("e5m2", "float8_e5m2", "bf16", "int4"):
        with pytest.raises(pcr.InvalidArgumentError, match="'int8' \\(or 's8'\\)"):
            pcr.quantize(x, bad)


def test_jax_out_dtype_either_way(monkeypatch):
    jax = pytest.importorskip("jax")
    import pycutlass_rt.jax as pcr_jax

    if not pcr_jax.available():
        pytest.skip("this build of the library has no JAX handler")
    monkeypatch.setattr(pcr_jax, "_gpu_ordinal", lambda: None)
    jnp = jax.numpy
    a = jax.ShapeDtypeStruct((128, 64), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((64, 32), jnp.bfloat16)
    for out_dtype in ("f32", "float32", jnp.float32):
        out = jax.eval_shape(lambda a, b, o=out_dtype: pcr_jax.gemm(a, b, out_dtype=o), a, b)
        assert out.dtype == jnp.float32
    with pytest.raises(pcr.DTypeError, match="out_dtype 'f33'"):
        jax.eval_shape(lambda a, b: pcr_jax.gemm(a, b, out_dtype="f33"), a, b)


# ---- the command line ---------------------------------------------------------------------


def test_the_command_line_takes_either_spelling_and_prints_torchs(has_gpu):
    if has_gpu:
        pytest.skip("GPU present: explain runs for real (tests/gpu)")
    for dtype, out in (("BF16", "f32"), ("bfloat16", "float32"), ("e4m3", "bf16")):
        r = run("explain", "16x4096x4096", "--dtype", dtype, "--out-dtype", out)
        assert r.returncode == 1 and r.stderr.startswith("explain: "), r.stderr
    bad = run("tune", "16x16x16", "--out-dtype", "f33")
    assert bad.returncode == 2 and "--out-dtype: dtype 'f33': one of float16" in bad.stderr
    assert "(or f16, bf16" in bad.stderr
    listed = json.loads(run("kernels", "sm90_bf16*", "--json").stdout)
    assert listed and {k["dtype_a"] for k in listed} == {"bfloat16"}
    assert {k["dtype_d"] for k in listed} <= set(DTYPE_BYTES)
