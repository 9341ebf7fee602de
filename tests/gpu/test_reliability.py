"""Guarantees the README states: determinism, thread safety, flat memory over many calls,
clear failures without a visible GPU and after fork, capture of a first-time shape."""

import multiprocessing as mp
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from helpers import matrix, require

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")


def rand(rows, cols, dtype=torch.bfloat16):
    return matrix(rows, cols, "t", dtype)


SHAPES = [(512, 384, 256), (1, 4096, 1024), (127, 1000, 4097), (2048, 2048, 512), (96, 64, 8)]


def test_same_kernel_same_shape_is_bitwise_deterministic():
    require(torch.bfloat16, layout="tt")
    for m, n, k in SHAPES:
        a, b = rand(m, k), rand(k, n)
        outs = []
        for i in range(5):
            d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            s = torch.cuda.Stream() if i % 2 else torch.cuda.current_stream()
            s.wait_stream(torch.cuda.current_stream())
            pcr.gemm(a, b, None, d, stream=s)
            s.synchronize()
            outs.append(d)
        assert all(torch.equal(outs[0], o) for o in outs[1:]), (m, n, k)


def test_threads_and_streams_match_a_serial_run():
    """8 threads x 4 streams, mixed shapes and dtypes: bitwise equal to the serial results."""
    require(torch.bfloat16, layout="tt")
    require(torch.float16, layout="tt")
    jobs = []
    for i in range(32):
        m, n, k = SHAPES[i % len(SHAPES)]
        dt = (torch.bfloat16, torch.float16)[i % 2]
        jobs.append((rand(m, k, dtype=dt), rand(k, n, dtype=dt), (m, n, dt)))
    serial = []
    for a, b, (m, n, dt) in jobs:
        d = torch.empty(m, n, device="cuda", dtype=dt)
        pcr.gemm(a, b, None, d)
        serial.append(d)
    torch.cuda.synchronize()
    results = [None] * len(jobs)
    errors = []

    def worker(t):
        try:
            streams = [torch.cuda.Stream() for _ in range(4)]
            for rep in range(3):
                for j in range(t, len(jobs), 8):
                    a, b, (m, n, dt) = jobs[j]
                    d = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
                    s = streams[(j + rep) % 4]
                    with torch.cuda.stream(s):
                        pcr.gemm(a, b, None, d)
                    s.synchronize()
                    results[j] = d
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for j, (got, want) in enumerate(zip(results, serial)):
        assert torch.equal(got, want), j


def test_first_cuda_call_of_a_fresh_thread():
    """A thread whose first CUDA work is ours has no current context yet: the call must
    make one current before it encodes TMA descriptors or launches."""
    require(torch.bfloat16, layout="tt")
    a, b = rand(384, 512), rand(512, 256)
    want = torch.empty(384, 256, device="cuda", dtype=torch.bfloat16)
    pcr.gemm(a, b, None, want)
    torch.cuda.synchronize()
    outs = [torch.full_like(want, float("nan")) for _ in range(3)]
    errors = []

    def fresh(d, plan):  # no torch work in the thread: it would make a context current
        try:
            if plan:
                pcr.Gemm(a, b, None, d).run()
            else:
                pcr.gemm(a, b, None, d)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    for d, plan in zip(outs, (False, True, False)):
        t = threading.Thread(target=fresh, args=(d, plan))
        t.start()
        t.join(timeout=60)
    torch.cuda.synchronize()
    assert not errors, errors
    assert all(torch.equal(o, want) for o in outs)


def test_many_calls_keep_memory_flat():
    require(torch.bfloat16, layout="tt")
    require(torch.float16, layout="tt")
    a, b = rand(64, 64), rand(64, 64)
    d = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    x, y = np.ones((8, 8), np.float16), np.ones((8, 8), np.float16)
    z = np.empty((8, 8), np.float16)

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    for _ in range(1000):
        pcr.gemm(a, b, None, d)
    pcr.gemm(x, y, None, z)
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info()
    rss0 = rss()
    for i in range(100_000):
        pcr.gemm(a, b, None, d)
        if i % 1000 == 0:
            pcr.gemm(x, y, None, z)  # host staging allocates and frees each time
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    assert abs(free1 - free0) <= 4 << 20, (free0, free1)
    assert rss() - rss0 <= 8 << 20, (rss0, rss())


def _run(code, **env):
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=120,
    )


def test_hidden_gpus_raise_no_device():
    require(torch.float16)  # the child's dtypes must exist for it to reach the device
    r = _run(
        "import numpy as np, pycutlass_rt as p\n"
        "try:\n p.gemm(np.ones((4,8),np.float16), np.ones((8,2),np.float16), None, np.empty((4,2),np.float16))\n"
        "except p.NoDeviceError as e: print('NoDeviceError', e)",
        CUDA_VISIBLE_DEVICES="",
    )
    assert "NoDeviceError" in r.stdout and "CUDA_VISIBLE_DEVICES=" in r.stdout, r.stdout + r.stderr


