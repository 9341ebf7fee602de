"""Device and host time of competing GEMM callables, measured interleaved (A B A B ...).

A contestant is a callable ``fn(i)`` that launches one GEMM on operand set ``i`` (sets are
rotated so that consecutive calls never read from L2). Device time is taken with CUDA
events around many back-to-back calls, or by replaying a CUDA graph of those calls for
problems so small that per-call launch overhead would otherwise be measured. Host time
is the wall time per call of a loop that never synchronizes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

#: Problems estimated below this many microseconds of device time are timed by graph replay:
#: 1024^3 (~3 us on an H200) and decode shapes sit well below it, and the 12-19 us of
#: host time per eager call would show in back-to-back events up to ~3x of it.
GRAPH_BELOW_US = 50.0
#: Roofline ceilings used only for that estimate (an H200 as seen through cuBLAS).
EST_TFLOPS = 700.0
EST_TBPS = 3.8


@dataclass(frozen=True)
class Settings:
    """How hard to measure: samples per contestant, calls per sample, host-loop length."""

    repeats: int = 15
    target_ms: float = 2.0  # device time one sample should span
    min_calls: int = 20
    max_calls: int = 2000
    max_graph_calls: int = 1000
    host_calls: int = 500  # below the ~1024 pending launches at which a host loop blocks
    host_repeats: int = 7
    warmup: int = 3
    l2_factor: float = 2.0  # operand sets span this many times the L2 cache
    max_sets: int = 4096
    hot: bool = False  # one operand set for every call: inputs stay in L2 where they fit

    @classmethod
    def make(cls, quick: bool = False, hot: bool = False) -> Settings:
        if quick:
            return cls(repeats=5, target_ms=1.0, host_calls=100, host_repeats=3, warmup=1, hot=hot)
        return cls(hot=hot)


@dataclass
class Stats:
    """Microseconds per call over the samples: median and the 10th/90th percentiles."""

    median_us: float
    p10_us: float
    p90_us: float
    samples: int
    method: str = "events"
    calls: int = 0

    @classmethod
    def of(cls, samples_us, **kw) -> Stats:
        v = np.asarray(samples_us, dtype=float)
        return cls(
            float(np.median(v)),
            float(np.percentile(v, 10)),
            float(np.percentile(v, 90)),
            int(v.size),
            **kw,
        )

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Contestant:
    """One side of a comparison.

    Attributes:
        name: its key in the results.
        fn: ``fn(i)`` launches one call on operand set ``i``.
        graphable: False where the callable cannot be captured in a CUDA graph at all.
        always_graph: time by graph replay even where others use events: for callables
            whose host time per call exceeds the device time of most problems.
        drain: called after each synchronization (e.g. to free per-call buffers).
    """

    name: str
    fn: object
    graphable: bool = True
    always_graph: bool = False
    drain: object = None
    errors: dict = field(default_factory=dict)


def estimated_us(m, n, k, in_bytes, out_bytes, beta=0.0) -> float:
    """Roofline estimate of one GEMM's device time, in microseconds."""
    flops = 2.0 * m * n * k
    moved = (m * k + k * n) * in_bytes + m * n * out_bytes * (2 if beta else 1)
    return max(flops / (EST_TFLOPS * 1e6), moved / (EST_TBPS * 1e6))


def use_graph(est_us: float) -> bool:
    """Whether launch overhead would dominate back-to-back timing of this problem."""
    return est_us < GRAPH_BELOW_US


def set_count(set_bytes: int, l2_bytes: int, settings: Settings) -> int:
    """Operand sets needed so that one pass over them spans ``l2_factor`` x L2 (>= 2).

    The hot variant (``settings.hot``) uses one set, so every call after the first may
    find its inputs in L2.
    """
    if settings.hot:
        return 1
    need = math.ceil(settings.l2_factor * l2_bytes / max(set_bytes, 1))
    return int(min(max(2, need), settings.max_sets))


def comparable(ours: str, peer: str, graph: bool) -> bool:
    """Whether device times taken by methods ``ours`` and ``peer`` may be compared.

    Launch-bound problems (``graph``) need both replayed from graphs, or both timed with
    events (then both pay launch overhead alike). Larger problems may compare our events
    with a peer's graph replay: replay only hides host time, which ours does not show there.
    """
    return ours == peer or (not graph and ours == "events" and peer == "graph")


def calls_for(per_call_us: float, settings: Settings, graph: bool) -> int:
    """Calls per sample so one sample spans ``target_ms`` (at least ``min_calls``)."""
    cap = settings.max_graph_calls if graph else settings.max_calls
    want = math.ceil(settings.target_ms * 1e3 / max(per_call_us, 1e-3))
    return int(min(max(want, settings.min_calls), cap))


