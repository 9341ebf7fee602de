"""Problems without work, forced through every kernel of one arch family by name.

Run by tests/gpu/test_degenerate.py in one subprocess per family, so that a crash (CUTLASS
host code dividing by an empty extent once killed the process with SIGFPE) is reported as
a failure naming its kernel and case instead of ending the test run::

    python tests/gpu/degenerate_cases.py 90          # every kernel of the sm90 family
    python tests/gpu/degenerate_cases.py selected    # no kernel named, both operands row-major

For each kernel: ``gemm``, a bound plan (run, then rebound to fresh tensors) and
``explain``, over empty batches, M, N or K of 0 alone and together, and a batch of 1
broadcast against an empty batch; with the kernel's epilogue (bias and ReLU, per-row and
per-column scale vectors, per-tensor scale tensors). Grouped kernels take ``grouped_gemm``
with no group, only empty groups and empty groups among real ones, and ``moe_gemm`` with
no token, no expert, every expert empty, some experts empty and K = 0. Each result is
checked exactly (integer-valued data): an empty output stays empty, K = 0 gives
``act(beta * c + bias)`` and leaves rows no expert covers untouched. ``selected`` runs the
same problems with no kernel named, in a layout most dtypes have no kernel for (no kernel
runs, so none is chosen: ``explain`` and plans name none), records an empty batch with
``tune`` (nothing reaches selection, so nothing is tuned) and asks it for M = 0.

Prints ``start <kernel> <case>`` before each case (flushed) and, per kernel, ``ok <kernel>``
or ``FAIL <kernel> <case>: <why>``; exits 1 if any case failed.
"""

import functools
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZE = 16  # a multiple of every kernel's alignment in elements (int8 and fp8 take 16)
#: (L, M, N, K): L None for 2-D operands. Every combination with an empty extent, over
#: 2-D operands, an empty batch and a batch of 3.
SHAPES = [
    (L, *mnk)
    for L in (None, 0, 3)
    for mnk in itertools.product((0, SIZE), repeat=3)
    if L == 0 or 0 in mnk
]


