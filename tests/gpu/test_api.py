"""gemm through the public API on the GPU: layouts, strides, alignment fallbacks, C forms,
scalars, frameworks (torch, cupy, jax, numba, numpy), streams, threads and CUDA graphs."""

import itertools
import threading

import numpy as np
import pytest
from helpers import canonical_layout, require
from helpers import matrix as mat

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")

DTYPES = [
    (torch.float16, torch.float16),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32),
]
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}


def ref(a, b, c=None, alpha=1.0, beta=0.0):
    r = alpha * (a.double() @ b.double())
    return r + beta * c.double() if c is not None and beta else r


def read_as(rows, cols):
    """The layout the library reads a row-major rows x cols matrix in: a single column (of
    more rows than one) as column-major ('n'), anything else as row-major ('t')."""
    return "n" if cols == 1 < rows else "t"


def close(d, r, what=""):
    torch.cuda.synchronize()
    assert not torch.isnan(d).any(), f"{what}: NaN in output"
    err = ((d.double() - r).norm() / r.norm().clamp_min(1e-30)).item()
    assert err <= TOL[d.dtype], f"{what}: relative error {err:.2e}"


@pytest.mark.parametrize("in_dt,out_dt", DTYPES, ids=lambda t: str(t).split(".")[-1])
@pytest.mark.parametrize("la,lb,lc,ld", list(itertools.product("tn", repeat=4)))
def test_all_layouts(in_dt, out_dt, la, lb, lc, ld):
    require(in_dt, out_dt, canonical_layout(la, lb, ld))
    m, n, k = 136, 72, 264
    a, b = mat(m, k, la, in_dt), mat(k, n, lb, in_dt)
    c = mat(m, n, lc, out_dt)
    d = mat(m, n, ld, out_dt)
    d.fill_(float("nan"))
    pcr.gemm(a, b, c, d, 1.25, -0.5)
    close(d, ref(a, b, c, 1.25, -0.5), f"{la}{lb}{lc}{ld}")


