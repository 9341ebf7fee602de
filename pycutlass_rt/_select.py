"""Kernel choice: tuned cache, then the shipped table, then an analytic model.

A problem arrives in canonical form (D row-major, see pcr_problem). Candidates are the
build's kernels of the right dtypes and layouts that the C side accepts (alignment,
image for this GPU). They are ordered by (1) the per-device tuned cache written by
``pycutlass_rt.tune`` (an exact-problem dictionary look-up; a pinned entry admits its
kernel only), (2) the first rule of the shipped table matching the shape, whose patterns
name kernels best first, (3) for a family the table calibrates from measured sweeps, the
analytic model corrected by what the sweeps measured for each kernel configuration near
the shape, (4) the device's family preference (sm90a before the sm80 family on Hopper)
and the plain model for the rest. The C side memoizes the ranked list per problem, so
this runs once per distinct shape.
"""

from __future__ import annotations

import ctypes
import fnmatch
import functools
import json
import math
import os
import re
import warnings
from dataclasses import dataclass, field

from . import _cache
from ._abi import Epilogue, Grouped, Status
from ._kernels import DTYPE_BYTES, DTYPE_NAMES, LAYOUT_LETTERS, KernelInfo
from .errors import UnsupportedError

TABLE_FILE = "table_v1.json"
TABLE_FORMATS = (1, 2)  # the "format" values of heuristics/*.json this module reads


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


# ---- the shipped table ----------------------------------------------------------------


@functools.cache
def table() -> dict:
    """The shipped table: installed beside the package, or heuristics/ in a source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (
        os.path.join(here, "heuristics", TABLE_FILE),
        os.path.join(os.path.dirname(here), "heuristics", TABLE_FILE),
    ):
        if os.path.exists(path):
            with open(path) as f:
                data = json.load(f)
            if data.get("format") in TABLE_FORMATS:
                return data
            warnings.warn(
                f"{path} has table format {data.get('format')!r}, this version "
                f"reads {TABLE_FORMATS}: kernels are chosen by the analytic model",
                RuntimeWarning,
                stacklevel=2,
            )
    return {"families": {}}


def matching_rule(family: int, m: int, n: int, k: int, rules: dict | None = None) -> dict | None:
    """The first rule of ``rules`` (default: the shipped table) whose bounds hold."""
    rules = table() if rules is None else rules
    for rule in rules["families"].get(f"sm{family}", []):
        if all(
            bound not in rule or value <= rule[bound]
            for bound, value in (("max_m", m), ("max_n", n), ("max_k", k))
        ):
            return rule
    return None


# ---- calibration: the model corrected by measured sweeps -------------------------------
#
# A calibrated family's table entry holds, for every kernel configuration a sweep timed,
# the mean of log(measured / model time) at each swept shape, over each M bucket (powers
# of 4: M in [16, 64) is bucket 2) and over all samples. A candidate's estimate is its
# model time times exp(its residual at the finest level that measured its configuration):
# a swept shape gets what was measured there, any other shape the model corrected by how
# far off it was for that configuration at similar M. Unlike rules fitted per shape
# region, this keeps the model's sense of tiles, waves and splits between swept shapes:
# on the H200 bf16 sweeps, shapes held out of the fit got a kernel within 5% of the best
# 85% of the time, against 63% for the per-region rules it replaced and 75% for the model
# alone (heuristics/fit.py --check reports these figures for any sweep).

_CONFIG = re.compile(r"^(sm\d+)_[a-z0-9]+_[a-z0-9]+_[a-z0-9]+_[a-z0-9]+_[tn]{2}_(\d+x\d+x\d+_.+)$")


def config_of(name: str) -> str:
    """A kernel's configuration: its name without dtypes and layouts, as rules name it.

    >>> config_of("sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8")
    'sm90_*_128x256x64_c2x1_coop_a8'
    """
    m = _CONFIG.match(name)
    if not m:
        raise ValueError(f"not a kernel name: {name!r}")
    return f"{m[1]}_*_{m[2]}"


def bucket_keys(m: int, n: int, k: int) -> tuple:
    """The calibration levels of a problem, finest first: the shape, its M bucket, all.

    >>> bucket_keys(16, 4096, 4096)
    ('16x4096x4096', 'm2', '*')
    """
    return (f"{m}x{n}x{k}", f"m{(max(m, 1).bit_length() - 1) // 2}", "*")


def calibration(family: int, rules: dict | None = None) -> dict | None:
    """The table's calibration of ``family`` ({"residuals": {level: {config: r}}}), or None."""
    rules = table() if rules is None else rules
    return rules.get("calibration", {}).get(f"sm{family}")


