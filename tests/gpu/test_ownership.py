"""Scratch ownership under CUDA graphs, streams and threads (README, "Scratch memory").

Every call's workspace, staging scratch and grouped-GEMM arrays are stream-ordered and
its own; inside capture they are the graph's. So a graph needs no warm-up, replays
correctly after larger eager calls on its capture stream and while other streams run the
same shapes, and a plan may be closed before the graph that captured its run. Each case
below is a problem that needs scratch of one kind (stream-K or split-K workspace, staged
operands, grouped arrays), or none (plain).
"""

import gc
import os
import threading

import pytest
from helpers import matrix, reference, require, runnable_kernels

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")
BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def own_pool():
    """These tests are about the library's own pool and kept buffers: torch's caching
    allocator, which pycutlass_rt.torch lends (tests/gpu/test_torch_allocator.py), is set
    aside meanwhile and lent again after."""
    lent = pcr.memory_stats(0)["lent"]
    pcr.set_allocator()
    yield
    if lent:
        import pycutlass_rt.torch as pt

        pt.use_caching_allocator()


def first(split):
    ks = [
        k.name
        for k in runnable_kernels()
        if k.split == split and (k.dtype_a, k.dtype_d, k.layout) == ("bfloat16",) * 2 + ("tn",)
    ]
    return ks[0] if ks else None


class Case:
    """One GEMM problem of a kind, its operands refreshable in place, and its reference."""

    def __init__(self, kind, scale=1):
        self.kind, self.kernel = kind, None
        m, n, k = {
            "plain": (96, 520, 264),
            "streamk": (96, 4096, 4096),
            "splitk": (24, 520, 32768),
            "staged": (127, 1000, 4097),  # no 16-byte alignment anywhere
            "grouped": (64, 256, 128),
            "moe": (256, 256, 128),
        }[kind]
        m *= scale
        if kind in ("streamk", "splitk"):
            self.kernel = first(kind)
            if self.kernel is None:
                pytest.skip(f"no bf16 tn {kind} kernel of this build runs here")
        if kind in ("grouped", "moe"):
            if not runnable_kernels(grouped=True):
                pytest.skip("no grouped kernel of this build runs here")
        if kind == "moe":  # 4 experts of (N, K) Linear weights, 64 tokens each
            self.a = matrix(m, k, "t", BF16)
            self.b = matrix(4 * n, k, "t", BF16).view(4, n, k).transpose(1, 2)
            self.offsets = torch.tensor([0, 64, 128, 192, 256], device="cuda", dtype=torch.int32)
            self.d = torch.empty(m, n, device="cuda", dtype=BF16)
        elif kind == "grouped":
            self.a = [matrix(m + 8 * g, k, "t", BF16) for g in range(3)]
            self.b = [matrix(k, n, "n", BF16) for _ in range(3)]
            self.d = [torch.empty(m + 8 * g, n, device="cuda", dtype=BF16) for g in range(3)]
        else:
            self.a, self.b = matrix(m, k, "t", BF16), matrix(k, n, "n", BF16)
            self.d = torch.empty(m, n, device="cuda", dtype=BF16)

    def __call__(self):
        if self.kind == "moe":
            pcr.moe_gemm(self.a, self.b, self.offsets, self.d)
        elif self.kind == "grouped":
            pcr.grouped_gemm(self.a, self.b, None, self.d)
        else:
            pcr.gemm(self.a, self.b, None, self.d, kernel=self.kernel)

    def refresh(self):
        """New inputs in place (what a captured graph reads), and NaN outputs."""
        for x in self.a if self.kind == "grouped" else [self.a]:
            x.copy_(torch.rand_like(x, dtype=torch.float32).to(x.dtype) - 0.5)
        for y in self.d if self.kind == "grouped" else [self.d]:
            y.fill_(float("nan"))

    def check(self, what):
        torch.cuda.synchronize()
        pairs = (
            zip(self.a, self.b, self.d) if self.kind == "grouped" else [(self.a, self.b, self.d)]
        )
        if self.kind == "moe":
            pairs = [
                (self.a[e * 64 : (e + 1) * 64], self.b[e], self.d[e * 64 : (e + 1) * 64])
                for e in range(4)
            ]
        for a, b, d in pairs:
            r = reference(a, b)
            assert not torch.isnan(d).any(), f"{self.kind} {what}: NaN in output"
            err = ((d.double() - r).norm() / r.norm().clamp_min(1e-30)).item()
            assert err <= 1.6e-2, f"{self.kind} {what}: relative error {err:.2e}"

    def outputs(self):
        return self.d if self.kind == "grouped" else [self.d]


