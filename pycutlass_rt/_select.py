"""Kernel choice, as the library makes it (pycutlass_rt.h, "the selector").

The library ranks every problem itself: the device's tuned entries (written by
``pycutlass_rt.tune``; a pinned one alone), then the first rule of the shipped table
matching the shape, whose patterns name kernels best first, then for a family the table
calibrates from measured sweeps the analytic model corrected per kernel configuration by
a fitted function of its features (waves, K-loop length, intensity, tile fill, split
fix-up) and by what that function left at nearby swept shapes, then the device's family
preference (sm90a before the sm80 family on Hopper) and the plain model for the rest
(native/src/choose.cpp and rank.cpp).

This module hands the library what it ranks with, when it first asks for a device
(:func:`install`'s provider): the shipped table resolved against this build's kernels, and
the device's tuned entries, or strict mode's refusal (``_cache``). It watches the
library's choices for the logger and for tune()'s recording (:func:`watching`), and asks
for rankings with their reasons (:func:`ranking`: explain(), tune()) and why they leave
the other kernels out (:func:`passed_over`: explain()). :func:`rank` orders kernel
descriptions under other tables, for the table's fitter (heuristics/fit.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
import warnings
from dataclasses import dataclass, field

from . import _cache, _call, _lib, _log, _table
from ._abi import (
    PCR_SELECT_UNTUNED,
    Op,
    Ranked,
    RankReason,
    SelectObserverFn,
    SelectProviderFn,
    Verdict,
)
from ._kernels import KernelInfo, desc_of, kernels
from ._lib import KernelDesc, Problem, load


@dataclass
class Choice:
    """Ranked candidates for one problem (by :func:`rank`)."""

    ranked: list  # [(KernelInfo, why chosen in this place)]
    rejected: list = field(default_factory=list)  # [(KernelInfo, reason)]


@functools.cache
def families_for(cc: int) -> list[int]:
    """Kernel families that run on compute capability ``cc``, preferred first (the
    library's pcr_kernel_families).

    >>> families_for(90), families_for(86), families_for(61)
    ([90, 80, 75], [80, 75], [])
    """
    lib = load()
    out, count = (ctypes.c_int32 * 4)(), ctypes.c_int32()
    lib.check(lib.pcr_kernel_families(cc, out, len(out), ctypes.byref(count)))
    return list(out[: count.value])


# ---- ordering -------------------------------------------------------------------------


@functools.cache
def build_table():
    """The shipped table resolved against this build's kernels (what pcr_selector_set
    holds), set in the library on first use."""
    resolved = _table.resolve(_table.table(), kernels())
    lib = load()
    lib.check(lib.pcr_selector_set(resolved.ranker))
    return resolved


_RESOLVED: dict = {}  # (id(rules), candidates' names) -> (rules, Resolved)


def _resolved(rules: dict, candidates: list):
    """``rules`` resolved against ``candidates`` (by name: what resolution reads), kept
    while the same rules object is asked again (the fitter ranks thousands of samples)."""
    key = (id(rules), tuple(c.name for c in candidates))
    hit = _RESOLVED.get(key)
    if hit is None or hit[0] is not rules:
        if len(_RESOLVED) >= 32:  # each holds a copy of the table in the library (~1 MB)
            _RESOLVED.clear()
        hit = _RESOLVED[key] = (rules, _table.resolve(rules, candidates))
    return hit[1]


def _problem(problem) -> Problem:
    if isinstance(problem, Problem):
        return problem
    return Problem(
        m=problem.m,
        n=problem.n,
        k=problem.k,
        sm_count=problem.sm_count,
        cc=getattr(problem, "cc", None) or 0,
        batch=getattr(problem, "batch", 1),
        op=getattr(problem, "op", Op.OP_GEMM),
    )


def rank(
    problem, candidates: list[KernelInfo], family_order: list[int], rules: dict | None = None
) -> Choice:
    """Orders the accepted candidates for ``problem``: table rule, calibration, family, model
    (pcr_rank).

    The rule of the device's own family (``family_order[0]``) may name kernels of any
    family that runs here (on an H200 an sm80 stream-K kernel wins a few shapes): those
    come first, in the rule's order. If that family is calibrated, every other candidate
    whose configuration a sweep timed follows, by calibrated time, whatever its family
    (where those lead, the calibration's second look may put the second one first).
    The rest follow family by family, each ordered by its family's rule, then by the
    model; a convolution's by its own family first, unless another family's kernel is
    modelled 4x faster. ``problem`` needs m, n, k and sm_count (cc, batch and op are used
    when present); ``rules`` replaces the shipped table (heuristics/fit.py --check).
    Candidates of families not in ``family_order`` are left out.
    """
    out, resolved = _ranked(problem, candidates, family_order, rules)
    return Choice(ranked=[(candidates[r.candidate], _why(r, resolved)) for r in out])


def ranked(
    problem, candidates: list[KernelInfo], family_order: list[int], rules: dict | None = None
) -> list[tuple[KernelInfo, int, float]]:
    """:func:`rank`'s order as (kernel, RankReason, its time in us): what heuristics/fit.py
    learns the second look from."""
    out, _ = _ranked(problem, candidates, family_order, rules)
    return [(candidates[r.candidate], r.reason, r.us) for r in out]


def _ranked(problem, candidates, family_order, rules):
    lib = load()
    every = None if rules is not None else kernels()
    if every is not None and all(c.index < len(every) and every[c.index] is c for c in candidates):
        resolved, ranker = build_table(), None  # the build's table, already in the library
        ids = [c.index for c in candidates]
    else:
        resolved = _resolved(_table.table() if rules is None else rules, candidates)
        ranker, ids = resolved.ranker, range(len(candidates))
    n = len(candidates)
    out, count = (Ranked * max(n, 1))(), ctypes.c_int32()
    lib.check(
        lib.pcr_rank(
            ctypes.byref(_problem(problem)),
            (ctypes.c_int32 * len(family_order))(*family_order),
            len(family_order),
            (KernelDesc * max(n, 1))(*(desc_of(c) for c in candidates)),
            (ctypes.c_int32 * max(n, 1))(*ids),
            n,
            ranker,
            out,
            ctypes.byref(count),
        )
    )
    return out[: count.value], resolved


def _why(r: Ranked, resolved, source: str = "") -> str:
    if r.reason == RankReason.RANK_RULE:
        return f"table rule {resolved.rules[r.rule]['prefer'][r.pattern]!r}"
    if r.reason == RankReason.RANK_CALIBRATED:
        return f"calibrated model (~{r.us:.3g} us)"
    if r.reason == RankReason.RANK_SECOND_LOOK:
        return f"calibrated model (~{r.us:.3g} us), moved first by the second look"
    if r.reason in (RankReason.RANK_TUNED, RankReason.RANK_PINNED):
        how = "pinned by tune(strict=True)" if r.reason == RankReason.RANK_PINNED else "tuned"
        return f"{how} on this device" + (f" ({source})" if source else "")
    return f"analytic model (~{r.us:.3g} us)"


# ---- the library's selector: what it is handed, what it is asked -------------------------

#: the most candidates a ranking returns (a launch keeps 8; explain() shows them all)
MAX_RANKED = 4096


def ranking(lib, problem, verdicts=None, *, tuned: bool = True) -> list:
    """The library's ranking of a described problem, as a launch would take it:
    [(KernelInfo, why)], best first; [] for a problem without GEMM work.

    Args:
        lib: the loaded library.
        problem: a described pcr_problem.
        verdicts: the ``pcr_verdict`` array pcr_describe filled (the operands judged too),
            or None (the problem alone).
        tuned: False leaves the tuned cache and strict mode out (the table and model's
            order: what tune() times).

    Raises:
        UnsupportedError, NoKernelForArchError: the error the launch would raise (no kernel
            takes the problem, a pinned kernel cannot, or strict mode without a cache).
    """
    install(lib)
    build_table()  # in the library before it ranks
    out, count = (Ranked * MAX_RANKED)(), ctypes.c_int32()
    lib.check(
        lib.pcr_select_rank(
            ctypes.byref(problem),
            verdicts,
            0 if tuned else PCR_SELECT_UNTUNED,
            out,
            MAX_RANKED,
            ctypes.byref(count),
        )
    )
    return _named(lib, problem, out[: count.value])


def passed_over(lib, problem, verdicts=None, *, tuned: bool = True) -> list:
    """Why the library's ranking of a described problem (:func:`ranking`'s, on the same
    arguments) leaves each kernel of the build out: [(status, reason)] by kernel index,
    (0, "") for a kernel it ranks; never raises for the ranking's own failure (each kernel's
    reason then says it)."""
    install(lib)
    build_table()  # in the library before it ranks
    count = len(kernels())
    out = (Verdict * count)()
    lib.check(
        lib.pcr_select_passed_over(
            ctypes.byref(problem), verdicts, 0 if tuned else PCR_SELECT_UNTUNED, out, count
        )
    )
    return [(v.status, v.reason.decode(errors="replace")) for v in out]


def _named(lib, problem, records) -> list:
    """[(KernelInfo, why)] of the library's pcr_ranked ``records`` for ``problem``; the
    tuned cache's file is looked up only where a record names a tuned entry."""
    every, resolved = kernels(), build_table()
    tuned = (RankReason.RANK_TUNED, RankReason.RANK_PINNED)
    source = (
        _cache.source_of(lib, problem.device) if any(r.reason in tuned for r in records) else ""
    )
    return [(every[r.candidate], _why(r, resolved, source)) for r in records]