def residual(cal: dict, config: str, keys: tuple) -> tuple | None:
    """(log(measured / model), level) at the finest level that measured ``config``."""
    for key in keys:
        level = cal["residuals"].get(key, {})
        if config in level:
            return level[config], key
    return None


# ---- the analytic model ---------------------------------------------------------------
#
# Time in microseconds of one GEMM: max(compute, memory) + OVERLAP * min(compute, memory)
# + split fix-up, where
#   compute: the K-loop iterations the busiest SM runs (waves of output tiles, or its
#            share of the split K loop) times one iteration's tensor-core time;
#   memory:  bytes of A, B and D over the DRAM bandwidth the busy SMs can draw (too few
#            busy SMs cannot saturate it);
#   fix-up:  stream-K: a split tile's fp32 partial sums, added by its peers one after
#            another (the deterministic reduction): per peer, the partial's round trip
#            through L2 and the wait on the previous peer's flag. Parallel split-K: every
#            slice's fp32 partials written and read back by a second kernel, at DRAM speed.
# Constants are datasheet figures, with two calibrated on an H200 sweep (heuristics/
# sweeps/h200_bf16.csv): ~2 us per split peer, and split kernels at 0.8-1.0x the speed
# of their data-parallel twin. On that sweep the model alone picks a kernel within 5% of
# the best for 76% of the sm90 samples (geomean best/chosen 0.97; 0.89 uncalibrated).
# Measured sweeps (the table) and tune() override the model wherever they exist;
# heuristics/fit.py --check reports its regret on any sweep.

#: compute capability -> (dense fp16/bf16 tensor TFLOP/s per SM with fp32 accumulation,
#: DRAM GB/s per SM): V100, T4, A100, A10/A6000, L40S, H100/H200 SXM, B200
DEVICES = {
    70: (1.5, 11.0),
    75: (1.6, 8.0),
    80: (2.9, 18.5),
    86: (1.8, 8.5),
    89: (2.5, 6.0),
    90: (7.5, 30.0),
    100: (15.0, 54.0),
}
BW_SATURATION = 0.6  # fraction of the SMs that must stream to saturate DRAM
OVERLAP = 0.1  # share of the shorter of compute and memory that does not overlap
FIXUP_GBPS = 150.0  # per-SM L2 bandwidth for split partials
FIXUP_SYNC_US = 2.0  # per peer: the wait on the previous peer's flag (H200 sweep)
#: parallel split-K (native/kernels/split_k.cuh): >= 4 K tiles per slice, <= 128 slices,
#: and the reduction kernel's launch and tail
SPLIT_MIN_ITERS = 4
SPLIT_MAX = 128
SPLIT_REDUCE_US = 2.0
STREAMK_MIN_ITERS = 8  # CUTLASS's min_iters_per_sk_unit_
#: mainloop efficiency at the kernel family's own arch, by schedule
SCHEDULE_EFF = {
    "coop": 0.80,
    "pingpong": 0.78,
    "1sm": 0.80,
    "2sm": 0.85,
    "multistage": 0.80,
    "pipelined": 0.35,
}


def device_params(cc: int) -> tuple[float, float]:
    """(TFLOP/s per SM, DRAM GB/s per SM) of the nearest known compute capability below."""
    known = [c for c in DEVICES if c <= cc]
    return DEVICES[max(known) if known else min(DEVICES)]


def efficiency(kern: KernelInfo, cc: int) -> float:
    """Fraction of the SM's tensor peak that the kernel's K loop reaches."""
    eff = SCHEDULE_EFF.get(kern.schedule, 0.5)
    if kern.family < 90 <= cc:
        eff *= 0.6  # mma.sync on Hopper/Blackwell: ~60% of the wgmma/tcgen05 peak
    elif kern.family == 75 and cc >= 80:
        eff *= 0.5  # m16n8k8 issues at half the m16n8k16 rate
    # smaller tiles reuse each loaded byte for fewer MMAs (128x256 is CUTLASS's best)
    eff *= min(1.0, kern.tile[0] * kern.tile[1] / (128 * 256)) ** 0.15
    if kern.family >= 90 and kern.cluster[0] * kern.cluster[1] == 1:
        eff *= 0.97  # no TMA multicast across a cluster
    if kern.split != "none":
        eff *= 0.93  # the split scheduler's bookkeeping (H200: 0.8-1.0 of a twin's speed)
    return eff