KINDS = ["plain", "streamk", "splitk", "staged", "grouped"]


def forget_selections():
    """A process that has not run these problems yet: nothing memoized, nothing warm."""
    pcr._lib.load().pcr_select_clear()


@pytest.mark.parametrize("kind", KINDS)
def test_capture_with_no_warm_up_under_torchs_recipe(kind):
    """torch.cuda.graph captures on torch's own side stream; the first call of the
    problem in this process happens inside the capture."""
    case = Case(kind)
    forget_selections()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        case()
    for _ in range(2):
        case.refresh()
        g.replay()
        case.check("replay")


@pytest.mark.parametrize("kind", KINDS)
def test_replay_after_larger_eager_calls_and_beside_other_streams(kind):
    """A larger problem run eagerly on the capture stream between replays (its scratch is
    bigger), and the same problem eagerly on two other streams while the graph replays."""
    case, big = Case(kind), Case(kind, scale=8)
    stream = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        case()
    others = [Case(kind) for _ in range(2)]
    side = [torch.cuda.Stream() for _ in others]
    for rep in range(3):
        with torch.cuda.stream(stream):  # the replay too: it goes to the current stream
            big.refresh()
            big()
            case.refresh()
            g.replay()
        for other, s in zip(others, side):
            with torch.cuda.stream(s):
                other.refresh()
                other()
        case.check(f"replay {rep}")
        big.check(f"eager {rep}")
        for other in others:
            other.check(f"side stream {rep}")


def test_many_batch_sizes_captured_into_one_pool():
    """One graph per M (a serving engine's batch sizes), all sharing one memory pool."""
    name = first("streamk")
    graphs, cases, pool = [], [], None
    for m in (1, 7, 33, 128, 1000):
        a, b = matrix(m, 4096, "t", BF16), matrix(4096, 1024, "n", BF16)
        d = torch.empty(m, 1024, device="cuda", dtype=BF16)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            pcr.gemm(a, b, None, d, kernel=name)
        pool = g.pool()
        graphs.append(g)
        cases.append((a, b, d))
    for g, (a, _, d) in reversed(list(zip(graphs, cases))):
        a.copy_(torch.rand_like(a, dtype=torch.float32).to(BF16))
        d.fill_(float("nan"))
        g.replay()
    torch.cuda.synchronize()
    for a, b, d in cases:
        r = reference(a, b)
        assert ((d.double() - r).norm() / r.norm()).item() <= 1.6e-2


@pytest.mark.parametrize("streams", ["pooled", "default"])
def test_large_scratch_is_the_calls_own_not_kept_per_stream(streams):
    """Staged operands of ~75 MB on eight streams (or eight calls on torch's default
    stream, the legacy stream whose handle is 0): kept buffers stop at 64 MiB, so larger
    scratch goes back to the library's pool after each call and the next call takes the
    same memory. Device memory grows by about one call's scratch, not eight (kept per
    stream, a sweep of odd-N problems over torch's pooled streams filled the GPU; never
    freed on handle 0, a sweep on the default stream lost one staged output per call)."""
    m, n, k = 8191, 1000, 4097  # K odd: A's rows and B's columns not 16-byte aligned
    a, b = matrix(m, k, "t", BF16), matrix(k, n, "n", BF16)
    d = torch.empty(m, n, device="cuda", dtype=BF16)
    assert pcr.explain(a, b, None, d).problem["staged"], "not staged"
    staged = (m * k + k * n) * 2
    pcr.gemm(a, b, None, d)  # chosen and loaded: what follows allocates only scratch
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    prev = torch.cuda.current_stream()
    pooled = streams == "pooled"
    for s in [torch.cuda.Stream() if pooled else prev for _ in range(8)]:
        s.wait_stream(prev)  # one after another: the same output
        with torch.cuda.stream(s):
            d.fill_(float("nan"))
            pcr.gemm(a, b, None, d)
        prev = s
    torch.cuda.current_stream().wait_stream(prev)
    torch.cuda.synchronize()
    grown = free0 - torch.cuda.mem_get_info()[0]
    assert grown <= 3 * staged, f"{grown / 2**20:.0f} MiB for {staged / 2**20:.0f} MiB of scratch"
    r = reference(a, b)
    assert ((d.double() - r).norm() / r.norm()).item() <= 1.6e-2


