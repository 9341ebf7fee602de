"""pycutlass_rt.jax on the GPU: gemm and linear against jnp.matmul, eagerly, under jit and
vmap, with c, bias and every activation, odd sizes and batches.

Skipped without jax, without a CUDA device in jax, or where the library was built without
the JAX handler (helpers.jax_reason; under PYCUTLASS_RT_REQUIRE_GPU=1 each is a failure).
Each test asks the kernel list for kernels of its dtype, layout and epilogue first
(helpers.require): odd sizes need no more, since the library stages an unbatched problem's
misaligned operands through aligned scratch, or runs it on an any-alignment kernel, so a
refusal past that check fails the test.
"""

import os

import numpy as np
import pytest
from helpers import environment_skip, jax_reason, require

import pycutlass_rt.jax as pcr_jax

# JAX takes 75% of the GPU at its first use unless told not to; the rest of the suite
# (torch) needs it. Read when jax starts its backend, after collection.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

jax = pytest.importorskip("jax")
jnp = jax.numpy

DTYPES = ["bfloat16", "float16", "float32"]
#: relative error (Frobenius norm) allowed per output dtype: its rounding
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5}
HIGHEST = jax.lax.Precision.HIGHEST
ACTIVATIONS = {
    None: lambda v: v,
    "relu": jax.nn.relu,
    "gelu": lambda v: jax.nn.gelu(v, approximate=False),
    "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True),
    "silu": jax.nn.silu,
    "sigmoid": jax.nn.sigmoid,
    "tanh": jax.numpy.tanh,
    "hardswish": jax.nn.hard_swish,
    "leaky_relu": jax.nn.leaky_relu,  # slope 0.01, as pcr's default
    ("leaky_relu", 0.2): lambda v: jax.nn.leaky_relu(v, 0.2),
    ("clamp", -0.5, 0.75): lambda v: jax.numpy.clip(v, -0.5, 0.75),
}


@pytest.fixture(autouse=True)
def jax_gpu():
    reason = jax_reason()  # no CUDA device in jax, or no JAX handler in the library
    if reason is not None:
        environment_skip(reason)


def rand(*shape, dtype="bfloat16", seed=0):
    x = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
    return jnp.asarray(x).astype(dtype)


def matmul(a, b):
    """jnp.matmul at float32 accuracy, the reference."""
    return jnp.matmul(a.astype(jnp.float32), b.astype(jnp.float32), precision=HIGHEST)


def close(y, ref, dtype, what=""):
    y = np.asarray(y.astype(jnp.float32), np.float64)
    r = np.asarray(ref, np.float64)
    assert y.shape == r.shape, f"{what}: shape {y.shape}, expected {r.shape}"
    assert not np.isnan(y).any(), f"{what}: NaN in output"
    err = np.linalg.norm(y - r) / max(np.linalg.norm(r), 1e-30)
    assert err <= TOL[dtype], f"{what}: relative error {err:.2e}"


SHAPES = [(128, 96, 64), (136, 72, 264), (37, 53, 71), (1, 257, 129)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda s: str(s))
def test_gemm_matches_matmul(dtype, m, n, k):
    require(dtype, layout="tt")
    a, b = rand(m, k, dtype=dtype, seed=1), rand(k, n, dtype=dtype, seed=2)
    eager = pcr_jax.gemm(a, b)
    assert eager.dtype == jnp.dtype(dtype)
    close(eager, matmul(a, b), dtype, "eager")
    jitted = jax.jit(pcr_jax.gemm)(a, b)
    close(jitted, matmul(a, b), dtype, "jit")
    assert np.array_equal(np.asarray(eager), np.asarray(jitted))  # one kernel: bitwise equal
    # one FFI call of the library's handler, which ranks the kernels itself at run time
    text = jax.jit(pcr_jax.gemm).lower(a, b).as_text()
    assert text.count(pcr_jax.TARGET) == 1 and "kernels" not in text


@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_alpha_beta_c(dtype):
    require(dtype, layout="tt")
    m, n, k = 96, 80, 72
    a, b = rand(m, k, dtype=dtype, seed=3), rand(k, n, dtype=dtype, seed=4)
    c = rand(m, n, dtype=dtype, seed=5)
    f = jax.jit(lambda a, b, c: pcr_jax.gemm(a, b, c, alpha=1.25, beta=-0.5))
    close(f(a, b, c), 1.25 * matmul(a, b) - 0.5 * c.astype(jnp.float32), dtype, "c")
    row = rand(n, dtype=dtype, seed=6)  # broadcast to (M, N)
    close(f(a, b, row), 1.25 * matmul(a, b) - 0.5 * row.astype(jnp.float32), dtype, "row c")
    # new values through the same executable
    a2 = rand(m, k, dtype=dtype, seed=7)
    close(f(a2, b, c), 1.25 * matmul(a2, b) - 0.5 * c.astype(jnp.float32), dtype, "rerun")