@pytest.mark.parametrize(
    "m,n,k",
    [
        (127, 1000, 4097),
        (1, 1, 1),
        (3, 5, 7),
        (1, 4096, 4096),
        (4096, 1, 64),
        (8191, 256, 16),
        (256, 256, 65536),
    ],
)
def test_odd_sizes_and_alignment_fallback(m, n, k):
    require(torch.bfloat16, layout=canonical_layout(read_as(m, k), read_as(k, n), read_as(m, n)))
    a, b = mat(m, k, "t", torch.bfloat16), mat(k, n, "t", torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.gemm(a, b, None, d)
    close(d, ref(a, b), f"{m}x{n}x{k}")
    e = pcr.explain(a, b, None, d)
    # explain ranks the verdicts gemm's launch reaches (can_implement on these operands)
    assert e.kernel is not None and e.kernel == pcr.Gemm(a, b, None, d).kernel


@pytest.mark.parametrize("pad,offset", [(8, 0), (3, 0), (0, 1), (5, 3)])
def test_padded_and_shifted_views(pad, offset):
    # a problem this small is not staged: a misaligned one needs an any-alignment kernel
    require(torch.float16, layout="tn", any_alignment=bool(pad % 8 or offset % 8))
    m, n, k = 200, 136, 328
    a = mat(m, k, "t", torch.float16, pad=pad, offset=offset)
    b = mat(k, n, "n", torch.float16, pad=pad, offset=offset)
    d = torch.full((m, n + pad), float("nan"), device="cuda", dtype=torch.float16)[:, :n]
    pcr.gemm(a, b, None, d)
    close(d, ref(a, b), f"pad {pad} offset {offset}")


def test_small_misaligned_fp8_is_staged():
    """A real model's 181x1024x588 (rows of 588 bytes) in fp8, which no any-alignment
    kernel reads: too small for staging by size, staged because nothing else can run it."""
    require(torch.float8_e4m3fn, out=torch.bfloat16, layout="tn")
    m, n, k = 181, 1024, 588
    a = mat(m, k, "t", torch.bfloat16, integer=True).to(torch.float8_e4m3fn)
    b = mat(k, n, "n", torch.bfloat16, integer=True).to(torch.float8_e4m3fn)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert pcr.explain(a, b, None, d).problem["staged"]
    pcr.gemm(a, b, None, d)
    close(d, ref(a.to(torch.float32), b.to(torch.float32)), "fp8 181x1024x588")


@pytest.mark.parametrize(
    "alpha,beta",
    [
        (1.0, 0.0),
        (0.5, 0.0),
        (1.0, 1.0),
        (-1.5, 0.25),
        (0.0, 1.0),
        (2.0, -1.0),
        (np.float32(0.75), np.float64(0.5)),
        (3, 2),
    ],
)
def test_alpha_beta(alpha, beta):
    require(torch.bfloat16, torch.float32, "tn")
    a, b = mat(96, 160, "t", torch.bfloat16), mat(160, 112, "n", torch.bfloat16)
    c = mat(96, 112, "t", torch.float32)
    d = torch.empty(96, 112, device="cuda", dtype=torch.float32)
    pcr.gemm(a, b, c, d, alpha, beta)
    close(d, ref(a, b, c, float(alpha), float(beta)))


def test_c_is_d_and_c_forms():
    require(torch.float16, layout="tt")
    a, b = mat(128, 64, "t", torch.float16), mat(64, 96, "t", torch.float16)
    d = mat(128, 96, "t", torch.float16)
    r = ref(a, b, d, 1.0, 1.0)
    assert pcr.gemm(a, b, d, d, 1.0, 1.0) is d
    close(d, r, "c is d")
    c32 = mat(128, 96, "n", torch.float32)  # other dtype and layout: copied into d first
    d = torch.empty(128, 96, device="cuda", dtype=torch.float16)
    pcr.gemm(a, b, c32, d, 1.0, 0.5)
    close(d, ref(a, b, c32, 1.0, 0.5), "c float32 column-major")
    assert "copied into d" in " ".join(pcr.explain(a, b, c32, d, 1.0, 0.5).notes)
    bias = torch.randn(96, device="cuda", dtype=torch.float16).expand(128, 96)  # stride 0
    pcr.gemm(a, b, bias, d, 1.0, 1.0)
    close(d, ref(a, b, bias, 1.0, 1.0), "broadcast c")


def test_empty_and_k_zero():
    require(torch.float16)  # the dtypes must exist; no kernel runs
    a, b = (
        torch.empty(0, 8, device="cuda", dtype=torch.float16),
        torch.empty(8, 16, device="cuda", dtype=torch.float16),
    )
    pcr.gemm(a, b, None, torch.empty(0, 16, device="cuda", dtype=torch.float16))
    a, b = (
        torch.empty(8, 0, device="cuda", dtype=torch.float16),
        torch.empty(0, 16, device="cuda", dtype=torch.float16),
    )
    c = torch.randn(8, 16, device="cuda", dtype=torch.float16)
    d = torch.full((8, 16), float("nan"), device="cuda", dtype=torch.float16)
    pcr.gemm(a, b, c, d, 1.0, 3.0)
    close(d, 3.0 * c.double(), "K = 0")
    pcr.gemm(a, b, None, d)
    torch.cuda.synchronize()
    assert (d == 0).all()


def test_errors_on_gpu():
    a, b = mat(64, 64, "t", torch.float16), mat(64, 64, "t", torch.float16)
    d = torch.empty(64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(pcr.OverlapError):
        pcr.gemm(a, b, None, a)
    with pytest.raises(pcr.DeviceMismatchError, match="host"):
        pcr.gemm(a.cpu(), b, None, d)
    with pytest.raises(pcr.InvalidArgumentError, match="zero stride"):
        pcr.gemm(a[:1].expand(64, 64), b, None, d)
    with pytest.raises(pcr.UnsupportedError, match="available"):
        pcr.gemm(a.double(), b.double(), None, d.float())  # no float64 -> float32 kernel
    misaligned = torch.empty(64 * 64 + 1, device="cuda", dtype=torch.float16)[1:].view(64, 64)
    sm90 = [
        k.name
        for k in pcr.kernels()
        if k.family == 90 and k.dtype_a == "float16" and k.dtype_d == "float16" and k.layout == "tt"
    ]
    if sm90:
        with pytest.raises(pcr.MisalignedError, match="16-byte alignment of a"):
            pcr.gemm(misaligned, b, None, d, kernel=sm90[0])


def test_explain_matches_gemm_choice():
    a, b = mat(4096, 4096, "t", torch.bfloat16), mat(4096, 4096, "n", torch.bfloat16)
    d = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
    e = pcr.explain(a, b, None, d)
    assert e.kernel and e.kernel.startswith(
        "sm90_" if torch.cuda.get_device_capability() == (9, 0) else "sm80_"
    )
    assert e.problem["layout"] == "tn" and e.ranked[0][0] == e.kernel
    assert str(e).startswith("problem: 4096x4096x4096")
    pcr.gemm(a, b, None, d, kernel=e.kernel)
    close(d, ref(a, b))


def test_streams():
    require(torch.bfloat16, layout="tt")
    a, b = mat(512, 256, "t", torch.bfloat16), mat(256, 384, "t", torch.bfloat16)
    r = ref(a, b)
    s = torch.cuda.Stream()
    for how in ("explicit_obj", "explicit_int", "current"):
        d = torch.full((512, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
        s.wait_stream(torch.cuda.current_stream())
        if how == "explicit_obj":
            pcr.gemm(a, b, None, d, stream=s)
        elif how == "explicit_int":
            pcr.gemm(a, b, None, d, stream=s.cuda_stream)
        else:
            with torch.cuda.stream(s):
                pcr.gemm(a, b, None, d)
        s.synchronize()
        close(d, r, how)


def test_cuda_graph_capture_and_replay():
    require(torch.float16, layout="tn")
    a, b = mat(256, 512, "t", torch.float16), mat(512, 128, "n", torch.float16)
    c = mat(256, 128, "t", torch.float16)
    d = torch.empty(256, 128, device="cuda", dtype=torch.float16)
    pcr.gemm(a, b, c, d, 1.0, 1.0)  # warm: selection happens outside capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pcr.gemm(a, b, c, d, 1.0, 1.0)
    for _ in range(3):
        a.copy_(mat(256, 512, "t", torch.float16))
        d.fill_(float("nan"))
        g.replay()
        close(d, ref(a, b, c, 1.0, 1.0), "graph replay")


def test_threads():
    results = {}

    def work(i):
        torch.cuda.set_device(0)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            a, b = mat(128 + 8 * i, 64, "t", torch.bfloat16), mat(64, 72, "n", torch.bfloat16)
            d = torch.empty(128 + 8 * i, 72, device="cuda", dtype=torch.bfloat16)
            for _ in range(20):
                pcr.gemm(a, b, None, d)
            s.synchronize()
            results[i] = (d, ref(a, b))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    for d, r in results.values():
        close(d, r, "thread")


def test_numpy_host_arrays():
    require(torch.float16, torch.float32, "tn")
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (300, 200)).astype(np.float16)
    b = np.asfortranarray(rng.uniform(-1, 1, (200, 100)).astype(np.float16))
    c = rng.uniform(-1, 1, (300, 100)).astype(np.float32)
    d = np.full((300, 100), np.nan, np.float32)
    assert pcr.gemm(a, b, c, d, 2.0, 0.5) is d
    r = 2.0 * (a.astype(np.float64) @ b.astype(np.float64)) + 0.5 * c
    assert np.linalg.norm(d - r) / np.linalg.norm(r) < 2e-3


def test_cupy():
    require(torch.float16, layout="tt")
    require(torch.float16, layout="nn")  # its column-major output
    cp = pytest.importorskip("cupy")
    a = cp.random.uniform(-1, 1, (256, 128)).astype(cp.float16)
    b = cp.random.uniform(-1, 1, (128, 64)).astype(cp.float16)
    d = cp.empty((256, 64), cp.float16)
    with cp.cuda.Stream() as s:
        pcr.gemm(a, b, None, d)
        s.synchronize()
    r = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    assert np.linalg.norm(cp.asnumpy(d) - r) / np.linalg.norm(r) < 2e-3
    dt = cp.empty((64, 256), cp.float16).T  # column-major output
    pcr.gemm(a, b, None, dt)
    cp.cuda.runtime.deviceSynchronize()
    assert np.linalg.norm(cp.asnumpy(dt) - r) / np.linalg.norm(r) < 2e-3


def test_jax_inputs():
    require(torch.bfloat16, layout="tt")
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    if not any(dev.platform == "gpu" for dev in jax.devices()):
        pytest.skip("jax sees no GPU")
    a = jnp.asarray(np.random.default_rng(2).uniform(-1, 1, (128, 64)), dtype=jnp.bfloat16)
    b = jnp.asarray(np.random.default_rng(3).uniform(-1, 1, (64, 96)), dtype=jnp.bfloat16)
    d = torch.empty(128, 96, device="cuda", dtype=torch.bfloat16)
    pcr.gemm(a, b, None, d)
    r = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    close(d, torch.from_numpy(r).cuda(), "jax inputs")


def test_numba_cuda_array_interface():
    require(torch.float16, layout="tt")
    cuda = pytest.importorskip("numba.cuda")
    a = np.random.default_rng(4).uniform(-1, 1, (64, 32)).astype(np.float16)
    b = np.random.default_rng(5).uniform(-1, 1, (32, 48)).astype(np.float16)
    da, db = cuda.to_device(a), cuda.to_device(b)
    dd = cuda.device_array((64, 48), np.float16)
    pcr.gemm(da, db, None, dd)
    r = a.astype(np.float64) @ b.astype(np.float64)
    got = dd.copy_to_host()
    assert np.linalg.norm(got - r) / np.linalg.norm(r) < 2e-3


def test_demo_runs():
    require(torch.float16, layout="tt")  # the demo's numpy, torch and cupy runs
    require(torch.bfloat16, layout="tt")
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "pycutlass_rt", "demo", "--size", "2048"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all results match" in out.stdout


@pytest.mark.parametrize(
    "m,n,k,la,lb,ld",
    [
        (1000, 1000, 1001, "t", "t", "t"),
        (517, 1030, 999, "n", "t", "n"),
        (640, 2049, 513, "t", "n", "t"),
    ],
)
@pytest.mark.parametrize("c_mode", ["none", "c", "c_is_d"])
def test_large_misaligned_problems_are_staged(m, n, k, la, lb, ld, c_mode):
    """Odd leading dimensions: the operands go through aligned scratch to a fast kernel."""
    require(torch.bfloat16, layout=canonical_layout(la, lb, ld))
    a, b = mat(m, k, la, torch.bfloat16), mat(k, n, lb, torch.bfloat16)
    d = mat(m, n, ld, torch.bfloat16)
    c = None if c_mode == "none" else (d if c_mode == "c_is_d" else mat(m, n, "t", torch.bfloat16))
    beta = 0.0 if c is None else 0.75
    want = ref(a, b, c.clone() if c is not None else None, 1.5, beta)
    e = pcr.explain(a, b, c, d, 1.5, beta)
    assert e.problem["staged"], e
    assert any("aligned scratch" in n for n in e.notes), e
    assert not e.kernel.endswith("_a1"), e  # a fast kernel, not the any-alignment fallback
    pcr.gemm(a, b, c, d, 1.5, beta)
    close(d, want, f"staged {m}x{n}x{k} {la}{lb}{ld} {c_mode}")
    d2 = torch.empty_like(d) if c_mode != "c_is_d" else None
    if d2 is not None:
        pcr.Gemm(a, b, c, d2, 1.5, beta).run()
        close(d2, want, "staged plan")


#: (M, N, K) of odd vocabularies' projections (Whisper's 51866 at decode, GPT-2's 50257 at
#: a prefill's M)
ODD_VOCAB = [(4, 51866, 1280), (300, 50257, 768)]


@pytest.mark.parametrize("m,n,k", ODD_VOCAB)
@pytest.mark.parametrize(
    "form", ["plain", "c", "c_is_d", "row_bias_relu", "padded_d", "transposed", "plan", "graph"]
)
def test_an_odd_n_reads_the_weights_in_place(m, n, k, form):
    """An odd N stages d; padding d's N would pad b's too and copy all of b (the weights)
    on every call. Instead the columns up to a multiple of 8 read b in place and the last
    few run as a second launch of the kernel, copying only their columns of b: explain
    says where the columns split, and every form of the call (C, C that is d, a fused
    per-row bias, d a column slice of a wider buffer, d column-major, a plan, a CUDA
    graph) gets torch's result."""
    dt = torch.bfloat16
    require(dt, layout="tn", epilogue="biasact" if form == "row_bias_relu" else "linear")
    x, w = mat(m, k, "t", dt), mat(n, k, "t", dt)  # activations, and weights as nn.Linear's
    a, b = x, w.t()
    d = torch.empty(m, n, device="cuda", dtype=dt)
    c, beta, extras, bias = None, 0.0, {}, None
    if form == "padded_d":  # a view whose rows are 16-byte aligned: only its extent is odd
        d = torch.empty(m, n + 6, device="cuda", dtype=dt)[:, :n]
    if form == "transposed":  # d = w x^T, column-major: computed as d^T = x w^T
        a, b = w, x.t()
        d = torch.empty(m, n, device="cuda", dtype=dt).t()
    if form in ("c", "c_is_d"):
        c = mat(m, n, "t", dt) if form == "c" else d.copy_(mat(m, n, "t", dt))
        beta = 0.5
    if form == "row_bias_relu":
        bias = mat(m, 1, "t", dt)
        extras = {"bias": bias, "activation": "relu"}
    want = ref(a, b, c.clone() if c is not None else None, 1.25, beta)
    if bias is not None:
        want = torch.relu(want + bias.double())
    e = pcr.explain(a, b, c, d, 1.25, beta, **extras)
    assert e.problem["split_n"] == n // 8 * 8, e
    assert any("columns split" in note for note in e.notes), e
    if form == "plan":
        plan = pcr.Gemm(a, b, c, d, 1.25, beta, **extras)
        for _ in range(2):
            d.fill_(float("nan"))
            plan.run()
    elif form == "graph":
        pcr.gemm(a, b, c, d, 1.25, beta, **extras)  # chosen before capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            pcr.gemm(a, b, c, d, 1.25, beta, **extras)
        d.fill_(float("nan"))
        g.replay()
    else:
        pcr.gemm(a, b, c, d, 1.25, beta, **extras)
    close(d, want, f"{m}x{n}x{k} {form}")


def test_doctor_finds_no_problem_and_checks_a_gemm_per_framework():
    import json
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "pycutlass_rt", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(r.stdout)
    assert r.returncode == 0 and not report["problems"], r.stdout + r.stderr
    assert report["devices"] and report["devices"][0]["kernels_runnable"]
    assert report["frameworks"]["torch"]["gemm"].startswith(("ok", "skipped")), report
    assert "exchange API" in report["frameworks"]["torch"]["dlpack"]
