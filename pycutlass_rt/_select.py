"""Kernel choice: tuned cache, then the shipped table, then an analytic model.

A problem arrives in canonical form (D row-major, see pcr_problem). Candidates are the
build's kernels of the right dtypes and layouts that the C side accepts (alignment,
image for this GPU). They are ordered by (1) the per-device tuned cache written by
``pycutlass_rt.tune`` (an exact-problem dictionary look-up; a pinned entry admits its
kernel only), (2) the first rule of the shipped table matching the shape, whose patterns
name kernels best first, (3) for a family the table calibrates from measured sweeps, the
analytic model corrected per kernel configuration by a fitted function of its features
(waves, K-loop length, intensity, tile fill, split fix-up) and by what that function
left at nearby swept shapes, (4) the device's family preference (sm90a before the sm80
family on Hopper) and the plain model for the rest. Steps 2-4 are the library's
(``pcr_rank``, native/src/rank.cpp): this module screens, hands the ranking to C, and
adds the tuned cache. The C side memoizes the ranked list per problem, so this runs once
per distinct shape; on a device whose choice has no tuned cache, the library ranks a
new problem itself (``pcr_selector_enable``), without coming back here.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass, field

from . import _cache, _log, _table
from ._abi import Epilogue, Grouped, Op, Ranked, RankReason, ScaleKind, Status
from ._dtypes import DTYPE_NAMES
from ._kernels import KernelInfo, desc_of, kernels, layout_word
from ._lib import KernelDesc, Problem, load
from .errors import UnsupportedError


@dataclass
class Choice:
    """Ranked candidates for one problem, with the reasons others were rejected."""

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


def _why(r: Ranked, resolved) -> str:
    if r.reason == RankReason.RANK_RULE:
        return f"table rule {resolved.rules[r.rule]['prefer'][r.pattern]!r}"
    if r.reason == RankReason.RANK_CALIBRATED:
        return f"calibrated model (~{r.us:.3g} us)"
    if r.reason == RankReason.RANK_SECOND_LOOK:
        return f"calibrated model (~{r.us:.3g} us), moved first by the second look"
    return f"analytic model (~{r.us:.3g} us)"


#: ``PYCUTLASS_RT_NATIVE_SELECT=0``: every new problem is ranked here, never handed over
NATIVE_ENV = "PYCUTLASS_RT_NATIVE_SELECT"


def hand_over(lib, device: int) -> None:
    """Lets the library rank problems first seen on ``device`` itself (the same pcr_rank,
    microseconds instead of a trip through Python), unless the tuned cache has a say there
    or ``PYCUTLASS_RT_NATIVE_SELECT=0``, or choices are being logged (``_log``): the
    library's ranking would pass the logger by. pcr_select_clear (tune(), _cache.reset) takes it
    back until the next selection here."""
    if os.environ.get(NATIVE_ENV, "").strip() == "0" or _log.choices_logged():
        return
    if _cache.has_say(lib, device, [k.name for k in kernels()]):
        return
    build_table()
    lib.check(lib.pcr_selector_enable(device, 1))


def apply_tuned(choice: Choice, hit: _cache.Hit | None, problem=None) -> Choice:
    """Puts the tuned kernel first; a pinned entry leaves it alone or raises. ``problem``
    (for the log): the problem the entry is for."""
    if hit is None:
        return choice
    name, where = hit.entry["kernel"], f"cache file {hit.path}"
    tuned = next((c for c, _ in choice.ranked if c.name == name), None)
    if tuned is None:
        if hit.pinned:
            reason = next(
                (why for c, why in choice.rejected if c.name == name),
                "the kernel is missing from this build",
            )
            raise UnsupportedError(
                f"kernel {name} is pinned for this problem ({where}, tune(strict=True)) but "
                f"cannot run it: {reason}. Re-run pycutlass_rt.tune(..., strict=True) with "
                f"this build and device, or remove the entry from the cache file"
            )
        if problem is not None:
            why = next((w for c, w in choice.rejected if c.name == name), "not in this build")
            _log.cache_unused(problem, f"{name} ({where}) cannot run it here: {why}")
        return choice  # a stale suggestion: the table and model decide
    why = ("pinned by tune(strict=True)" if hit.pinned else "tuned") + f" on this device ({where})"
    rest = [] if hit.pinned else [(c, w) for c, w in choice.ranked if c is not tuned]
    return Choice(ranked=[(tuned, why)] + rest, rejected=choice.rejected)


def static_match(kern: KernelInfo, problem) -> str | None:
    """Why ``kern`` cannot take ``problem`` by dtype/layout alone, or None."""
    op = Op(getattr(problem, "op", Op.OP_GEMM)).token
    if kern.op != op:
        return f"a {kern.op} kernel, the problem is a {op}"
    want = (
        DTYPE_NAMES.get(problem.dtype_a),
        DTYPE_NAMES.get(problem.dtype_b),
        DTYPE_NAMES.get(problem.dtype_d),
    )
    if (kern.dtype_a, kern.dtype_b, kern.dtype_d) != want:
        return "dtypes differ"
    layout = layout_word(problem.layout_a, problem.layout_b)
    if kern.layout != layout:
        return f"layout {kern.layout}, problem is {layout}"
    grouped = getattr(problem, "grouped", Grouped.GROUPED_NONE) != Grouped.GROUPED_NONE
    if kern.grouped != grouped:
        return "grouped kernel" if kern.grouped else "not a grouped kernel"
    if getattr(problem, "out_scale", 0) and not kern.out_scale:
        return "reduces no amax and applies no scale_d (out_scale)"
    blocks = block_scales(problem)
    if (kern.scale_m, kern.scale_n) != blocks:
        if blocks == ("none", "none"):
            return "a block-scaled kernel"
        return f"block scales {kern.scale_m}/{kern.scale_n}, problem has {'/'.join(blocks)}"
    # an epilogue computes every plainer one's result (see screen() for the preference)
    want = Epilogue(getattr(problem, "epilogue", Epilogue.EPI_LINEAR))
    if not epilogue_serves(Epilogue.from_token(kern.epilogue), want):
        return f"epilogue {kern.epilogue}, problem needs {want.token}"
    return None


def block_scales(problem) -> tuple[str, str]:
    """A problem's fp8 block-scale kinds (scale_m, scale_n tokens: "groups", "blocks"), as a
    block-scaled kernel's must be; ("none", "none") without block scales.

    >>> from pycutlass_rt._abi import Problem, ScaleKind
    >>> block_scales(Problem(scale_m=ScaleKind.SCALE_GROUPS, scale_n=ScaleKind.SCALE_BLOCKS))
    ('groups', 'blocks')
    >>> block_scales(Problem(scale_m=ScaleKind.SCALE_VECTOR, scale_n=ScaleKind.SCALE_TENSOR))
    ('none', 'none')
    """
    grid = (ScaleKind.SCALE_GROUPS, ScaleKind.SCALE_BLOCKS)
    kinds = (getattr(problem, "scale_m", 0), getattr(problem, "scale_n", 0))
    if kinds[0] not in grid:
        return "none", "none"
    return ScaleKind(kinds[0]).token, ScaleKind(kinds[1]).token


def epilogue_serves(kernel: Epilogue, problem: Epilogue) -> bool:
    """Whether a kernel of epilogue ``kernel`` computes a problem needing ``problem``
    (pcr_epilogue's rule, as the C side's epilogue_serves): its own, and those it extends
    (every one extends LINEAR; SCALED and AUX extend BIASACT).

    >>> epilogue_serves(Epilogue.EPI_AUX, Epilogue.EPI_BIASACT)
    True
    >>> epilogue_serves(Epilogue.EPI_AUX, Epilogue.EPI_SCALED)
    False
    """
    return (
        kernel == problem
        or problem == Epilogue.EPI_LINEAR
        or (problem == Epilogue.EPI_BIASACT and kernel != Epilogue.EPI_LINEAR)
    )


def screen(problem, verdicts, all_kernels: list[KernelInfo]) -> tuple[list, list]:
    """(accepted kernels, [(kernel, why rejected)]): static checks, then the C side's
    ``verdicts`` ((status, reason) per kernel index, see _call.Judged)."""
    accepted, rejected = [], []
    order = families_for(problem.cc)
    for kern in all_kernels:
        reason = static_match(kern, problem)
        if reason is None and kern.family not in order:
            reason = (
                f"sm{kern.family} kernels do not run on compute "
                f"{problem.cc // 10}.{problem.cc % 10}"
            )
        if reason is None and verdicts[kern.index][0] != Status.OK:
            reason = verdicts[kern.index][1]
        if reason is None:
            accepted.append(kern)
        else:
            rejected.append((kern, reason))
    # a problem takes a richer epilogue (slower) only where no kernel has its own; forcing
    # one works
    want = Epilogue(getattr(problem, "epilogue", Epilogue.EPI_LINEAR))
    if any(Epilogue.from_token(k.epilogue) == want for k in accepted):
        richer = [k for k in accepted if Epilogue.from_token(k.epilogue) > want]
        accepted = [k for k in accepted if Epilogue.from_token(k.epilogue) == want]
        rejected += [(k, f"epilogue {k.epilogue}: one of {want.token} exists") for k in richer]
    return accepted, rejected


def choose(
    lib, problem, verdicts, all_kernels: list[KernelInfo], *, use_cache: bool = True
) -> Choice:
    """Ranks the kernels whose ``verdicts`` (see screen) accept ``problem``.

    With ``use_cache`` (the default) the device's tuned cache comes first; tune() and the
    sweep pass False to see every candidate in table/model order.

    Raises:
        UnsupportedError: a pinned kernel cannot run the problem, or PYCUTLASS_RT_STRICT=1
            and the device has no current tuned cache (see pycutlass_rt.tune).
    """
    accepted, rejected = screen(problem, verdicts, all_kernels)
    choice = rank(problem, accepted, families_for(problem.cc))
    choice.rejected = rejected
    if not use_cache:
        return choice
    return apply_tuned(choice, _cache.lookup(lib, problem, [k.name for k in all_kernels]), problem)