def test_float32_output_of_bfloat16():
    require("bfloat16", "float32", layout="tt")
    a, b = rand(64, 128, seed=8), rand(128, 48, seed=9)
    y = jax.jit(lambda a, b: pcr_jax.gemm(a, b, out_dtype=jnp.float32))(a, b)
    assert y.dtype == jnp.float32
    close(y, matmul(a, b), "float32", "bf16 -> f32")


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_transposed_operands(ta, tb):
    layout = ("n" if ta else "t") + ("n" if tb else "t")
    require("bfloat16", layout=layout)
    m, n, k = 72, 40, 136
    a = rand(k, m, seed=10) if ta else rand(m, k, seed=10)
    b = rand(n, k, seed=11) if tb else rand(k, n, seed=11)
    y = jax.jit(lambda a, b: pcr_jax.gemm(a, b, transpose_a=ta, transpose_b=tb))(a, b)
    close(y, matmul(a.T if ta else a, b.T if tb else b), "bfloat16", layout)


def test_batched_operands():
    require("bfloat16", layout="tt")
    L, m, n, k = 4, 64, 48, 40
    a3, b3 = rand(L, m, k, seed=12), rand(L, k, n, seed=13)
    a2, b2 = rand(m, k, seed=14), rand(k, n, seed=15)
    f = jax.jit(pcr_jax.gemm)
    close(f(a3, b2), matmul(a3, b2), "bfloat16", "(L,M,K) @ (K,N)")
    close(f(a2, b3), matmul(a2, b3), "bfloat16", "(M,K) @ (L,K,N)")
    close(f(a3[:1], b3), matmul(a3[:1], b3), "bfloat16", "(1,M,K) @ (L,K,N)")
    close(f(a3, b3), matmul(a3, b3), "bfloat16", "(L,M,K) @ (L,K,N)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_vmap(dtype):
    require(dtype, layout="tt")
    L, m, n, k = 6, 64, 40, 48
    x, b = rand(L, m, k, dtype=dtype, seed=16), rand(k, n, dtype=dtype, seed=17)
    bs = rand(L, k, n, dtype=dtype, seed=18)
    shared = jax.jit(jax.vmap(pcr_jax.gemm, in_axes=(0, None)))
    close(shared(x, b), matmul(x, b), dtype, "vmap over a")
    both = jax.vmap(jax.jit(pcr_jax.gemm))
    close(both(x, bs), matmul(x, bs), dtype, "vmap over a and b")
    moved = jax.jit(jax.vmap(pcr_jax.gemm, in_axes=(1, None), out_axes=2))
    xt = jnp.moveaxis(x, 0, 1)  # (M, L, K)
    close(moved(xt, b), jnp.moveaxis(matmul(x, b), 0, 2), dtype, "in_axes=1, out_axes=2")
    c = rand(L, m, n, dtype=dtype, seed=19)
    with_c = jax.vmap(lambda a, c: pcr_jax.gemm(a, b, c, alpha=0.5, beta=2.0))
    ref = 0.5 * matmul(x, b) + 2.0 * c.astype(jnp.float32)
    close(jax.jit(with_c)(x, c), ref, dtype, "vmap with c")


def test_nested_vmap_with_uneven_batching():
    """a batched over the outer axis, b over the inner one: the handler loops over one."""
    require("bfloat16", layout="tt")
    m, n, k = 32, 24, 40
    a, b = rand(2, m, k, seed=20), rand(3, k, n, seed=21)
    f = jax.jit(jax.vmap(jax.vmap(pcr_jax.gemm, in_axes=(0, None)), in_axes=(None, 0)))
    ref = jnp.einsum(
        "imk,jkn->jimn", a.astype(jnp.float32), b.astype(jnp.float32), precision=HIGHEST
    )
    close(f(a, b), ref, "bfloat16", "nested vmap")


@pytest.mark.parametrize("act", list(ACTIVATIONS), ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_linear(act, bias):
    fused = bias or act is not None
    require("bfloat16", layout="tn", epilogue="biasact" if fused else "linear")
    x, w = rand(3, 37, 256, seed=22), rand(192, 256, seed=23)
    v = rand(192, seed=24) if bias else None
    f = jax.jit(pcr_jax.linear, static_argnames="activation")
    y = f(x, w, v, activation=act)
    assert y.shape == (3, 37, 192) and y.dtype == jnp.bfloat16
    pre = matmul(x, w.T) + (v.astype(jnp.float32) if bias else 0)
    close(y, ACTIVATIONS[act](pre), "bfloat16", f"linear {act}")


def test_linear_under_vmap():
    require("bfloat16", layout="tn", epilogue="biasact")
    B, t, i, o = 4, 20, 128, 96
    x, w, v = rand(B, t, i, seed=25), rand(o, i, seed=26), rand(o, seed=27)
    vs, ws = rand(B, o, seed=28), rand(B, o, i, seed=29)

    def ref(x, w, v):
        return jax.nn.gelu(matmul(x, jnp.swapaxes(w, -1, -2)) + v[..., None, :], approximate=False)

    def lin(x, w, v):
        return pcr_jax.linear(x, w, v, activation="gelu")

    one = jax.jit(jax.vmap(lin, in_axes=(0, None, None)))  # one batched launch
    close(one(x, w, v), ref(x, w, v), "bfloat16", "shared weight")
    per_bias = jax.jit(jax.vmap(lin, in_axes=(0, None, 0)))  # a launch per bias
    close(per_bias(x, w, vs), ref(x, w, vs), "bfloat16", "batched bias")
    per_weight = jax.jit(jax.vmap(lin, in_axes=(0, 0, None)))
    close(per_weight(x, ws, v), ref(x, ws, v), "bfloat16", "batched weight")


def test_mlp_block_in_one_jit():
    """Two fused linears with XLA's own ops between them: each consumes the previous
    result on XLA's stream, over fresh inputs each step."""
    require("bfloat16", layout="tn", epilogue="biasact")
    d, h = 512, 1024
    w1, b1 = rand(h, d, seed=30) * 0.05, rand(h, seed=31)
    w2, b2 = rand(d, h, seed=32) * 0.05, rand(d, seed=33)

    @jax.jit
    def block(x):
        y = pcr_jax.linear(x, w1, b1, activation="silu")
        return x + pcr_jax.linear(y * 0.5, w2, b2)

    @jax.jit
    def reference(x):
        y = jax.nn.silu(matmul(x, w1.T) + b1.astype(jnp.float32)).astype(jnp.bfloat16)
        return x.astype(jnp.float32) + matmul(y * 0.5, w2.T) + b2.astype(jnp.float32)

    for step in range(5):
        x = rand(8, 256, d, seed=40 + step)
        close(block(x), reference(x), "bfloat16", f"step {step}")


def test_empty_and_k_zero():
    a, b = jnp.zeros((5, 0), jnp.bfloat16), jnp.zeros((0, 3), jnp.bfloat16)
    y = jax.jit(pcr_jax.gemm)(a, b)
    assert y.shape == (5, 3) and not np.asarray(y.astype(jnp.float32)).any()
    c = rand(5, 3, seed=50)
    y = jax.jit(lambda a, b, c: pcr_jax.gemm(a, b, c, beta=2.0))(a, b, c)
    close(y, 2.0 * c.astype(jnp.float32), "bfloat16", "K = 0")
    assert pcr_jax.gemm(jnp.zeros((0, 4), jnp.bfloat16), jnp.zeros((4, 3), jnp.bfloat16)).shape == (
        0,
        3,
    )


def test_handler_errors_carry_the_library_message():
    """A failure inside the handler reaches JAX as an error with the library's message."""
    pcr_jax._register()
    call = jax.ffi.ffi_call(pcr_jax.TARGET, jax.ShapeDtypeStruct((8, 3), jnp.bfloat16))
    attrs = {"alpha": np.float64(1), "beta": np.float64(0)}
    attrs.update({k: np.int32(0) for k in ("transpose_a", "transpose_b", "has_bias")})
    attrs.update(has_c=np.int32(1), activation=np.int32(0), rank=np.int32(2))  # c is missing
    attrs.update(activation_alpha=np.float64(0), activation_beta=np.float64(0))
    with pytest.raises(Exception, match="pycutlass_rt: the handler got 2 operands"):
        call(rand(8, 4), rand(4, 3), **attrs).block_until_ready()
