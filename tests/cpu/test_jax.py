"""pycutlass_rt.jax without a GPU: importing it imports no jax, a library without the
handler gives a clear error, and shapes, attributes and errors come out right while
tracing (the GPU side: tests/gpu/test_jax_gpu.py)."""

import subprocess
import sys

import pytest

import pycutlass_rt as pcr
import pycutlass_rt.jax as pcr_jax


def test_importing_imports_no_jax():
    code = (
        "import sys, pycutlass_rt, pycutlass_rt.jax as j\n"
        "j.available()\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_build_has_the_handler_and_says_so(monkeypatch):
    # built against the vendored XLA FFI headers, with no jax at build time
    handler = pcr.info()["build"]["jax_handler"]
    assert handler["built"] is True and handler["xla_ffi_api"].startswith("0.")
    assert pcr_jax.available() is True
    monkeypatch.setattr(pcr_jax, "SYMBOL", "pcr_no_such_handler")
    assert pcr_jax.available() is False


def test_a_library_without_the_handler_says_how_to_get_it(monkeypatch):
    # every build has the handler; one configured without it is made to look so
    monkeypatch.setattr(pcr_jax, "SYMBOL", "pcr_no_such_handler")
    monkeypatch.setattr(pcr_jax, "_registered", False)
    for call in (
        lambda: pcr_jax.gemm([[1.0]], [[1.0]]),
        lambda: pcr_jax.linear([[1.0]], [[1.0]]),
    ):
        with pytest.raises(pcr.UnsupportedError) as e:
            call()
        msg = str(e.value)
        assert "built without the JAX handler" in msg
        assert pcr_jax.SYMBOL in msg and "PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF" in msg


@pytest.fixture
def jax(monkeypatch):
    """jax, with the handler registered and kernel choice off (as where JAX sees no GPU):
    these tests trace, lower and evaluate shapes only."""
    jax = pytest.importorskip("jax")
    if not pcr_jax.available():
        pytest.skip("this build of the library has no JAX handler (built without jax)")
    monkeypatch.setattr(pcr_jax, "_gpu_ordinal", lambda: None)
    return jax


def spec(jax, *shape, dtype="bfloat16"):
    return jax.ShapeDtypeStruct(shape, jax.numpy.dtype(dtype))


def test_eval_shape(jax):
    jnp = jax.numpy
    a, b = spec(jax, 128, 64), spec(jax, 64, 32)
    out = jax.eval_shape(pcr_jax.gemm, a, b)
    assert (out.shape, out.dtype) == ((128, 32), jnp.bfloat16)
    out = jax.eval_shape(lambda a, b: pcr_jax.gemm(a, b, out_dtype=jnp.float32), a, b)
    assert (out.shape, out.dtype) == ((128, 32), jnp.float32)
    assert jax.eval_shape(pcr_jax.gemm, spec(jax, 5, 128, 64), b).shape == (5, 128, 32)
    assert jax.eval_shape(pcr_jax.gemm, spec(jax, 1, 128, 64), spec(jax, 7, 64, 32)).shape == (
        7,
        128,
        32,
    )
    t = jax.eval_shape(
        lambda a, b: pcr_jax.gemm(a, b, transpose_a=True, transpose_b=True),
        spec(jax, 64, 128),
        spec(jax, 32, 64),
    )
    assert t.shape == (128, 32)
    i8 = jax.eval_shape(
        pcr_jax.gemm, spec(jax, 16, 32, dtype="int8"), spec(jax, 32, 8, dtype="int8")
    )
    assert i8.dtype == jnp.int32
    w = spec(jax, 512, 256)
    for lead in ((), (7,), (2, 3, 5)):
        y = jax.eval_shape(pcr_jax.linear, spec(jax, *lead, 256), w, spec(jax, 512))
        assert (y.shape, y.dtype) == ((*lead, 512), jnp.bfloat16)


def test_eval_shape_under_vmap(jax):
    b = spec(jax, 64, 32)
    batched = jax.vmap(pcr_jax.gemm, in_axes=(0, None))
    assert jax.eval_shape(batched, spec(jax, 8, 128, 64), b).shape == (8, 128, 32)
    both = jax.vmap(pcr_jax.gemm, in_axes=(1, 0))
    assert jax.eval_shape(both, spec(jax, 128, 3, 64), spec(jax, 3, 64, 32)).shape == (3, 128, 32)
    nested = jax.vmap(jax.vmap(pcr_jax.linear, in_axes=(0, None)), in_axes=(None, 0))
    out = jax.eval_shape(nested, spec(jax, 4, 16, 256), spec(jax, 3, 512, 256))
    assert out.shape == (3, 4, 16, 512)


def test_lowering_carries_the_call(jax):
    jnp = jax.numpy
    x, w, bias = spec(jax, 4, 16, 256), spec(jax, 512, 256), spec(jax, 512)
    text = (
        jax.jit(pcr_jax.linear, static_argnames="activation")
        .lower(x, w, bias, activation="gelu_tanh")
        .as_text()
    )
    assert f"@{pcr_jax.TARGET}(" in text
    for attr in ("transpose_b = 1", "has_bias = 1", "has_c = 0", "activation = 3", "rank = 2"):
        assert attr in text, attr
    c = spec(jax, 128, 32, dtype="float32")
    f = jax.jit(lambda a, b, c: pcr_jax.gemm(a, b, c, alpha=2.0, beta=0.5))
    text = f.lower(spec(jax, 128, 64), spec(jax, 64, 32), c).as_text()
    assert "has_c = 1" in text
    assert "alpha = 2.000000e+00 : f64" in text and "beta = 5.000000e-01 : f64" in text
    # beta = 0: c is never read, so it is not passed
    text = jax.jit(lambda a, b, c: pcr_jax.gemm(a, b, c)).lower(spec(jax, 8, 8), spec(jax, 8, 8), c)
    assert "has_c = 0" in text.as_text()
    assert jnp.bfloat16  # the dtypes above are jax's


def test_errors_while_tracing(jax):
    jnp = jax.numpy
    a, b = jnp.zeros((8, 4), jnp.bfloat16), jnp.zeros((5, 3), jnp.bfloat16)
    with pytest.raises(pcr.InvalidArgumentError, match="shape mismatch"):
        pcr_jax.gemm(a, b)
    with pytest.raises(pcr.DTypeError, match="share a dtype"):
        pcr_jax.gemm(a, jnp.zeros((4, 3), jnp.float16))
    with pytest.raises(pcr.DTypeError, match="complex64"):
        pcr_jax.gemm(a.astype(jnp.complex64), a.astype(jnp.complex64).T)
    with pytest.raises(pcr.InvalidArgumentError, match="activation"):
        pcr_jax.linear(a, jnp.zeros((3, 4), jnp.bfloat16), activation="softplus")
    with pytest.raises(pcr.InvalidArgumentError, match="beta"):
        pcr_jax.gemm(a, a.T, beta=1.0)
    with pytest.raises(pcr.InvalidArgumentError, match="batch mismatch"):
        pcr_jax.gemm(jnp.zeros((2, 8, 4), jnp.bfloat16), jnp.zeros((3, 4, 3), jnp.bfloat16))
    with pytest.raises(pcr.InvalidArgumentError, match="in_features"):
        pcr_jax.linear(a, jnp.zeros((3, 5), jnp.bfloat16))


def test_the_handler_is_an_xla_ffi_handler(jax):
    """XLA accepts the symbol as a typed FFI handler (registering it queries its metadata)
    and gets an error back, not a crash, where it cannot run: the CPU gives no stream."""
    import numpy as np

    from pycutlass_rt import _lib

    fn = pcr_jax._handler(_lib.load().path, pcr_jax.SYMBOL)
    jax.ffi.register_ffi_target("pycutlass_rt_gemm_cpu_probe", jax.ffi.pycapsule(fn), "cpu")
    jnp = jax.numpy
    call = jax.ffi.ffi_call(
        "pycutlass_rt_gemm_cpu_probe", jax.ShapeDtypeStruct((8, 3), jnp.float32)
    )
    attrs = {"alpha": np.float64(1), "beta": np.float64(0), "kernels": ""}
    attrs.update({k: np.int32(0) for k in ("transpose_a", "transpose_b", "has_c", "has_bias")})
    attrs.update(activation=np.int32(0), rank=np.int32(2))
    # the message is XLA's (it differs between jaxlib versions); the process lives on
    with jax.default_device(jax.devices("cpu")[0]), pytest.raises(jax.errors.JaxRuntimeError):
        call(jnp.ones((8, 4)), jnp.ones((4, 3)), **attrs).block_until_ready()


def test_jax_pycapsule_leaves_the_dlpack_path_alone():
    """jax.ffi.pycapsule (the handler's registration) sets the argtypes of the process's
    one ctypes.pythonapi.PyCapsule_New; pycutlass_rt's DLPack path binds its own."""
    import ctypes

    jax = pytest.importorskip("jax")
    from pycutlass_rt import _dlpack, _lib

    jax.ffi.pycapsule(ctypes.CDLL(_lib.load().path).pcr_abi_version)
    assert _dlpack._capsule_type() is _dlpack._CAPSULE_TYPE  # a NULL destructor still passes