def main(which: str) -> int:
    import torch
    from helpers import runnable_kernels, torch_dtype

    import pycutlass_rt as pcr

    def ints(shape, dtype):
        """Integers in [-4, 4]: every sum and product below is exact in every dtype."""
        return torch.randint(-4, 5, shape, device="cuda").float().to(dtype)

    def matrix(L, rows, cols, layout, dtype):
        inner = (rows, cols) if layout == "t" else (cols, rows)
        x = ints(inner if L is None else (L, *inner), dtype)
        return x if layout == "t" else x.transpose(-1, -2)

    def operands(k, L, m, n, kk, la="t", lb="n", shared_a=False):
        """a, b, c, d, alpha, beta and the gemm keywords of kernel k's kind of problem."""
        in_dt, out_dt = torch_dtype(k.dtype_a), torch_dtype(k.dtype_d)
        a = matrix(1 if shared_a else L, m, kk, la, in_dt)
        b = matrix(L, kk, n, lb, in_dt)
        c = matrix(L, m, n, "t", out_dt)
        d = torch.full(c.shape, -77, device="cuda").to(out_dt)
        kw = {"math": "tf32"} if k.dtype_a == "tfloat32" else {}
        if k.epilogue != "linear":
            kw.update(bias=ints((n,), out_dt), activation="relu")
        if k.epilogue == "scaled":
            kw.update(scale_a=torch.ones(m, device="cuda"), scale_b=torch.ones(n, device="cuda"))
        elif k.tensor_scales:
            kw.update(scale_a=torch.ones(1, device="cuda"), scale_b=torch.ones(1, device="cuda"))
        return a, b, c, d, 1.0, -1.0, kw

    def expected(a, c, d, beta, kw):
        """What d must hold: K = 0 (with work left) gives act(beta * c + bias)."""
        want = d.double().clone()
        if d.numel() and a.shape[-1] == 0:
            want = beta * c.double().expand(d.shape)
            if "bias" in kw:
                want = torch.relu(want + kw["bias"].double())
        return want

    def same(got, want):
        torch.cuda.synchronize()
        if got.shape != want.shape or not torch.equal(got.double(), want):
            raise AssertionError(
                f"wrong result: got {got.double().flatten()[:8].tolist()}, "
                f"want {want.flatten()[:8].tolist()}"
            )

    def gemm_cases(k, name, layout=None):
        la, lb = layout or k.layout
        for L, m, n, kk in SHAPES:
            yield (
                f"gemm L={L} {m}x{n}x{kk}",
                functools.partial(run_gemm, k, name, L, m, n, kk, la, lb),
            )
        yield (
            "batch 1 against an empty batch",
            lambda: run_gemm(k, name, 0, SIZE, SIZE, SIZE, la, lb, shared_a=True),
        )
        yield "empty batch against d of one matrix", lambda: mismatch(k, name, la, lb)

    def run_gemm(k, name, L, m, n, kk, la, lb, shared_a=False):
        a, b, c, d, alpha, beta, kw = operands(k, L, m, n, kk, la, lb, shared_a)
        want = expected(a, c, d, beta, kw)
        assert pcr.gemm(a, b, c, d, alpha, beta, kernel=name, **kw) is d
        same(d, want)
        ex = pcr.explain(a, b, c, d, alpha, beta, kernel=name, **kw)
        assert ex.kernel == name, ex.reason  # None when selected: no kernel runs
        plan = pcr.Gemm(a, b, c, d, alpha, beta, kernel=name, **kw)
        assert plan.kernel == name, plan.kernel
        d.fill_(-77)
        plan.run()
        same(d, want)
        a, b, c, d, alpha, beta, kw = operands(k, L, m, n, kk, la, lb, shared_a)
        plan(a, b, c, d, **{x: kw[x] for x in ("bias", "scale_a", "scale_b") if x in kw})
        same(d, expected(a, c, d, beta, kw))
        plan.close()

    def mismatch(k, name, la, lb):
        a, b, _, d, alpha, _, kw = operands(k, 0, SIZE, SIZE, SIZE, la, lb)
        d = d.new_full((SIZE, SIZE), -77)
        try:
            pcr.gemm(a, b, None, d, alpha, 0.0, kernel=name, **kw)
        except pcr.InvalidArgumentError as e:
            assert "d holds 1 matrices" in str(e), e
        else:
            raise AssertionError("an empty batch against d of one matrix was accepted")

    def grouped_cases(k, name):
        in_dt, out_dt = torch_dtype(k.dtype_a), torch_dtype(k.dtype_d)
        la, lb = k.layout

        def group(m, n, kk):
            return (
                matrix(None, m, kk, la, in_dt),
                matrix(None, kk, n, lb, in_dt),
                matrix(None, m, n, "t", out_dt),
                torch.full((m, n), -77, device="cuda").to(out_dt),
            )

        def run_groups(shapes):
            groups = [group(*s) for s in shapes]
            As, Bs, Cs, Ds = (list(x) for x in zip(*groups)) if groups else ([],) * 4
            wants = [a.double() @ b.double() - c.double() for a, b, c, _ in groups]
            pcr.grouped_gemm(As, Bs, Cs, Ds, 1.0, -1.0, kernel=name)
            for d, want in zip(Ds, wants):
                same(d, want)

        def run_moe(T, E, kk, offsets):
            x = matrix(None, T, kk, "t", in_dt)
            w = matrix(E, kk, SIZE, lb, in_dt)
            out = torch.full((T, SIZE), -77, device="cuda").to(out_dt)
            want = out.double().clone()
            for e in range(E):  # offsets: E + 1 boundaries
                rows = slice(offsets[e], offsets[e + 1])
                want[rows] = x[rows].double() @ w[e].double()
            off = torch.tensor(offsets, device="cuda", dtype=torch.int32)
            assert pcr.moe_gemm(x, w, off, out, kernel=name) is out
            same(out, want)

        yield "grouped: no group", lambda: run_groups([])
        yield (
            "grouped: only empty groups",
            lambda: run_groups([(0, SIZE, SIZE), (SIZE, 0, SIZE), (0, 0, 0)]),
        )
        yield (
            "grouped: empty groups among real ones",
            lambda: run_groups(
                [(0, SIZE, SIZE), (SIZE, SIZE, SIZE), (SIZE, SIZE, 0), (SIZE, 0, SIZE)]
            ),
        )
        yield "moe: no token", lambda: run_moe(0, 4, SIZE, [0, 0, 0, 0, 0])
        yield "moe: no expert", lambda: run_moe(SIZE, 0, SIZE, [0])
        if la == "t":  # moe_gemm reads x row-major: kernels of column-major A never run it
            yield "moe: every expert empty", lambda: run_moe(SIZE, 3, SIZE, [0, 0, 0, 0])
            yield (
                "moe: some experts empty",
                lambda: run_moe(2 * SIZE, 4, SIZE, [0, 0, SIZE, SIZE, 2 * SIZE - 3]),
            )
        yield "moe: K = 0", lambda: run_moe(2 * SIZE, 3, 0, [0, 5, 5, SIZE])

    def tune_cases(k):
        def recorded():
            a, b, c, d, alpha, beta, kw = operands(k, 0, SIZE, SIZE, SIZE)
            # an empty problem needs no kernel, so it never reaches selection: nothing to tune
            result = pcr.tune(lambda: pcr.gemm(a, b, c, d, alpha, beta, **kw), cache=False)
            assert not list(result), result

        def shape():
            try:
                pcr.tune([(0, SIZE, SIZE)], cache=False)
            except pcr.InvalidArgumentError:
                return
            raise AssertionError("tune accepted M = 0")

        yield "tune: a recorded empty batch", recorded
        yield "tune: a shape with M = 0", shape

    if which == "selected":  # one kernel of each dtype pair and epilogue, selection deciding
        kinds = runnable_kernels(lambda k: (k.dtype_a, k.dtype_d, k.epilogue, k.tensor_scales))
        # both operands row-major: a layout most dtypes have no kernel for, which an
        # empty problem (no kernel runs) must not care about
        todo = [(k, None, gemm_cases(k, None, "tt")) for k in kinds]
        todo += [
            (k, None, grouped_cases(k, None))
            for k in runnable_kernels(lambda k: (k.dtype_a, k.dtype_d, k.layout), grouped=True)
        ]
        todo += [(k, None, tune_cases(k)) for k in kinds[:1]]
    else:
        todo = [
            (k, k.name, (grouped_cases if k.grouped else gemm_cases)(k, k.name))
            for grouped in (False, True)
            for k in runnable_kernels(grouped=grouped)
            if str(k.family) == which
        ]
    failed = 0
    for k, name, cases in todo:
        label = name or f"selected({k.dtype_a}->{k.dtype_d},{k.epilogue},{k.layout})"
        bad = None
        for case, run in cases:
            print(f"start {label} {case}", flush=True)
            try:
                run()
            except Exception as e:  # noqa: BLE001 - every failure is reported with its case
                bad = f"{case}: {type(e).__name__}: {e}"
                break
        failed += bad is not None
        print(f"FAIL {label} {bad}" if bad else f"ok {label}", flush=True)
    print(f"{len(todo) - failed} kernels passed, {failed} failed", flush=True)
    return 1 if failed or not todo else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
