"""The analytic time model: estimated microseconds of one kernel on one problem.

From datasheet figures per compute capability (tensor rate and DRAM bandwidth per SM),
the kernel's tile, cluster, schedule and split mode, and the problem's shape, model_time
estimates compute (the busiest SM's K-loop iterations), memory (bytes over the bandwidth
the busy SMs can draw) and the fix-up of split tiles, as decompose and split_slices
mirror what the kernels' schedulers do. Ranking falls back on it where neither the tuned
cache nor the shipped table decides, and heuristics/fit.py calibrates against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._kernels import DTYPE_BYTES, KernelInfo

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
    "ws": 0.70,  # sm90a convolutions: one consumer warp group, a CTA per tile (not persistent)
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


@dataclass(frozen=True)
class Terms:
    """What the model computes for one kernel on one problem, in its own units."""

    compute_us: float  # the busiest SM's K-loop iterations at the kernel's efficiency
    memory_us: float  # A, B and D over the bandwidth the busy SMs draw
    fixup_us: float  # split partials: stream-K's peer chain or split-K's reduction
    tiles: int  # output tiles (clusters launch whole) times the batch
    sms: int
    iters: int  # K-loop iterations of one whole tile
    busy: int  # SMs with work
    peers: int  # units sharing one output tile (1: no split)
    fill_m: float = 1.0  # share of the tiles' rows that hold the problem's (tile quantization)
    fill_n: float = 1.0  # the same for columns

    @property
    def us(self) -> float:
        """The model's time: max(compute, memory) + OVERLAP x min + fix-up."""
        c, m = self.compute_us, self.memory_us
        return max(c, m) + OVERLAP * min(c, m) + self.fixup_us


def terms(
    kern: KernelInfo, m: int, n: int, k: int, sm_count: int, cc: int | None = None, batch: int = 1
) -> Terms:
    """The model's terms for ``kern`` on a batch of m x n x k problems (see the notes above)."""
    cc = cc or kern.family
    sms = max(sm_count, 1)
    tflops_sm, gbps_sm = device_params(cc)
    tm, tn, tk = kern.tile
    cm, cn = kern.cluster[:2]  # clusters launch whole: a 2x1 cluster over one tile row
    rows, cols = -(-m // (tm * cm)) * cm * tm, -(-n // (tn * cn)) * cn * tn
    tiles = rows // tm * (cols // tn) * max(batch, 1)  # a 2x1 cluster over one tile idles half
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
    return Terms(
        compute_us,
        memory_us,
        fixup_us,
        max(tiles, 1),
        sms,
        iters,
        busy,
        peers,
        max(m, 1) / max(rows, 1),
        max(n, 1) / max(cols, 1),
    )


def model_time(
    kern: KernelInfo, m: int, n: int, k: int, sm_count: int, cc: int | None = None, batch: int = 1
) -> float:
    """Estimated microseconds for ``kern`` on a batch of m x n x k problems (see the notes
    above)."""
    return terms(kern, m, n, k, sm_count, cc, batch).us


# ---- features: what the calibration corrects the model by ------------------------------
#
# The model gets the first-order shape of a kernel's time right and its details wrong:
# how a half-empty last wave really runs, what a short K loop's prologue and epilogue
# cost, where a problem sits between memory- and compute-bound, what padded tile rows cost
# a memory-bound kernel, a split's fix-up, and a floor of a few microseconds that no tile
# escapes. heuristics/fit.py fits, per kernel configuration, log(measured / model) as a
# quadratic function of these features (expand()), shrunk toward the fit over all
# configurations, so a shape no sweep timed is corrected by how the configuration behaved
# at similar waves, K-loop lengths, intensities and tile fills, not at similar M.

#: the features' names, in the order of features()
FEATURES = (
    "inv_waves",  # 1 / waves of output tiles: few waves, each SM's lone tile exposed
    "tail",  # the last wave's empty share (0: full, or a single wave)
    "busy",  # log(SMs with work / SMs)
    "inv_iters",  # 1 / K-loop iterations: prologue and epilogue against the main loop
    "memory_bound",  # log(memory / compute) where positive
    "compute_bound",  # the same where negative
    "fixup",  # the split fix-up's share of the model's time
    "floor",  # 1 us / model time: the launch-and-drain floor of tiny problems
    "size",  # log(model time / 1 us)
    "fill_m",  # log(problem rows / tile rows launched)
    "fill_n",  # log(problem columns / tile columns launched)
)
#: the length of expand(): a constant, the features, and their pairwise products
WEIGHTS = 1 + len(FEATURES) + len(FEATURES) * (len(FEATURES) + 1) // 2


def features(t: Terms) -> tuple:
    """The calibration's features of one kernel's model terms, in FEATURES order.

    >>> t = Terms(10.0, 5.0, 0.0, tiles=264, sms=132, iters=64, busy=132, peers=1)
    >>> [round(x, 3) for x in features(t)]
    [0.5, 0.0, 0.0, 0.016, 0.0, -0.693, 0.0, 0.095, 2.351, 0.0, 0.0]
    """
    waves = -(-t.tiles // t.sms)
    rem = t.tiles % t.sms
    ratio = math.log(max(t.memory_us, 1e-9) / max(t.compute_us, 1e-9))
    us = max(t.us, 1e-6)
    return (
        1.0 / waves,
        (1.0 - rem / t.sms) if waves > 1 and rem else 0.0,
        math.log(max(t.busy, 1) / t.sms),
        1.0 / t.iters,
        max(ratio, 0.0),
        min(ratio, 0.0),
        t.fixup_us / us,
        1.0 / us,
        math.log(us),
        math.log(t.fill_m),
        math.log(t.fill_n),
    )


def expand(f: tuple) -> list:
    """[1, f..., f_i * f_j for i <= j]: what the calibration's weights multiply.

    >>> expand((2.0, 3.0))
    [1.0, 2.0, 3.0, 4.0, 6.0, 9.0]
    """
    out = [1.0, *f]
    for i, x in enumerate(f):
        out += [x * y for y in f[i:]]
    return out