class _Selector:
    """The callbacks the library holds, kept alive here, and who watches its choices."""

    def __init__(self):
        self.lock = threading.Lock()
        self.lib = None  # the library they were handed to
        self.provider = SelectProviderFn(_provide)
        self.observer = SelectObserverFn(_observed)
        self.watchers: list = []  # fn(problem, [(KernelInfo, why)], unused tuned KernelInfo)


def install(lib) -> None:
    """Hands ``lib`` the provider of each device's say and the observer of its choices
    (once: the library calls them from then on)."""
    if _selector.lib is lib:
        return
    with _selector.lock:
        if _selector.lib is not lib:
            lib.check(lib.pcr_select_provider(_selector.provider, None))
            lib.check(lib.pcr_select_observe(_selector.observer, None))
            _selector.lib = lib


def _provide(device: int, _context) -> None:
    """The library's first question about ``device``: its table and tuned entries. Runs on
    the selecting thread; an error here leaves the device with the table alone, said once."""
    lib = _selector.lib
    try:
        build_table()  # in the library from its first use on
        entries, source, refusal = _cache.tuned_for(lib, device)
        array = (_cache.Tuned * max(len(entries), 1))(*entries)
        lib.check(
            lib.pcr_select_tuned(
                device,
                array,
                len(entries),
                source.encode() if source else None,
                refusal.encode() if refusal is not None else None,
            )
        )
    except Exception as e:  # noqa: BLE001 - a callback from C: nothing above it can catch
        warnings.warn(
            f"pycutlass_rt: device {device}'s tuned kernels were not loaded: {e}",
            RuntimeWarning,
            stacklevel=1,
        )