def test_a_new_stream_per_call_keeps_memory_bounded():
    """Two hundred calls, each on a stream of its own that is then dropped (cupy's
    ``Stream()`` in a loop), each needing ~42 MB of staged operands (under the 64 MiB a
    stream may keep): at most 64 streams per device keep buffers, later ones' scratch goes
    back to the pool after each call. Device memory grows by at most those 64 buffers and
    what the pool holds on to (1 GiB), not one buffer per stream (8 GB)."""
    cp = pytest.importorskip("cupy")
    m, n, k = 4095, 1000, 4097  # K odd: staged
    a, b = matrix(m, k, "t", BF16), matrix(k, n, "n", BF16)
    d = torch.empty(m, n, device="cuda", dtype=BF16)
    assert pcr.explain(a, b, None, d).problem["staged"], "not staged"
    staged = (m * k + k * n) * 2
    pcr.gemm(a, b, None, d)
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    for _ in range(200):
        s = cp.cuda.Stream(non_blocking=True)
        pcr.gemm(a, b, None, d, stream=s)
        s.synchronize()
        del s
    torch.cuda.synchronize()
    grown = free0 - torch.cuda.mem_get_info()[0]
    bound = 64 * staged * 1.1 + 1.1 * 2**30
    assert grown <= bound, f"{grown / 2**30:.2f} GiB for 200 streams of {staged / 2**20:.0f} MiB"
    r = reference(a, b)
    assert ((d.double() - r).norm() / r.norm()).item() <= 1.6e-2


def test_a_closed_plan_leaves_its_graph_whole():
    """A graph holds no pointer into the plan whose run it captured."""
    case = Case("staged")
    plan = pcr.Gemm(case.a, case.b, None, case.d)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run()
    plan.close()
    del plan
    for _ in range(2):
        case.refresh()
        g.replay()
        case.check("replay after close")


