"""Kernel choice: tuned cache, then the shipped table, then an analytic model.

A problem arrives in canonical form (D row-major, see pcr_problem). Candidates are the
build's kernels of the right dtypes and layouts that the C side accepts (alignment,
image for this GPU). They are ordered by (1) the per-device tuned cache written by
``pycutlass_rt.tune`` (an exact-problem dictionary look-up; a pinned entry admits its
kernel only), (2) the first rule of the shipped table matching the shape, whose patterns
name kernels best first, (3) for a family the table calibrates from measured sweeps, the
analytic model corrected per kernel configuration by a fitted function of its features
(waves, K-loop length, intensity, tile fill, split fix-up) and by what that function
left at nearby swept shapes, (4) the device's family
preference (sm90a before the sm80 family on Hopper) and the plain model for the rest. The C side memoizes the ranked list per problem, so
this runs once per distinct shape. This module ranks and chooses; the table lives in
_table.py, the model in _model.py.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field

from . import _cache
from ._abi import Epilogue, Grouped, Op, Status
from ._kernels import DTYPE_NAMES, KernelInfo, layout_word
from ._model import features, terms
from ._table import calibration, config_of, correction, matching_rule, neighbours
from .errors import UnsupportedError


@dataclass
class Choice:
    """Ranked candidates for one problem, with the reasons others were rejected."""

    ranked: list  # [(KernelInfo, why chosen in this place)]
    rejected: list = field(default_factory=list)  # [(KernelInfo, reason)]
    rule: dict | None = None


def families_for(cc: int) -> list[int]:
    """Kernel families that run on compute capability ``cc``, preferred first."""
    if cc in (90, 100):  # the arch-specific family first, then the portable ones
        return [cc, 80, 75]
    if cc == 89:
        return [89, 80, 75]  # Ada: its fp8 kernels, then the sm80 family
    if cc >= 80:
        return [80, 75]  # sm80-family SASS on 8.x, its PTX on later GPUs
    if cc >= 75:
        return [75]
    if cc >= 70:
        return [70]  # sm_70 SASS (no PTX): Volta only
    return []


# ---- ordering -------------------------------------------------------------------------

#: how much faster, modelled, another family's convolution kernel must be to run ahead of
#: the device's own family's: on the H200's ResNet-50 / UNet / ViT layers (benchmarks/
#: conv.py, the sets this was read from) the model's cross-family comparisons held from
#: 7x on (sm80 split-K wgrad) and failed up to 3x
CONV_FAR = 4.0


def rank(
    problem, candidates: list[KernelInfo], family_order: list[int], rules: dict | None = None
) -> Choice:
    """Orders the accepted candidates for ``problem``: table rule, calibration, family, model.

    The rule of the device's own family (``family_order[0]``) may name kernels of any
    family that runs here (on an H200 an sm80 stream-K kernel wins a few shapes): those
    come first, in the rule's order. If that family is calibrated, every other candidate
    whose configuration a sweep timed follows, by calibrated time, whatever its family.
    The rest follow family by family, each ordered by its family's rule, then by the
    model. ``problem`` needs m, n, k and sm_count (cc is used when present); ``rules``
    replaces the shipped table (heuristics/fit.py --check).
    """
    m, n, k, sms = problem.m, problem.n, problem.k, problem.sm_count
    cc = getattr(problem, "cc", None)
    batch = max(getattr(problem, "batch", 1), 1)
    found: dict = {}

    def model_terms(c):  # each candidate's model terms once: the passes below all read them
        if c.name not in found:
            found[c.name] = terms(c, m, n, k, sms, cc, batch)
        return found[c.name]

    def model_us(c):
        return model_terms(c).us

    def ordered(group, rule):
        prefer = rule["prefer"] if rule else []
        keyed = []
        for c in group:  # rules name plain kernels: a fused one ranks as its plain twin
            pos = next(
                (i for i, p in enumerate(prefer) if fnmatch.fnmatchcase(c.base_name, p)),
                len(prefer),
            )
            keyed.append((pos, model_us(c), c.name, c))
        return [
            (
                c,
                f"table rule {prefer[pos]!r}"
                if pos < len(prefer)
                else f"analytic model (~{us:.3g} us)",
            )
            for pos, us, _, c in sorted(keyed, key=lambda t: t[:3])
        ]

    # a batch runs like one problem of batch x M rows (as many output tiles)
    lead = matching_rule(family_order[0], m * batch, n, k, rules) if family_order else None
    runs_here = [c for c in candidates if c.family in family_order]
    ranked = [(c, why) for c, why in ordered(runs_here, lead) if why.startswith("table")]
    rule_used = lead if ranked else None
    named = {c.name for c, _ in ranked}
    cal = calibration(family_order[0], rules) if family_order else None
    if cal:
        near = neighbours(cal, m * batch, n, k)
        measured = []
        for c in runs_here:
            config = config_of(c.base_name)
            t = None if c.name in named else model_terms(c)
            r = None if t is None else correction(cal, config, features(t))
            if r is not None:
                measured.append((t.us * math.exp(r + near.get(config, 0.0)), c.name, c))
        ranked += [
            (c, f"calibrated model (~{us:.3g} us)")
            for us, _, c in sorted(measured, key=lambda t: t[:2])
        ]
        named |= {c.name for _, _, c in measured}
    if getattr(problem, "op", Op.OP_GEMM) != Op.OP_GEMM and family_order:
        # No table knows convolutions yet: the device's own family first, by the model,
        # unless the model finds another family's kernel CONV_FAR times faster (wgrad's few
        # output tiles split on the sm80 family against a CTA per tile on sm90a: 13 us
        # against 768 us modelled for ResNet-50's first 1x1, 30 against 450 measured)
        own = ordered([c for c in runs_here if c.family == family_order[0]], None)
        rest = ordered([c for c in runs_here if c.family != family_order[0]], None)
        far = own and rest and model_us(rest[0][0]) * CONV_FAR < model_us(own[0][0])
        return Choice(ranked=ranked + (rest + own if far else own + rest), rule=rule_used)
    for fam in family_order:
        group = [c for c in candidates if c.family == fam and c.name not in named]
        if not group:
            continue
        rule = lead if fam == family_order[0] else matching_rule(fam, m * batch, n, k, rules)
        rule_used = rule_used or (rule if rule and rule.get("prefer") else None)
        ranked += ordered(group, rule)
    return Choice(ranked=ranked, rule=rule_used)


def apply_tuned(choice: Choice, hit: _cache.Hit | None) -> Choice:
    """Puts the tuned kernel first; a pinned entry leaves it alone or raises."""
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
        return choice  # a stale suggestion: the table and model decide
    why = ("pinned by tune(strict=True)" if hit.pinned else "tuned") + f" on this device ({where})"
    rest = [] if hit.pinned else [(c, w) for c, w in choice.ranked if c is not tuned]
    return Choice(ranked=[(tuned, why)] + rest, rejected=choice.rejected, rule=choice.rule)


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
    # an epilogue computes every plainer one's result (see screen() for the preference)
    want = Epilogue(getattr(problem, "epilogue", Epilogue.EPI_LINEAR))
    if Epilogue.from_token(kern.epilogue) < want:
        return f"epilogue {kern.epilogue}, problem needs {want.token}"
    return None


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
    return apply_tuned(choice, _cache.lookup(lib, problem, [k.name for k in all_kernels]))
