"""Tensors on a second GPU: the call runs on their device, on that device's stream, and
leaves the caller's current device alone. Skipped on a one-GPU machine (the CPU suite
unit-tests the device checks: tests/cpu/test_validation.py)."""

import threading

import pytest
from helpers import runnable_kernels

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
BF16_TN = ("bfloat16", "bfloat16", "tn")


def on(dev, rows, cols, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    return torch.rand(rows, cols, device=dev, generator=g, dtype=torch.float32).sub_(0.5).to(dtype)


def close(d, a, b):
    torch.cuda.synchronize(d.device)
    want = a.double() @ b.double()
    err = ((d.double() - want).norm() / want.norm()).item()
    assert err < 1.6e-2, f"relative error {err:.2e} on {d.device}"


def test_second_device_runs_there_and_keeps_the_current_device():
    torch.cuda.set_device(0)
    a, b = on("cuda:1", 384, 256), on("cuda:1", 256, 512)
    d = torch.full((384, 512), float("nan"), device="cuda:1", dtype=torch.bfloat16)
    assert pcr.explain(a, b, None, d).problem["device"] == 1
    pcr.gemm(a, b, None, d)
    assert torch.cuda.current_device() == 0
    close(d, a, b)


def test_second_device_stream_is_honoured():
    a, b = on("cuda:1", 1000, 512), on("cuda:1", 512, 768)
    s = torch.cuda.Stream(device="cuda:1")
    s.wait_stream(torch.cuda.current_stream("cuda:1"))
    for how in ("explicit", "current"):
        d = torch.full((1000, 768), float("nan"), device="cuda:1", dtype=torch.bfloat16)
        if how == "explicit":
            pcr.gemm(a, b, None, d, stream=s)
        else:
            with torch.cuda.stream(s):
                pcr.gemm(a, b, None, d)
        s.synchronize()
        close(d, a, b)


def test_plans_and_graphs_on_the_second_device():
    a, b = on("cuda:1", 256, 1024), on("cuda:1", 1024, 256)
    d = torch.empty(256, 256, device="cuda:1", dtype=torch.bfloat16)
    plan = pcr.Gemm(a, b, None, d)
    plan.run()
    close(d, a, b)
    with torch.cuda.device(1):
        g = torch.cuda.CUDAGraph()
        # torch's default capture stream lives on the device current at its first use
        with torch.cuda.graph(g, stream=torch.cuda.Stream(device=1)):
            plan.run()
        d.fill_(float("nan"))
        g.replay()
    close(d, a, b)
    assert torch.cuda.current_device() == 0


def test_both_devices_from_threads_match_serial_results():
    shapes = [(512, 384, 256), (1, 4096, 1024), (127, 1000, 4097), (2048, 1024, 512)]
    jobs = [
        (dev, on(dev, m, k, seed=i), on(dev, k, n, seed=i + 1))
        for i, (dev, (m, n, k)) in enumerate(
            (dev, s) for dev in ("cuda:0", "cuda:1") for s in shapes
        )
    ]
    serial = []
    for dev, a, b in jobs:
        d = torch.empty(a.shape[0], b.shape[1], device=dev, dtype=torch.bfloat16)
        pcr.gemm(a, b, None, d)
        serial.append(d)
    for dev in ("cuda:0", "cuda:1"):
        torch.cuda.synchronize(dev)
    out, errors = [None] * len(jobs), []

    def worker(t):
        try:
            for j in range(t, len(jobs), 4):
                dev, a, b = jobs[j]
                d = torch.empty(a.shape[0], b.shape[1], device=dev, dtype=torch.bfloat16)
                for _ in range(20):
                    pcr.gemm(a, b, None, d)
                torch.cuda.synchronize(dev)
                out[j] = d
        except Exception as e:  # reported below; a thread's exception is otherwise lost
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (dev, a, b), s, o in zip(jobs, serial, out):
        assert torch.equal(s, o), (dev, a.shape, b.shape)


def test_operands_on_two_devices_are_refused():
    a, b = on("cuda:0", 64, 64), on("cuda:1", 64, 64)
    d = torch.empty(64, 64, device="cuda:0", dtype=torch.bfloat16)
    with pytest.raises(pcr.DeviceMismatchError, match="cuda:1"):
        pcr.gemm(a, b, None, d)
    with pytest.raises(pcr.DeviceMismatchError):
        pcr.Gemm(a, b, None, d)


def test_cupy_on_the_second_device():
    cp = pytest.importorskip("cupy")
    with cp.cuda.Device(1):
        a = cp.random.rand(300, 200).astype(cp.float16)
        b = cp.random.rand(200, 400).astype(cp.float16)
        d = cp.zeros((300, 400), cp.float16)
    pcr.gemm(a, b, None, d)
    with cp.cuda.Device(1):
        want = a.astype(cp.float64) @ b.astype(cp.float64)
        err = float(cp.linalg.norm(d.astype(cp.float64) - want) / cp.linalg.norm(want))
    assert err < 2e-3
    assert cp.cuda.runtime.getDevice() == 0


def test_scratch_of_every_kind_interleaved_on_two_devices():
    """Stream-K workspace, staging scratch and grouped arrays, called in turn on cuda:0 and
    cuda:1 (each on its device's default stream, where per-stream state of the two devices
    once shared one key), give the bits the same calls give one device at a time."""
    streamk = next(
        (
            k.name
            for k in runnable_kernels()
            if k.split == "streamk" and (k.dtype_a, k.dtype_d, k.layout) == BF16_TN
        ),
        None,
    )
    grouped = bool(runnable_kernels(grouped=True))

    def jobs_on(dev):
        def col(rows, cols, seed):  # rows x cols, column-major
            return on(dev, cols, rows, seed=seed).t()

        jobs = [(on(dev, 127, 4097), on(dev, 4097, 1000, seed=1), None)]  # staged: odd sizes
        if streamk:
            jobs.append((on(dev, 96, 4096, seed=2), col(4096, 4096, 3), streamk))
        if grouped:
            a = [on(dev, 64 + 8 * g, 128, seed=4 + g) for g in range(3)]
            jobs.append((a, [col(128, 256, 9 + g) for g in range(3)], "grouped"))
        return jobs

    def run(a, b, kernel, out):  # out: the list of outputs outputs() made
        if kernel == "grouped":
            pcr.grouped_gemm(a, b, None, out)
        else:
            pcr.gemm(a, b, None, out[0], kernel=kernel)

    def outputs(a, b, kernel):
        pairs = zip(a, b) if kernel == "grouped" else [(a, b)]
        return [
            torch.empty(x.shape[0], y.shape[1], dtype=x.dtype, device=x.device) for x, y in pairs
        ]

    work = {dev: jobs_on(dev) for dev in ("cuda:0", "cuda:1")}
    serial = {}
    for dev, jobs in work.items():  # one device at a time
        for i, (a, b, kernel) in enumerate(jobs):
            serial[dev, i] = outputs(a, b, kernel)
            run(a, b, kernel, serial[dev, i])
        torch.cuda.synchronize(dev)
    mixed = {key: outputs(*work[key[0]][key[1]]) for key in serial}
    for _ in range(10):  # interleaved: every job of cuda:0, then of cuda:1, in turn
        for i in range(len(work["cuda:0"])):
            for dev in ("cuda:0", "cuda:1"):
                run(*work[dev][i], mixed[dev, i])
    for dev in work:
        torch.cuda.synchronize(dev)
    for key, want in serial.items():
        assert all(torch.equal(w, g) for w, g in zip(want, mixed[key])), key