class _Matmul(torch.autograd.Function):
    """d = a @ b with both passes on pcr.gemm (what a framework op of ours does)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        d = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        pcr.gemm(a, b, None, d)
        return d

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga, gb = torch.empty_like(a), torch.empty_like(b)
        pcr.gemm(g, b.t(), None, ga)  # tt
        pcr.gemm(a.t(), g, None, gb)  # nt
        return ga, gb


# "split": the backward's a-gradient has an odd N and 17 MB of K-major weights, so its
# columns split (two launches, the second staged) inside the backward's capture
GRAPHED = {
    "plain": (96, 520, 264),
    "streamk": (96, 4096, 4096),
    "staged": (127, 1000, 4097),
    "split": (127, 2100, 4097),
}


@pytest.mark.parametrize("kind", list(GRAPHED))
def test_make_graphed_callables(kind):
    """torch.cuda.make_graphed_callables warms up on a side stream and captures forward
    and backward into one pool; replays follow new inputs, gradients included."""
    for layout in ("tn", "tt", "nt"):
        require(BF16, layout=layout)
    m, n, k = GRAPHED[kind]
    forget_selections()
    a = matrix(m, k, "t", BF16).requires_grad_()
    b = matrix(k, n, "n", BF16).requires_grad_()
    graphed = torch.cuda.make_graphed_callables(_Matmul.apply, (a, b))
    for _ in range(2):
        with torch.no_grad():
            a.copy_(torch.rand_like(a, dtype=torch.float32) - 0.5)
            b.copy_(torch.rand_like(b, dtype=torch.float32) - 0.5)
        a.grad = b.grad = None
        d = graphed(a, b)
        g = torch.rand_like(d, dtype=torch.float32).to(BF16)
        d.backward(g)
        torch.cuda.synchronize()
        a64, b64, g64 = a.detach().double(), b.detach().double(), g.double()
        for got, want in ((d, a64 @ b64), (a.grad, g64 @ b64.t()), (b.grad, a64.t() @ g64)):
            err = ((got.double() - want).norm() / want.norm()).item()
            assert err <= 1.6e-2, (kind, got.shape, err)


def test_cupy_graph_without_warm_up():
    cp = pytest.importorskip("cupy")
    forget_selections()
    a = cp.asarray(matrix(127, 4097, "t", BF16).float().cpu().numpy()).astype(cp.float16)
    b = cp.asarray(matrix(4097, 1000, "t", BF16).float().cpu().numpy()).astype(cp.float16)
    d = cp.empty((127, 1000), dtype=cp.float16)
    if not any(k.dtype_a == "float16" and k.layout == "tt" for k in runnable_kernels()):
        pytest.skip("no float16 tt kernel of this build runs here")
    stream = cp.cuda.Stream(non_blocking=True)
    gc.collect()  # no earlier test's graph is freed inside this capture (conftest.py)
    with stream:
        stream.begin_capture()
        pcr.gemm(a, b, None, d)
        graph = stream.end_capture()
        d.fill(cp.nan)
        graph.launch(stream)
        stream.synchronize()
    want = a.astype(cp.float64) @ b.astype(cp.float64)
    err = float(cp.linalg.norm(d.astype(cp.float64) - want) / cp.linalg.norm(want))
    assert err <= 1.6e-2


@pytest.mark.parametrize("kind", ["streamk", "staged", "grouped"])
@pytest.mark.parametrize("shared", [True, False], ids=["one stream", "own streams"])
def test_sixteen_threads_match_a_serial_run_bitwise(kind, shared):
    """16 threads calling at once, on one shared stream or each on its own, give the bits
    the same calls give one after another."""
    cases = [Case(kind) for _ in range(16)]
    for c in cases:
        c.refresh()
    for c in cases:
        c()
    torch.cuda.synchronize()
    serial = [[y.clone() for y in (c.d if kind == "grouped" else [c.d])] for c in cases]
    common = torch.cuda.Stream()
    start = threading.Barrier(len(cases))
    errors = []

    def work(c):
        try:
            s = common if shared else torch.cuda.Stream()
            start.wait()
            with torch.cuda.stream(s):
                for _ in range(20):
                    c()
            s.synchronize()
        except Exception as e:  # reported below, with the thread's case
            errors.append(e)

    for c in cases:
        for y in c.d if kind == "grouped" else [c.d]:
            y.fill_(float("nan"))
    torch.cuda.synchronize()
    threads = [threading.Thread(target=work, args=(c,)) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    torch.cuda.synchronize()
    for c, want in zip(cases, serial):
        for y, w in zip(c.d if kind == "grouped" else [c.d], want):
            assert torch.equal(y, w)


class _CaiOnStream:
    """A __cuda_array_interface__ producer (as numba's) whose data is written on `stream`."""

    def __init__(self, tensor, stream):
        self._t = tensor
        self._cai = {**tensor.__cuda_array_interface__, "stream": stream.cuda_stream}

    @property
    def __cuda_array_interface__(self):
        return self._cai


def test_a_cai_producers_stream_is_waited_for():
    """The operand is still being written on its producer's stream (behind a long sleep)
    when the call is made on another stream: the call waits for it, the host does not.
    float16: the interface has no bfloat16 type."""
    require(torch.float16, layout="tn")
    m, n, k = 256, 512, 1024
    src, b = matrix(m, k, "t", torch.float16), matrix(k, n, "n", torch.float16)
    a = torch.zeros_like(src)
    d = torch.empty(m, n, device="cuda", dtype=torch.float16)
    producer = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(100_000_000)
        a.copy_(src)
    pcr.gemm(_CaiOnStream(a, producer), b, None, d)  # on torch's current stream
    torch.cuda.synchronize()
    r = reference(src, b)
    assert ((d.double() - r).norm() / r.norm()).item() <= 1.6e-2


def test_closing_a_plan_other_threads_run_is_an_error_never_a_crash():
    case = Case("plain")
    plan = pcr.Gemm(case.a, case.b, None, case.d)
    outcomes, started = [], threading.Barrier(5)

    def runner():
        started.wait()
        while True:
            try:
                plan.run()
            except pcr.InvalidArgumentError as e:
                outcomes.append(str(e))
                return

    threads = [threading.Thread(target=runner) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait()
    plan.close()
    for t in threads:
        t.join()
    assert outcomes == ["this plan was closed"] * 4


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.soak
def test_a_million_calls_keep_memory_flat():
    """10**6 calls (PCR_SOAK_CALLS) cycling every scratch kind and a bound plan, with a graph
    of all of them captured, replayed and dropped every 50,000 calls: device memory and RSS
    stay flat after the first tenth (no buffer leaks, kept or graph-owned), results right."""
    calls = int(os.environ.get("PCR_SOAK_CALLS", 10**6))
    cases = []
    for kind in KINDS:
        try:
            cases.append(Case(kind))
        except pytest.skip.Exception:
            pass  # a kind this build cannot run
    for case in cases:
        case.refresh()
    plain = cases[0]
    plan = pcr.Gemm(plain.a, plain.b, None, plain.d)
    steps = [*cases, plan.run]
    side = torch.cuda.Stream()
    seen = []
    for i in range(calls):
        steps[i % len(steps)]()
        if i % 50_000 == 49_999:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                for step in steps:
                    step()
            g.replay()
            g.replay()
            del g
        if i % (calls // 10) == calls // 10 - 1:
            torch.cuda.synchronize()
            seen.append((torch.cuda.mem_get_info()[0], rss()))
    free0, rss0 = seen[0]
    for free, rs in seen[1:]:
        assert abs(free - free0) <= 8 << 20, [f for f, _ in seen]
        assert rs - rss0 <= 16 << 20, [r for _, r in seen]
    for case in cases:
        case.refresh()
        case()
        case.check("after the soak")


@pytest.mark.parametrize("kind", ["streamk", "splitk", "staged", "grouped", "moe"])
def test_graphs_captured_on_one_stream_replay_concurrently_bitwise(kind):
    """A serving loop's recipe: each graph captured on one capture stream after an eager
    call there (which leaves the stream a kept buffer that the capture may take over).
    Each graph's scratch is its own, so all of them replaying at once on four streams,
    beside eager calls on the capture stream, give their serial results bit for bit."""
    capture = torch.cuda.Stream()
    cases, graphs = [Case(kind) for _ in range(4)], []
    for case in cases:
        case.refresh()
        with torch.cuda.stream(capture):
            case()
        capture.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=capture):
            case()
        graphs.append(g)
    serial = []
    for case, g in zip(cases, graphs):
        for d in case.outputs():
            d.fill_(float("nan"))
        g.replay()
        case.check("serial replay")
        serial.append([d.clone() for d in case.outputs()])
    eager = Case(kind, scale=2)
    streams = [torch.cuda.Stream() for _ in graphs]
    for rep in range(5):
        for case in cases:
            for d in case.outputs():
                d.fill_(float("nan"))
        torch.cuda.synchronize()
        for g, s in zip(graphs, streams):
            with torch.cuda.stream(s):
                g.replay()
        with torch.cuda.stream(capture):
            for _ in range(3):
                eager()
        torch.cuda.synchronize()
        for i, (case, want) in enumerate(zip(cases, serial)):
            for got, w in zip(case.outputs(), want):
                assert torch.equal(got, w), f"{kind}: graph {i}, round {rep} differs from serial"
    eager.check("eager beside the replays")


def test_memory_stats_see_kept_and_retired_scratch_and_empty_cache_frees():
    """An eager staged call leaves its stream a kept buffer; a capture there takes it over
    (retired: counted under graphs, never freed); empty_cache frees what is kept."""
    case = Case("staged")
    stream = torch.cuda.Stream()
    pcr.empty_cache()
    with torch.cuda.stream(stream):
        case()
    stream.synchronize()
    before = pcr.memory_stats(0)
    assert before["kept"] > 0 and before["kept_streams"] >= 1
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        case()
    after = pcr.memory_stats(0)
    assert after["graphs"] >= before["graphs"] + 1, (before, after)
    assert after["kept"] < before["kept"], (before, after)
    with torch.cuda.stream(stream):
        case()  # the stream keeps a new buffer
    stream.synchronize()
    assert pcr.memory_stats(0)["kept"] > 0
    pcr.empty_cache()
    emptied = pcr.memory_stats(0)
    assert emptied["kept"] == 0 and emptied["graphs"] == after["graphs"]
    case.refresh()
    g.replay()  # the graph's buffer survived empty_cache
    case.check("replay after empty_cache")


def test_a_scratch_limit_of_zero_keeps_nothing():
    case = Case("staged")
    pcr.empty_cache()
    pcr.set_scratch_limit(0)
    try:
        for _ in range(3):
            case.refresh()
            case()
            case.check("limit 0")
        assert pcr.memory_stats(0)["kept"] == 0
    finally:
        pcr.set_scratch_limit(1 << 30)


def test_an_allocation_that_fails_leaves_every_output_as_it_was():
    """Staged operands of a large odd-K problem, with the GPU's memory taken: the call
    fails with a CUDA out-of-memory error before it writes d or zeroes amax."""
    m, n, k = 8191, 8191, 8193  # odd: every operand staged, ~400 MB of scratch
    a, b = matrix(m, k, "t", BF16), matrix(k, n, "n", BF16)
    d = torch.full((m, n), 7.0, device="cuda", dtype=BF16)
    assert pcr.explain(a, b, None, d).problem["staged"], "not staged"
    pcr.empty_cache()
    torch.cuda.synchronize()
    hog = torch.empty(torch.cuda.mem_get_info()[0] - (64 << 20), dtype=torch.uint8, device="cuda")
    try:
        with pytest.raises(pcr.CudaError, match="memory"):
            pcr.gemm(a, b, d, d, 1.0, 1.0)
    finally:
        del hog
    torch.cuda.synchronize()
    assert bool((d == 7.0).all()), "d was written before the failed allocation"
