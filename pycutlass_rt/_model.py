"""The analytic time model: estimated microseconds of one kernel on one problem.

From datasheet figures per compute capability (tensor rate and DRAM bandwidth per SM),
the kernel's tile, cluster, schedule and split mode, and the problem's shape, model_time
estimates compute (the busiest SM's K-loop iterations), memory (bytes over the bandwidth
the busy SMs can draw) and the fix-up of split tiles, as decompose and split_slices
mirror what the kernels' schedulers do. Ranking falls back on it where neither the tuned
cache nor the shipped table decides, and heuristics/fit.py calibrates against it.
"""

from __future__ import annotations

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
