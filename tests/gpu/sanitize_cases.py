"""The calls tests/gpu/test_sanitizer.py runs under compute-sanitizer.

One kernel of every family, split kind, epilogue and alignment class the build runs here,
at sizes that end inside a tile, plus the runtime's own paths: C forms, K = 0, a shifted
view, a staged (aligned-scratch) problem, a bound plan, a batch, a bias with an
activation, and grouped / MoE GEMMs. Exits 1 if a result is wrong, so the sanitizer run
also checks the answers.

    python tests/gpu/sanitize_cases.py   # what the test runs, without the sanitizer
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    import torch
    from helpers import empty, matrix, runnable_kernels, torch_dtype

    import pycutlass_rt as pcr

    failures = []
    # Outputs start as NaN: an element a kernel leaves unwritten fails the check, and
    # initcheck, which does not count TMA (bulk tensor) stores as writes, sees D written.

    def check(what, a, b, c, d, alpha=1.0, beta=0.0, plan=False, **kw):
        sa, sb = kw.get("scale_a"), kw.get("scale_b")  # dequantization: (sa * a) @ (b * sb)
        want = alpha * (
            (a.double() * (1 if sa is None else sa.double()))
            @ (b.double() * (1 if sb is None else sb.double()))
        )  # c may be d
        if c is not None and beta:
            want += beta * c.double()
        if kw.get("bias") is not None:
            want = torch.relu(want + kw["bias"].double())  # the cases below pair it with relu
        if plan:
            pcr.Gemm(a, b, c, d, alpha, beta, **kw).run()
        else:
            pcr.gemm(a, b, c, d, alpha, beta, **kw)
        torch.cuda.synchronize()
        err = ((d.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
        print(f"{what}: relative error {err:.1e}", flush=True)
        if not err < 1.6e-2:
            failures.append(what)

    bf = torch.bfloat16

    # one kernel of every family, input dtype, schedule, split, swap and alignment class
    for k in runnable_kernels(
        lambda k: (k.family, k.dtype_a, k.schedule, k.split, k.swap_ab, k.align[0] == 1, k.epilogue)
    ):
        if k.dtype_d == "int8":
            continue  # saturating outputs: tests/gpu/test_dtypes.py checks them
        tm, tn, tk = k.tile
        al = k.align[0]
        m, n, kk = tm + 3, -(-(tn + 5) // al) * al, -(-(2 * tk + 1) // al) * al
        if k.split != "none":  # few tiles and deep K: the split and its fix-up run
            kk = 8 * tk
        ta, tb, td = (torch_dtype(x) for x in (k.dtype_a, k.dtype_b, k.dtype_d))
        a, b = matrix(m, kk, k.layout[0], ta), matrix(kk, n, k.layout[1], tb)
        extra = {"math": "tf32"} if k.dtype_a == "tfloat32" else {}
        if k.epilogue != "linear":
            extra.update(bias=matrix(1, n, "t", td)[0], activation="relu")
        if k.epilogue == "scaled":
            extra.update(
                scale_a=torch.rand(m, 1, device="cuda") + 0.5,
                scale_b=torch.rand(1, n, device="cuda") + 0.5,
            )
        alpha, beta = (1.5, -0.5) if td.is_floating_point else (2.0, -1.0)
        check(
            k.name,
            a,
            b,
            matrix(m, n, "t", td),
            empty(m, n, td),
            alpha,
            beta,
            kernel=k.name,
            **extra,
        )

    check(
        "odd sizes (alignment 1)",
        matrix(67, 129, "t", bf),
        matrix(129, 65, "n", bf),
        None,
        empty(67, 65),
    )
    check(
        "shifted view",
        matrix(96, 72, "t", bf, offset=1),
        matrix(72, 40, "t", bf),
        None,
        empty(96, 40),
    )
    check(
        "k = 0",
        matrix(80, 0, "t", bf),
        matrix(0, 48, "t", bf),
        matrix(80, 48, "n", bf),
        empty(80, 48),
        1.0,
        2.0,
    )
    d = matrix(130, 136, "t", bf)
    check("c is d", matrix(130, 264, "t", bf), matrix(264, 136, "t", bf), d, d, 1.0, 1.0)
    a, b = matrix(257, 1025, "t", bf), matrix(1025, 520, "n", bf)  # 2^27 MACs, odd K
    assert pcr.explain(a, b, None, empty(257, 520)).problem["staged"], "not staged"
    check("staged", a, b, None, empty(257, 520))
    check(
        "plan",
        matrix(200, 136, "n", bf),
        matrix(136, 264, "t", bf),
        None,
        empty(200, 264),
        plan=True,
    )

    check(
        "batch",
        matrix(3 * 70, 72, "t", bf).reshape(3, 70, 72),
        matrix(72, 48, "n", bf),
        None,
        torch.full((3, 70, 48), float("nan"), device="cuda", dtype=bf),
    )
    check(
        "bias per row + relu",
        matrix(90, 64, "t", bf),
        matrix(64, 56, "t", bf),
        None,
        empty(90, 56),
        bias=matrix(90, 1, "t", bf),
        activation="relu",
    )

    if any(k.grouped for k in pcr.kernels()):
        sizes = [(0, 40, 64), (1, 8, 8), (70, 48, 96), (130, 136, 64)]
        As = [matrix(m, k, "t", bf) for m, n, k in sizes]
        Bs = [matrix(k, n, "t", bf) for m, n, k in sizes]
        Ds = [empty(m, n) for m, n, k in sizes]
        pcr.grouped_gemm(As, Bs, None, Ds)
        x, w = matrix(300, 64, "t", bf), matrix(4 * 64, 40, "t", bf).reshape(4, 64, 40)
        out = empty(300, 40)
        ends = torch.tensor([100, 100, 250, 300], device="cuda", dtype=torch.int32)
        pcr.moe_gemm(x, w, ends, out)
        torch.cuda.synchronize()
        starts = [0, 100, 100, 250]
        pairs = [(d, a.double() @ b.double()) for a, b, d in zip(As, Bs, Ds)] + [
            (out[s:e], x[s:e].double() @ w[i].double())
            for i, (s, e) in enumerate(zip(starts, ends.tolist()))
        ]
        for i, (got, want) in enumerate(pairs):
            if got.numel() and not (
                (got.double() - want).norm() <= 1.6e-2 * want.norm().clamp_min(1e-30)
            ):
                failures.append(f"grouped case {i}")
        print("grouped and moe: checked", flush=True)

    if failures:
        print("wrong results:", ", ".join(failures))
        return 1
    print("all results match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
