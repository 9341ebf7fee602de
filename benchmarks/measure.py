"""Running cases: operands, the correctness check, timing against the peers, one record each.

A case never stops the run: whatever fails (a peer, a kernel, our own call) is written
into its record and the next case starts.
"""

from __future__ import annotations

import itertools
import math

from . import timing
from .peers import Unsupported, dequant_scales
from .shapes import DTYPES, GROUPS, bias_activation, expert_rows, keeps_pre_activation
from .timing import Contestant

OURS = "pycutlass_rt"
#: relative (Frobenius) error allowed against the fp32 reference, by output dtype: a few
#: units of the output's rounding, which dominates at these K
TOLERANCE = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-4, "int32": 0.0}
TF32_TOLERANCE = 5e-3  # inputs rounded to 10 mantissa bits
#: operand sets may use at most this fraction of the free GPU memory
MEMORY_FRACTION = 0.5


def tolerance(dtype_label: str) -> float:
    spec = DTYPES[dtype_label]
    return TF32_TOLERANCE if dtype_label == "tf32" else TOLERANCE[spec.torch_d]


def set_bytes(case) -> int:
    """Bytes of one operand set (a, b, c when beta != 0 or it holds the pre-activation,
    d), padding included."""
    spec, p = DTYPES[case.dtype], case.pad
    if case.experts:  # x (T x K), w (E x K x N), out (T x N)
        return (
            case.m * case.k + case.experts * case.k * case.n
        ) * spec.bytes_a + case.m * case.n * spec.bytes_d
    ab = (case.m * (case.k + p) if case.layout[0] == "t" else case.k * (case.m + p)) + (
        case.k * (case.n + p) if case.layout[1] == "t" else case.n * (case.k + p)
    )
    cd = case.m * (case.n + p) * (2 if case.beta or keeps_pre_activation(case.epilogue) else 1)
    return (ab * spec.bytes_a + cd * spec.bytes_d) * case.batch


def estimated_us(case) -> float:
    spec = DTYPES[case.dtype]
    return case.batch * timing.estimated_us(
        case.m, case.n, case.k, spec.bytes_a, spec.bytes_d, case.beta
    )


def base_record(case) -> dict:
    rec = {
        "group": case.group,
        "dtype": case.dtype,
        "label": case.label,
        "m": case.m,
        "n": case.n,
        "k": case.k,
        "layout": case.layout,
        "pad": case.pad,
        "beta": case.beta,
        "epilogue": case.epilogue,
        "flops": case.flops,
    }
    if case.skip:
        rec.update(status="skipped", reason=case.skip)
    return rec


