"""Kernel choice: shipped table, then an analytic model (a tuned cache comes first later).

A problem arrives in canonical form (D row-major, see pcr_problem). Candidates are the
build's kernels of the right dtypes and layouts that the C side accepts (alignment,
image for this GPU); they are ordered by (1) the device's family preference (sm90a
before the sm80 family on Hopper), (2) the first rule of the shipped table matching
the shape, whose patterns name kernels best first, (3) the analytic model for the rest.
The C side memoizes the ranked list per problem, so this runs once per distinct shape.
"""
from __future__ import annotations

import ctypes
import fnmatch
import functools
import json
import math
import os
from dataclasses import dataclass, field

from ._kernels import DTYPE_NAMES, LAYOUT_LETTERS, KernelInfo

TABLE_FILE = "table_v1.json"


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
    if cc >= 80:
        return [80, 75]  # sm80-family SASS on 8.x, its PTX on later GPUs
    if cc >= 75:
        return [75]
    return []


@functools.lru_cache(maxsize=None)
def table() -> dict:
    """The shipped table: installed beside the package, or heuristics/ in a source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "heuristics", TABLE_FILE),
                 os.path.join(os.path.dirname(here), "heuristics", TABLE_FILE)):
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
    return {"families": {}}


def matching_rule(family: int, m: int, n: int, k: int) -> dict | None:
    for rule in table()["families"].get(f"sm{family}", []):
        if all(bound not in rule or value <= rule[bound]
               for bound, value in (("max_m", m), ("max_n", n), ("max_k", k))):
            return rule
    return None


def model_time(kern: KernelInfo, m: int, n: int, k: int, sm_count: int) -> float:
    """Relative time: waves of output tiles times the per-tile cost at the kernel's speed."""
    tm, tn, _ = kern.tile
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    waves = math.ceil(tiles / max(sm_count, 1))
    if kern.family >= 90:
        speed = {"cooperative": 1.0, "pingpong": 0.95, "2sm": 1.0, "1sm": 0.95}.get(kern.schedule, 0.9)
        speed *= min(1.0, (tm * tn) / (128 * 256)) ** 0.15  # small tiles reuse data less
    else:
        speed = 0.55 if kern.schedule == "multistage" else 0.25
        speed *= min(1.0, (tm * tn) / (128 * 128)) ** 0.15
    return waves * tm * tn * max(k, 1) / speed


def rank(problem, candidates: list[KernelInfo], family_order: list[int]) -> Choice:
    """Orders the accepted candidates for ``problem`` (m, n, k, sm_count attributes)."""
    m, n, k, sms = problem.m, problem.n, problem.k, problem.sm_count
    rule_used = None
    ranked = []
    for fam in family_order:
        group = [c for c in candidates if c.family == fam]
        if not group:
            continue
        rule = matching_rule(fam, m, n, k)
        prefer = rule["prefer"] if rule else []
        rule_used = rule_used or (rule if prefer else None)

        def key(c: KernelInfo):
            pos = next((i for i, p in enumerate(prefer) if fnmatch.fnmatchcase(c.name, p)),
                       len(prefer))
            return (pos, model_time(c, m, n, k, sms), c.name)

        for c in sorted(group, key=key):
            pos = key(c)[0]
            why = (f"table rule {prefer[pos]!r}" if pos < len(prefer)
                   else "analytic model (waves x tile cost)")
            ranked.append((c, why))
    return Choice(ranked=ranked, rule=rule_used)


def static_match(kern: KernelInfo, problem) -> str | None:
    """Why ``kern`` cannot take ``problem`` by dtype/layout alone, or None."""
    want = (DTYPE_NAMES.get(problem.dtype_a), DTYPE_NAMES.get(problem.dtype_b),
            DTYPE_NAMES.get(problem.dtype_d))
    if (kern.dtype_a, kern.dtype_b, kern.dtype_d) != want:
        return "dtypes differ"
    layout = LAYOUT_LETTERS[problem.layout_a] + LAYOUT_LETTERS[problem.layout_b]
    if kern.layout != layout:
        return f"layout {kern.layout}, problem is {layout}"
    return None


def choose(lib, problem, all_kernels: list[KernelInfo]) -> Choice:
    """Checks every kernel against ``problem`` through the C side and ranks the survivors."""
    accepted, rejected = [], []
    order = families_for(problem.cc)
    pref = ctypes.byref(problem)
    for kern in all_kernels:
        reason = static_match(kern, problem)
        if reason is None and kern.family not in order:
            reason = f"sm{kern.family} kernels do not run on compute {problem.cc // 10}.{problem.cc % 10}"
        if reason is None and lib.pcr_kernel_check(kern.index, pref) != 0:
            reason = lib.last_error()
        if reason is None:
            accepted.append(kern)
        else:
            rejected.append((kern, reason))
    choice = rank(problem, accepted, order)
    choice.rejected = rejected
    return choice