def _drain(fw, contestants):
    fw.sync()
    for c in contestants:
        if c.drain:
            c.drain()


def _events_us(fw, fn, calls, nsets) -> float:
    start, end = fw.event(), fw.event()
    fw.record(start)
    for i in range(calls):
        fn(i % nsets)
    fw.record(end)
    return fw.elapsed_ms(start, end) * 1e3 / calls


def warm_up(fw, contestants, nsets, settings: Settings) -> list:
    """Runs every contestant over every set; drops (and notes) those that raise."""
    alive = []
    for c in contestants:
        try:
            for _ in range(settings.warmup):
                for i in range(nsets):
                    c.fn(i)
            _drain(fw, [c])
            alive.append(c)
        except Exception as e:  # noqa: BLE001 - a failing peer must not stop the run
            c.errors["run"] = f"{type(e).__name__}: {e}"
            _safe_drain(fw, c)
    return alive


def device_times(fw, contestants, nsets, settings: Settings, graph: bool) -> dict:
    """Device time per call of each contestant, interleaved; ``{name: Stats}``.

    The number of calls per sample is set from the first contestant's warm pace and is
    the same for all. With ``graph``, each contestant's calls are captured once into a
    CUDA graph that is then replayed per sample; a contestant that cannot be captured is
    timed with events instead (its Stats say so, and its ``errors['graph']`` why), and so
    are the others then, except ``always_graph`` ones. A contestant marked ``always_graph``
    is replayed from a graph even without ``graph``. A contestant that raises while timed
    is dropped, with ``errors['run']`` saying why.
    """
    if not contestants:
        return {}
    pace = _events_us(fw, contestants[0].fn, settings.min_calls, nsets)
    _drain(fw, contestants[:1])
    calls = calls_for(pace, settings, graph)
    seq = [i % nsets for i in range(calls)]
    runners = {}
    for c in contestants:
        runners[c.name] = None
        if (graph or c.always_graph) and c.graphable:
            try:
                runners[c.name] = fw.capture(lambda c=c: [c.fn(i) for i in seq])
            except Exception as e:  # noqa: BLE001 - fall back to events
                c.errors["graph"] = f"{type(e).__name__}: {e}"
                _safe_drain(fw, c)
    if graph and any("graph" in c.errors for c in contestants if not c.always_graph):
        # like for like: if one side cannot be replayed (cupy's cuBLAS refuses capture),
        # all that would have been replayed only for launch overhead use events too
        for c in contestants:
            if not c.always_graph:
                runners[c.name] = None
    samples = {c.name: [] for c in contestants}
    alive = list(contestants)
    for _ in range(settings.repeats):
        for c in list(alive):
            try:
                replay = runners[c.name]
                if replay is not None:
                    start, end = fw.event(), fw.event()
                    fw.record(start)
                    replay()
                    fw.record(end)
                    samples[c.name].append(fw.elapsed_ms(start, end) * 1e3 / calls)
                else:
                    samples[c.name].append(_events_us(fw, c.fn, calls, nsets))
                _drain(fw, [c])
            except Exception as e:  # noqa: BLE001 - a failing peer must not stop the run
                c.errors["run"] = f"{type(e).__name__}: {e}"
                alive.remove(c)
                _safe_drain(fw, c)
    return {
        c.name: Stats.of(
            samples[c.name],
            calls=calls,
            method="graph" if runners[c.name] is not None else "events",
        )
        for c in alive
    }


def host_times(fw, contestants, nsets, settings: Settings) -> dict:
    """Host microseconds per call of each contestant: wall time of an unsynchronized loop.

    Loops are interleaved and kept below the launch-queue depth, so a fast host is not
    held back by a busy GPU unless each call's device time exceeds its host time.
    """
    samples = {c.name: [] for c in contestants}
    alive = list(contestants)
    for _ in range(settings.host_repeats):
        for c in list(alive):
            try:
                fw.sync()
                fn = c.fn
                t0 = time.perf_counter()
                for i in range(settings.host_calls):
                    fn(i % nsets)
                samples[c.name].append((time.perf_counter() - t0) / settings.host_calls * 1e6)
                _drain(fw, [c])
            except Exception as e:  # noqa: BLE001
                c.errors["host"] = f"{type(e).__name__}: {e}"
                alive.remove(c)
                _safe_drain(fw, c)
    return {
        c.name: Stats.of(samples[c.name], method="host", calls=settings.host_calls) for c in alive
    }


def _safe_drain(fw, c):
    try:
        _drain(fw, [c])
    except Exception:  # noqa: BLE001 - the error that matters was already recorded
        pass