def _observed(problem_p, ranked_p, count: int, unused: int, _context) -> None:
    """The library ranked a problem for a launch: the watchers and the logger hear of it."""
    if not _selector.watchers and not _log.choices_logged():
        return
    try:
        lib, problem = _selector.lib, Problem.from_buffer_copy(problem_p.contents)
        ranked = _named(lib, problem, ranked_p[:count])
        stale = kernels()[unused] if unused >= 0 else None
        for watch in list(_selector.watchers):
            watch(problem, ranked, stale)
        _log.choice(problem, ranked)
        if stale is not None:
            # the library's word: the verdict's refusal, or why its screen dropped the kernel
            _, why = passed_over(lib, problem, _call.judge(lib, problem).array)[stale.index]
            source = _cache.source_of(lib, problem.device)
            _log.cache_unused(problem, f"{stale.name} ({source}) cannot run it here: {why}")
    except Exception as e:  # noqa: BLE001 - a callback from C: nothing above it can catch
        warnings.warn(
            f"pycutlass_rt: a kernel choice went unwatched: {e}", RuntimeWarning, stacklevel=1
        )


@contextlib.contextmanager
def watching(fn):
    """Inside the block, ``fn(problem, ranked, stale)`` hears of every problem the library
    ranks for a launch (a thread's first meeting with it): the pcr_problem, its
    [(KernelInfo, why)] best first, and a tuned kernel that could not run it (or None)."""
    install(load())
    _selector.watchers.append(fn)
    try:
        yield
    finally:
        _selector.watchers.remove(fn)


_selector = _Selector()  # after the callbacks it wraps
_lib.on_load(install)