def _child_gemm(q):
    import numpy as np

    import pycutlass_rt as p

    a = np.ones((4, 8), np.float16)
    try:
        d = p.gemm(a, np.ones((8, 2), np.float16), None, np.empty((4, 2), np.float16))
        q.put(("ok", float(d.sum())))
    except p.Error as e:
        q.put((type(e).__name__, str(e)))


def test_spawn_works_and_fork_after_cuda_fails_clearly():
    require(torch.float16, layout="tt")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child_gemm, args=(q,))
    p.start()
    assert q.get(timeout=120) == ("ok", 64.0)
    p.join()
    pcr.gemm(
        np.ones((4, 8), np.float16), np.ones((8, 2), np.float16), None, np.empty((4, 2), np.float16)
    )  # CUDA is now in use in this process
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_gemm, args=(q,))
    p.start()
    kind, message = q.get(timeout=120)
    p.join(timeout=60)
    assert kind in ("NoDeviceError", "CudaError") and "spawn" in message, (kind, message)


def test_capture_of_a_first_time_shape():
    """Selection for a new shape inside capture does no device work, so capture holds."""
    require(torch.bfloat16, layout="tt")
    a, b = rand(328, 200), rand(200, 136)
    d = torch.empty(328, 136, device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pcr.gemm(a, b, None, d)
    d.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert ((d.double() - ref).norm() / ref.norm()).item() < 1.6e-2


def test_threads_writing_disjoint_column_blocks_of_one_host_array_lose_nothing():
    """Eight threads, each d[:, block] = a @ b[:, block] on numpy arrays (the calls run
    without the GIL): each call moves only its view's elements, so no thread's copy back
    overwrites another's block. Repeated, bitwise against the blocks run one by one."""
    require(torch.float16, layout="tt")
    rng = np.random.default_rng(0)
    m, k, blocks, width = 192, 256, 8, 96
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, blocks * width)).astype(np.float16)
    cols = [slice(t * width, (t + 1) * width) for t in range(blocks)]
    want = np.empty((m, blocks * width), np.float16)
    for c in cols:
        pcr.gemm(a, b[:, c], None, want[:, c])
    for rep in range(10):
        d = np.full_like(want, np.nan)
        failures = []

        def work(c, d=d, failures=failures):
            try:
                pcr.gemm(a, b[:, c], None, d[:, c])
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(e)

        threads = [threading.Thread(target=work, args=(c,)) for c in cols]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not failures, failures
        lost = [i for i, c in enumerate(cols) if not np.array_equal(d[:, c], want[:, c])]
        assert not lost, f"round {rep}: blocks {lost} lost their results"


def test_a_column_view_of_a_host_array_leaves_the_rest_untouched():
    """d's view is one column of a wide array: every other element keeps its value, and
    what lies between the view's elements is never copied back over."""
    require(torch.float16, layout="tt")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((300, 64)).astype(np.float16)
    b = rng.standard_normal((64, 1)).astype(np.float16)
    wide = rng.standard_normal((300, 500)).astype(np.float16)
    kept = wide.copy()
    pcr.gemm(a, b, None, wide[:, 7:8])
    mask = np.ones(wide.shape, bool)
    mask[:, 7] = False
    assert np.array_equal(wide[mask], kept[mask])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(wide[:, 7:8], ref, rtol=2e-2, atol=2e-2)


def test_a_plan_run_from_two_threads_at_once_is_refused_never_raced():
    """Through the C ABI (ctypes.CDLL releases the GIL), four threads run one plan: each
    run either launches or is refused with a message; the results stay right."""
    import collections
    import ctypes

    require(torch.bfloat16, layout="tt")
    a, b = rand(256, 512), rand(512, 384)
    d = torch.empty(256, 384, device="cuda", dtype=torch.bfloat16)
    plan = pcr.Gemm(a, b, None, d)
    cdll = ctypes.CDLL(pcr._lib.load().path)
    run = cdll.pcr_plan_run
    run.argtypes, run.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    cdll.pcr_last_error.restype = ctypes.c_char_p
    stream = torch.cuda.current_stream().cuda_stream
    seen, messages = collections.Counter(), set()

    def work():
        for _ in range(3000):
            st = run(plan._handle, stream)
            seen[st] += 1
            if st:
                messages.add(cdll.pcr_last_error().decode())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    torch.cuda.synchronize()
    assert set(seen) <= {0, int(pcr._abi.Status.ERR_INVALID_ARGUMENT)}, seen
    assert seen[0] > 0
    assert all("running in another thread" in m for m in messages), messages
    r = a.double() @ b.double()
    assert ((d.double() - r).norm() / r.norm()).item() <= 1.6e-2
