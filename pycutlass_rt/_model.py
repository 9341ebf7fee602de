"""The analytic time model: estimated microseconds of one kernel on one problem.

The arithmetic is the library's (native/src/rank.cpp, ``pcr_model_terms``), so the
package, the table's fitter (heuristics/fit.py) and the library's own selection of a new
problem compute the same numbers; this module describes the model and reaches it.

Time in microseconds of one GEMM: max(compute, memory) + 0.1 min(compute, memory) +
split fix-up, where

- compute: the K-loop iterations the busiest SM runs (waves of output tiles, or its share
  of a split K loop) times one iteration's tensor-core time, from datasheet rates per
  compute capability and a mainloop efficiency per schedule (lower for small tiles,
  mma.sync on Hopper, no TMA multicast, split bookkeeping);
- memory: bytes of A, B and D over the DRAM bandwidth the busy SMs can draw (too few busy
  SMs cannot saturate it);
- fix-up: stream-K: a split tile's fp32 partial sums, added by its peers one after
  another (per peer, the partial's round trip through L2 and the wait on the previous
  peer's flag); parallel split-K: every slice's partials written and read back by a
  second kernel, at DRAM speed. Split-K slices and stream-K units follow what the
  kernels' schedulers do (native/kernels/split_k.cuh; CUTLASS's stream-K heuristic).

Measured sweeps (the shipped table's calibration) and tune() override the model wherever
they exist; heuristics/fit.py --check reports its regret on any sweep.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ._abi import PCR_MODEL_FEATURES, PCR_MODEL_WEIGHTS, PCR_PAIR_FEATURES, Model
from ._kernels import KernelInfo, desc_of
from ._lib import load

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

#: the features' names, in the order pcr_model.features holds them
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
WEIGHTS = PCR_MODEL_WEIGHTS
assert (
    len(FEATURES) == PCR_MODEL_FEATURES and WEIGHTS == 1 + len(FEATURES) * (len(FEATURES) + 3) // 2
)

#: the second look's features of a pair of candidates, a (ranked first) and b (second),
#: in the order pcr_rank computes them (pycutlass_rt.h, pcr_calibration): trees over these
#: decide whether b runs first (heuristics/fit.py fits them)
PAIR_FEATURES = (
    "log_time_ratio",  # log(b's calibrated time / a's)
    "log_m",
    "log_n",
    "log_k",
    "log_tile_m_ratio",
    "log_tile_n_ratio",
    "swap_ab_diff",  # b's swap_ab - a's
    "split_differs",
    *(f"diff_{f}" for f in FEATURES),  # b's model features - a's
    *(f"first_{f}" for f in FEATURES),  # a's
)
assert len(PAIR_FEATURES) == PCR_PAIR_FEATURES


@dataclass(frozen=True)
class Terms:
    """What the model computes for one kernel on one problem (pcr_model), in its units."""

    compute_us: float  # the busiest SM's K-loop iterations at the kernel's efficiency
    memory_us: float  # A, B and D over the bandwidth the busy SMs draw
    fixup_us: float  # split partials: stream-K's peer chain or split-K's reduction
    us: float  # the model's time
    tiles: int  # output tiles (clusters launch whole) times the batch
    iters: int  # K-loop iterations of one whole tile
    busy: int  # SMs with work
    peers: int  # units sharing one output tile (1: no split)
    sm_iters: int  # K-loop iterations the busiest SM runs
    slices: int  # a parallel split-K kernel's slices of K (1: none)
    sms: int
    tflops_sm: float  # the datasheet rates used, per SM
    gbps_sm: float
    fill_m: float  # share of the tiles' rows that hold the problem's (tile quantization)
    fill_n: float  # the same for columns
    features: tuple  # the calibration's features, in FEATURES order


def terms(
    kern: KernelInfo, m: int, n: int, k: int, sm_count: int, cc: int | None = None, batch: int = 1
) -> Terms:
    """The model's terms for ``kern`` on a batch of m x n x k problems on a GPU of
    ``sm_count`` SMs and compute capability ``cc`` (None: the kernel family's own).

    Example:
        >>> import pycutlass_rt as pcr
        >>> from pycutlass_rt._model import terms
        >>> kern = pcr.kernels()[0]
        >>> t = terms(kern, 4096, 4096, 4096, 132, 90)
        >>> t.us == max(t.compute_us, t.memory_us) + 0.1 * min(t.compute_us, t.memory_us) + t.fixup_us
        True
    """
    out = Model()
    lib = load()
    lib.check(
        lib.pcr_model_terms(
            ctypes.byref(desc_of(kern)), m, n, k, batch, sm_count, cc or 0, ctypes.byref(out)
        )
    )
    return Terms(
        out.compute_us,
        out.memory_us,
        out.fixup_us,
        out.us,
        out.tiles,
        out.iters,
        out.busy,
        out.peers,
        out.sm_iters,
        out.slices,
        out.sms,
        out.tflops_sm,
        out.gbps_sm,
        out.fill_m,
        out.fill_n,
        tuple(out.features),
    )


def model_time(
    kern: KernelInfo, m: int, n: int, k: int, sm_count: int, cc: int | None = None, batch: int = 1
) -> float:
    """Estimated microseconds for ``kern`` on a batch of m x n x k problems."""
    return terms(kern, m, n, k, sm_count, cc, batch).us


def features(t: Terms) -> tuple:
    """The calibration's features of one kernel's model terms, in FEATURES order."""
    return t.features


def expand(f: tuple) -> list:
    """[1, f..., f_i * f_j for i <= j]: what the calibration's weights multiply (the order
    pcr_rank's correction reads them in).

    >>> expand((2.0, 3.0))
    [1.0, 2.0, 3.0, 4.0, 6.0, 9.0]
    """
    out = [1.0, *f]
    for i, x in enumerate(f):
        out += [x * y for y in f[i:]]
    return out