def _err(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


class Bench:
    """Runs cases on one GPU through a framework adapter (``_backends.Torch``/``Cupy``).

    Args:
        fw: the framework adapter.
        pcr: the pycutlass_rt module.
        peers: peer objects (``peers.TorchBlas``, ``peers.CutlassPython``, ...).
        settings: a ``timing.Settings``.
        l2_bytes: the GPU's L2 size (operand sets are rotated over ``l2_factor`` x it).
        free_bytes: callable giving the free GPU memory, or None.
    """

    bias = None  # the current case's bias vector (bias_<act> epilogues)

    def __init__(self, fw, pcr, peers, settings, l2_bytes, free_bytes=None):
        self.fw, self.pcr, self.peers, self.settings = fw, pcr, peers, settings
        self.l2_bytes = l2_bytes
        self.free_bytes = free_bytes
        self._kwargs = {}  # dtype label -> _dtype_kwargs (its scale tensors made once)

    # -- operands ---------------------------------------------------------------------
    def operands(self, case) -> list:
        """Operand sets ``(a, b, c, d)`` covering ``l2_factor`` x L2 (c None at beta 0);
        a ``bias_<act>`` case also gets ``self.bias``, one (N,) vector for every set."""
        per_set = set_bytes(case)
        count = timing.set_count(per_set, self.l2_bytes, self.settings)
        if self.free_bytes is not None:
            room = int(MEMORY_FRACTION * self.free_bytes() // max(per_set, 1))
            if room < 1:
                raise MemoryError(f"one operand set needs {per_set / 2**30:.1f} GiB")
            count = min(count, max(room, 1))
        fw, spec, lay, pad = self.fw, DTYPES[case.dtype], case.layout, case.pad
        self.bias = (
            fw.operand(1, case.n, "t", spec.torch_d)[0] if bias_activation(case.epilogue) else None
        )
        sets = []
        if case.experts:
            return [self._moe_set(case) for _ in range(count)]
        if case.batch > 1:  # row-major batches (L * rows, cols) viewed as (L, rows, cols)
            L = case.batch

            def batched(rows, cols, dt, fill=True):
                return fw.operand(L * rows, cols, "t", dt, fill=fill).reshape(L, rows, cols)

            for _ in range(count):
                sets.append(
                    (
                        batched(case.m, case.k, spec.torch_a),
                        batched(case.k, case.n, spec.torch_a),
                        batched(case.m, case.n, spec.torch_d) if case.beta else None,
                        batched(case.m, case.n, spec.torch_d, fill=False),
                    )
                )
            return sets
        for _ in range(count):
            a = fw.operand(case.m, case.k, lay[0], spec.torch_a, pad)
            b = fw.operand(case.k, case.n, lay[1], spec.torch_a, pad)
            if keeps_pre_activation(case.epilogue):  # an output: the pre-activation
                c = fw.operand(case.m, case.n, "t", spec.torch_d, pad, fill=False)
            else:
                c = fw.operand(case.m, case.n, "t", spec.torch_d, pad) if case.beta else None
            d = fw.operand(case.m, case.n, "t", spec.torch_d, pad, fill=False)
            sets.append((a, b, c, d))
        return sets

    def _moe_set(self, case):
        """(x, w, end offsets, out): w (E, K, N) viewed from (E, N, K) Linear weights."""
        fw, spec = self.fw, DTYPES[case.dtype]
        x = fw.operand(case.m, case.k, "t", spec.torch_a)
        w = (
            fw.operand(case.experts * case.n, case.k, "t", spec.torch_a)
            .reshape(case.experts, case.n, case.k)
            .swapaxes(1, 2)
        )
        ends = list(itertools.accumulate(expert_rows(case.m, case.experts)))
        out = fw.operand(case.m, case.n, "t", spec.torch_d, fill=False)
        return x, w, fw.int_vector(ends), out

    def check(self, case, fn, s) -> dict:
        """Runs ``fn(*s)`` once on a NaN-filled ``d`` and compares with an fp32 reference."""
        a, b, c, d = s
        for out in (d, c) if keeps_pre_activation(case.epilogue) else (d,):
            self.fw.poison(out)
        fn(a, b, c, d)
        self.fw.sync()
        if case.experts:  # expert by expert: the worst one counts
            err, start = 0.0, 0
            for e, rows in enumerate(expert_rows(case.m, case.experts)):
                if rows:
                    ref = self.fw.reference(a[start : start + rows], b[e])
                    err = max(err, self.fw.rel_err(d[start : start + rows], ref))
                start += rows
        else:
            ref = self.fw.reference(
                a, b, c, 1.0, case.beta, self.bias, bias_activation(case.epilogue)
            )
            err = self.fw.rel_err(d, ref)
            if keeps_pre_activation(case.epilogue):  # c holds the pre-activation
                z = self.fw.reference(a, b, None, 1.0, 0.0, self.bias)
                err = max(err, self.fw.rel_err(c, z))
        tol = tolerance(case.dtype)
        finite = self.fw.is_finite(d)
        return {
            "rel_err": err,
            "tol": tol,
            "finite": finite,
            "ok": bool(finite and math.isfinite(err) and err <= tol),
        }

    def _ours(self, case, kernel=None):
        if case.experts:
            moe = self.pcr.moe_gemm
            return lambda x, w, offsets, out: moe(x, w, offsets, out, kernel=kernel)
        gemm = self.pcr.gemm
        c_is_aux, beta, kw = self._arguments(case)
        if c_is_aux:
            return lambda a, b, c, d: gemm(a, b, None, d, 1.0, 0.0, kernel=kernel, aux=c, **kw)
        if kernel is None and not kw:
            return lambda a, b, c, d: gemm(a, b, c, d, 1.0, beta)
        return lambda a, b, c, d: gemm(a, b, c, d, 1.0, beta, kernel=kernel, **kw)

    def _arguments(self, case) -> tuple:
        """How an operand set (a, b, c, d) of a case becomes pycutlass_rt.gemm's call (or
        explain's): whether c is the pre-activation output ``aux`` rather than C, beta, and
        the keyword arguments besides ``kernel``."""
        act = bias_activation(case.epilogue)
        if act:
            aux = keeps_pre_activation(case.epilogue)
            return aux, 0.0 if aux else case.beta, {"bias": self.bias, "activation": act}
        return False, case.beta, self._dtype_kwargs(case)

    def _dtype_kwargs(self, case) -> dict:
        """The arguments of pycutlass_rt.gemm a case's dtype needs: math=, the scales (GPU
        scalars, made once per dtype and shared by every case and candidate kernel)."""
        if case.dtype not in self._kwargs:
            dt = DTYPES[case.dtype]
            kw = {"math": dt.math} if dt.math else {}
            scales = dequant_scales(case, self.fw)
            if scales:
                kw.update(scale_a=scales[0], scale_b=scales[1])
            self._kwargs[case.dtype] = kw
        return self._kwargs[case.dtype]

    @staticmethod
    def _on_sets(fn, sets):
        return lambda i: fn(*sets[i])

    # -- one case ---------------------------------------------------------------------
    def run(self, case) -> dict:
        """The record of one case (never raises, except KeyboardInterrupt)."""
        rec = base_record(case)
        if case.skip:
            return rec
        rec["status"] = "ok"
        sets = None
        try:
            # where the GPU's memory is before the case: a run that fails out of memory
            # shows which earlier cases left it held, and by whom
            rec["gpu_gib"] = self.fw.memory_gib()
            sets = self.operands(case)
            rec["operand_sets"] = len(sets)
            kind = GROUPS[case.group].kind
            {
                "compare": self._compare,
                "host": self._host,
                "regret": self._regret,
                "grouped": self._grouped,
            }[kind](case, sets, rec)
        except Exception as e:  # noqa: BLE001 - recorded; the run goes on
            rec.update(status="error", reason=_err(e))
        finally:
            del sets
            try:
                self.fw.sync()
                self.fw.free_memory()
            except Exception as e:  # noqa: BLE001 - e.g. a sticky CUDA error
                rec.setdefault("reason", _err(e))
        return rec

    def _peer_contestants(self, case, sets, rec, only=None) -> list:
        out = []
        for peer in self.peers:
            if only and peer.name not in only:
                continue
            try:
                fn = peer.make(case, self.fw, self.bias)
                if hasattr(peer, "first_call"):
                    rec.setdefault("first_call_s", {})[peer.name] = peer.first_call(
                        case, fn, sets[0], self.fw
                    )
                if peer.name == "cublas":
                    rec["check"]["peer_rel_err"] = self.check(case, fn, sets[0])["rel_err"]
            except Unsupported as e:
                rec.setdefault("peer_skipped", {})[peer.name] = str(e)
                continue
            except Exception as e:  # noqa: BLE001 - a peer's failure is only recorded
                rec.setdefault("peer_errors", {})[peer.name] = _err(e)
                continue
            out.append(
                Contestant(
                    peer.name,
                    self._on_sets(fn, sets),
                    graphable=peer.graphable,
                    always_graph=peer.always_graph,
                    drain=peer.drain,
                )
            )
        return out

    def _compare(self, case, sets, rec):
        a, b, c, d = sets[0]
        act = bias_activation(case.epilogue)
        kw = dict(bias=self.bias, activation=act, **self._dtype_kwargs(case))
        if keeps_pre_activation(case.epilogue):
            c, kw["aux"] = None, c
        rec["kernel"] = self.pcr.explain(a, b, c, d, 1.0, case.beta, **kw).kernel
        self._compare_timed(case, sets, rec, self._ours(case))

    def _compare_timed(self, case, sets, rec, ours_fn):
        """Checks ``ours_fn``, then times it against every peer, interleaved."""
        rec["check"] = self.check(case, ours_fn, sets[0])
        contestants = [Contestant(OURS, self._on_sets(ours_fn, sets))]
        contestants += self._peer_contestants(case, sets, rec)
        alive = timing.warm_up(self.fw, contestants, len(sets), self.settings)
        est = estimated_us(case)
        graph = timing.use_graph(est)
        rec.update(estimated_us=est, method="graph" if graph else "events")
        dev = timing.device_times(self.fw, alive, len(sets), self.settings, graph)
        self._note_errors(contestants, rec)
        if OURS not in dev:
            raise RuntimeError(rec.get("peer_errors", {}).get(OURS, "pycutlass_rt failed"))
        rec["device_us"] = {name: s.as_dict() for name, s in dev.items()}
        rec["tflops"] = {name: case.flops / s.median_us / 1e6 for name, s in dev.items()}
        ours = dev[OURS]
        rec["ratio"] = {}
        for name, s in dev.items():
            if name == OURS:
                continue
            if timing.comparable(ours.method, s.method, graph):
                rec["ratio"][name] = s.median_us / ours.median_us
            else:
                rec.setdefault("ratio_skipped", {})[name] = (
                    f"not comparable: ours timed by {ours.method}, {name} by {s.method}"
                )
        if graph:  # small problems: the host cost per call is what users feel
            host = timing.host_times(self.fw, alive, len(sets), self.settings)
            self._note_errors(contestants, rec)
            rec["host_us"] = {name: s.as_dict() for name, s in host.items()}

    def _grouped(self, case, sets, rec):
        """Group J: pcr.moe_gemm against the framework's ways to run every expert."""
        rec["expert_rows"] = expert_rows(case.m, case.experts)
        self._compare_timed(case, sets, rec, self._ours(case))

    @staticmethod
    def _note_errors(contestants, rec):
        for c in contestants:
            if c.errors:
                rec.setdefault("peer_errors", {})[c.name] = "; ".join(
                    f"{k}: {v}" for k, v in c.errors.items()
                )

    def _host(self, case, sets, rec):
        """Group G: per-call host time of each way to issue the same GEMM."""
        fw, pcr = self.fw, self.pcr
        a, b, c, d = sets[0]
        rec["kernel"] = pcr.explain(a, b, c, d).kernel
        ours_fn = self._ours(case)
        rec["check"] = self.check(case, ours_fn, sets[0])
        blas = next((p for p in self.peers if p.name == "cublas"), None)
        blas_fn = blas.make(case, fw, self.bias) if blas else None
        blas_name = blas.via.split(" ")[0] if blas else None
        eager = [Contestant("pcr.gemm", self._on_sets(ours_fn, sets))]
        graphs = [("graph replay: pcr.gemm", lambda: ours_fn(a, b, c, d))]
        if blas_fn:
            eager.append(Contestant(blas_name, self._on_sets(blas_fn, sets)))
            graphs.append(("graph replay: cublas", lambda: blas_fn(a, b, c, d)))
        variants = list(eager)
        if hasattr(pcr, "Gemm"):
            plan = pcr.Gemm(a, b, c, d)
            rec["plan_kernel"] = getattr(plan, "kernel", None)
            variants += [
                Contestant("plan.run()", lambda i: plan.run()),
                Contestant("plan(a, b, c, d)", self._on_sets(plan, sets)),
            ]
            graphs.append(("graph replay: plan.run()", lambda: plan.run()))
        else:
            rec["plan"] = "not available"
        for name, fn in graphs:
            try:
                replay = fw.capture(fn)
                variants.append(Contestant(name, lambda i, r=replay: r()))
            except Exception as e:  # noqa: BLE001
                rec.setdefault("peer_errors", {})[name] = _err(e)
        for x in self._peer_contestants(case, sets, rec, only=("cutlass",)):
            variants.append(Contestant("cutlass plan.run", x.fn, drain=x.drain))
        variants = timing.warm_up(fw, variants, len(sets), self.settings)
        host = timing.host_times(fw, variants, len(sets), self.settings)
        self._note_errors(variants, rec)
        rec["host_us"] = {name: s.as_dict() for name, s in host.items()}
        eager_names = {c.name for c in eager}
        dev = timing.device_times(
            fw,
            [v for v in variants if v.name in eager_names],
            len(sets),
            self.settings,
            timing.use_graph(estimated_us(case)),
        )
        rec["device_us"] = {name: s.as_dict() for name, s in dev.items()}
        med = {name: s.median_us for name, s in host.items()}
        pairs = {
            "cublas": ("pcr.gemm", blas_name),
            "cublas|plan.run()": ("plan.run()", blas_name),
            "cublas|graph": ("graph replay: pcr.gemm", "graph replay: cublas"),
            "cutlass": ("pcr.gemm", "cutlass plan.run"),
        }
        rec["ratio"] = {
            key: med[peer] / med[ours]
            for key, (ours, peer) in pairs.items()
            if ours in med and peer in med
        }

    def _regret(self, case, sets, rec):
        """Groups H, L, N: every kernel that accepts the problem, forced, against the chosen
        one."""
        a, b, c, d = sets[0]
        c_is_aux, beta, kw = self._arguments(case)
        if c_is_aux:
            ex = self.pcr.explain(a, b, None, d, 1.0, 0.0, aux=c, **kw)
        else:
            ex = self.pcr.explain(a, b, c, d, 1.0, beta, **kw)
        names = [name for name, _ in ex.ranked]
        rec.update(chosen=ex.kernel, candidates=names)
        if not names:
            raise RuntimeError(f"no kernel accepts this problem: {ex.reason}")
        contestants, checks = [], {}
        for name in names:
            fn = self._ours(case, kernel=name)
            try:
                checks[name] = self.check(case, fn, sets[0])
            except Exception as e:  # noqa: BLE001
                checks[name] = {"ok": False, "error": _err(e)}
                continue
            contestants.append(Contestant(name, self._on_sets(fn, sets)))
        rec["check"] = checks.get(ex.kernel)
        rec["kernel_checks"] = checks
        alive = timing.warm_up(self.fw, contestants, len(sets), self.settings)
        graph = timing.use_graph(estimated_us(case))
        rec["method"] = "graph" if graph else "events"
        dev = timing.device_times(self.fw, alive, len(sets), self.settings, graph)
        self._note_errors(contestants, rec)
        rec["kernels"] = {name: s.as_dict() for name, s in dev.items()}
        if ex.kernel not in dev:
            raise RuntimeError(f"the chosen kernel {ex.kernel} could not be timed")
        best = min(dev, key=lambda name: dev[name].median_us)
        rec.update(best=best, best_over_chosen=dev[best].median_us / dev[ex.kernel].median_us)