def split_slices(kern: KernelInfo, m: int, n: int, k: int, sms: int, batch: int = 1) -> int:
    """Slices S of a parallel split-K kernel, as native/kernels/split_k.cuh chooses them.

    The most that keep one wave (output tiles x S <= SMs) and >= 4 K tiles per slice,
    among the counts that cut K into equal slices of whole K tiles (of the kernel's
    alignment when K is not whole tiles); 1 for a batch or when no count >= 2 does.

    >>> kern = KernelInfo(0, "", 90, "bfloat16", "bfloat16", "float32", "bfloat16", "tn",
    ...                   (128, 128, 64), (1, 1, 1), (0, 0, 0), 0, "coop", "linear",
    ...                   "splitk", (8, 8, 8))
    >>> split_slices(kern, 256, 256, 65536, 132)  # 4 tiles: 33 fit, 32 divides 1024 K tiles
    32
    """
    tm, tn, tk = kern.tile
    tiles = -(-m // tm) * -(-n // tn)
    unit = tk if k % tk == 0 else kern.align[0]
    if batch > 1 or tiles <= 0 or k % unit:
        return 1
    cap = min(sms // tiles, k // (SPLIT_MIN_ITERS * tk), SPLIT_MAX)
    return next((s for s in range(cap, 1, -1) if (k // unit) % s == 0), 1)


def decompose(
    kern: KernelInfo, tiles: int, iters: int, sms: int, slices: int = 1
) -> tuple[int, int, int]:
    """(K iterations on the busiest SM, busy SMs, peers per split tile) for the split mode.

    ``splitk``: parallel split-K, ``slices`` (see split_slices) units per tile, all at once.
    ``streamk``: CUTLASS 3.x's heuristic: data-parallel unless the last wave is less
    than half full; then the last 1-2 waves' K loops are spread over at most one wave of
    units of >= 8 iterations each (the sm80 family's CUTLASS 2.x stream-K is modelled
    the same way).
    """
    waves = -(-tiles // sms)
    if kern.split == "splitk":
        s = max(slices, 1)
        return -(-tiles * s // sms) * -(-iters // s), min(tiles * s, sms), s
    full, rem = divmod(tiles, sms)
    if kern.split != "streamk" or rem == 0 or 2 * rem >= sms or iters <= STREAMK_MIN_ITERS:
        return waves * iters, min(tiles, sms), 1
    dp_waves = max(full - 1, 0)
    sk_tiles = tiles - dp_waves * sms
    units = max(1, min(sms, sk_tiles * iters // STREAMK_MIN_ITERS))
    # unit boundaries fall inside tiles unless units divide evenly among them
    peers = -(-units // sk_tiles) + (units % sk_tiles != 0)
    busy = sms if dp_waves else units
    return dp_waves * iters + -(-sk_tiles * iters // units), busy, max(peers, 1)


#: tensor-core rate of an input dtype relative to fp16 (fp32 inputs: 3xTF32, three TF32
#: MMAs per product; fp64: DMMA, about 1/16 on the sm80/sm90 data-centre parts)
_RATE = {
    "float8_e4m3fn": 2.0,
    "float8_e5m2": 2.0,
    "int8": 2.0,
    "tfloat32": 0.5,
    "float32": 0.5 / 3,
    "float64": 1 / 16,
}


def model_time(
    kern: KernelInfo, m: int, n: int, k: int, sm_count: int, cc: int | None = None, batch: int = 1
) -> float:
    """Estimated microseconds for ``kern`` on a batch of m x n x k problems (see the notes
    above)."""
    cc = cc or kern.family
    sms = max(sm_count, 1)
    tflops_sm, gbps_sm = device_params(cc)
    tm, tn, tk = kern.tile
    cm, cn = kern.cluster[:2]  # clusters launch whole: a 2x1 cluster over one tile row
    tiles = -(-m // (tm * cm)) * cm * -(-n // (tn * cn)) * cn * max(batch, 1)  # idles half
    iters = max(-(-k // tk), 1)
    slices = split_slices(kern, m, n, k, sms, batch) if kern.split == "splitk" else 1
    sm_iters, busy, peers = decompose(kern, max(tiles, 1), iters, sms, slices)
    rate = tflops_sm * _RATE.get(kern.dtype_a, 1.0)
    compute_us = sm_iters * 2.0 * tm * tn * tk / (rate * 1e6 * efficiency(kern, cc))
    nbytes = max(batch, 1) * (
        m * k * DTYPE_BYTES[kern.dtype_a]
        + k * n * DTYPE_BYTES[kern.dtype_b]
        + m * n * DTYPE_BYTES[kern.dtype_d]
    )
    memory_us = nbytes / (gbps_sm * 1e3 * min(sms, busy / BW_SATURATION))
    fixup_us = 0.0
    if kern.split == "splitk":  # partials out and back in (the output's bytes are counted)
        fixup_us = SPLIT_REDUCE_US + slices * m * n * 4 * 2 / (gbps_sm * 1e3 * sms)
    elif peers > 1:
        fixup_us = peers * (tm * tn * 4 * 2 / (FIXUP_GBPS * 1e3) + FIXUP_SYNC_US)
    return max(compute_us, memory_us) + OVERLAP * min(compute_us, memory_us) + fixup_us


# ---- ordering -------------------------------------------------------------------------


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
    times: dict = {}

    def model_us(c):  # each candidate's model time once: the passes below all read it
        if c.name not in times:
            times[c.name] = model_time(c, m, n, k, sms, cc, batch)
        return times[c.name]

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
        keys, measured = bucket_keys(m * batch, n, k), []
        for c in runs_here:
            hit = None if c.name in named else residual(cal, config_of(c.base_name), keys)
            if hit:
                us = model_us(c) * math.exp(hit[0])
                measured.append((us, c.name, c, hit[1]))
        ranked += [
            (c, f"calibrated model (~{us:.3g} us; sweeps at {key})")
            for us, _, c, key in sorted(measured, key=lambda t: t[:2])
        ]
        named |= {c.name for _, _, c, _ in measured}
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
    want = (
        DTYPE_NAMES.get(problem.dtype_a),
        DTYPE_NAMES.get(problem.dtype_b),
        DTYPE_NAMES.get(problem.dtype_d),
    )
    if (kern.dtype_a, kern.dtype_b, kern.dtype_d) != want:
        return "dtypes differ"
    layout = LAYOUT_LETTERS[problem.layout_a] + LAYOUT_LETTERS[problem.layout_b]
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


def screen(lib, problem, all_kernels: list[KernelInfo]) -> tuple[list, list]:
    """(accepted kernels, [(kernel, why rejected)]): static checks, then the C side's."""
    accepted, rejected = [], []
    order = families_for(problem.cc)
    pref = ctypes.byref(problem)
    for kern in all_kernels:
        reason = static_match(kern, problem)
        if reason is None and kern.family not in order:
            reason = (
                f"sm{kern.family} kernels do not run on compute "
                f"{problem.cc // 10}.{problem.cc % 10}"
            )
        if reason is None and lib.pcr_kernel_check(kern.index, pref) != Status.OK:
            reason = lib.last_error()
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


def choose(lib, problem, all_kernels: list[KernelInfo], *, use_cache: bool = True) -> Choice:
    """Checks every kernel against ``problem`` and ranks the survivors.

    With ``use_cache`` (the default) the device's tuned cache comes first; tune() and the
    sweep pass False to see every candidate in table/model order.

    Raises:
        UnsupportedError: a pinned kernel cannot run the problem, or PYCUTLASS_RT_STRICT=1
            and the device has no current tuned cache (see pycutlass_rt.tune).
    """
    accepted, rejected = screen(lib, problem, all_kernels)
    choice = rank(problem, accepted, families_for(problem.cc))
    choice.rejected = rejected
    if not use_cache:
        return choice
    return apply_tuned(choice, _cache.lookup(lib, problem, [k.name for k in all_kernels]))
