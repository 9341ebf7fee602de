#!/usr/bin/env python3
"""Fit: raw sweep CSVs -> the shipped kernel-choice table; --check: a table's regret.

    python heuristics/fit.py heuristics/data/sweeps/h200_*_corpus_fit.csv.gz \\
        --base heuristics/table_v1.json --out heuristics/table_v1.json
    python heuristics/fit.py heuristics/data/eval/h200_bf16_tn_heldout.csv.gz \\
        --check heuristics/table_v1.json
    python heuristics/fit.py --rewrite heuristics/table_v1.json

A sample is one swept problem (GPU, dtypes, layout, M, N, K) with the time of every
candidate kernel. Kernels are compared as configurations: the name with dtypes and
layouts replaced by ``*`` (``sm90_*_128x256x64_c2x1_coop_a8``), so one entry serves every
dtype and layout. Per arch family the fit calibrates the analytic model of
pycutlass_rt/_model.py: for each configuration, weights of a quadratic function of the
model's features (_model.FEATURES and _model.expand: waves, last-wave tail, busy SMs,
K-loop length, memory or compute bound, split fix-up, the small-problem floor, size, tile
fill) that predict log(measured / model time), by ridge regression weighted toward the
fast kernels and shrunk toward the weights fitted over all configurations; and what those
weights leave at each swept shape (``neighbours``), which the selector smooths over the
swept shapes near a problem; and a second look, boosted trees that decide from the
features of the two leading candidates whether the second is the faster, learnt from the
calibration's out-of-fold rankings (``calibration`` in the table, which _table.py
resolves and the library's pcr_rank applies). Fitting refuses sweeps of the shape
corpus's held-out part: those only judge a table (``--check``).
The calibration belongs to the device's preferred family (sm90 from H100/H200 sweeps) and
covers kernels of every family that runs there: an H200 sweep of sm80 kernels competes
with the sm90 ones. The family's hand rules (a ``source`` that starts with ``hand:``) stay
first; its other rules are dropped. Alignment-fallback kernels (``_a1``) are left out:
they serve the problems nothing else accepts.

--cv FOLDS fits without each fold of the corpus's model families and judges on it (the
fit part only: what the fit's settings are chosen by).
--check reports, per family, the geomean of best/chosen and the share of samples within
5% of the best, for the table, for the analytic model alone, and for the choice in
effect when the sweep ran (its rank 0); where the sweep timed torch's cuBLAS call
(``sweep.py --peer``), also the chosen and the best kernel against it. Run it on sweeps
of the corpus's held-out part (heuristics/data/eval/) for figures on shapes no fit saw.

Sweeps are read as plain ``.csv`` or packed ``.csv.gz`` (datafiles.py); a table names
each sweep it was fitted from by the sha256 of its CSV text (``sources``, and each
calibration's ``source`` as ``path@first 16 hex digits``), the same packed or not, and
--check verifies the named files that are present against those digests (exit status 1
where one differs).

The table is written as format 7 (``write_table``): JSON of all but its long number
arrays, which are packed as little-endian values into one deflated buffer in a binary file
beside it (``table_v1.bin``; pycutlass_rt/_table.py's ``read`` inflates it once and expands
them back into the lists, every value exact), and ahead of that buffer, uncompressed, the
arrays the library ranks with, computed from the lists here, which a process hands the
library as they are. ``--rewrite TABLE`` writes a table of an older format in this one, its
content unchanged.

Internal API relied on (a tool of the source tree, released with the library it fits):
``pycutlass_rt._model`` (the analytic model and its features, which the calibration
corrects), ``pycutlass_rt._select.ranked`` and ``families_for`` (the library's ranking
under an alternative table, so --check and the second look judge what pcr_rank would
do), ``pycutlass_rt._table`` (``config_of``, the configurations the table is keyed by;
``read``, ``PACKED_TYPES``, ``BINARY_MAGIC``, ``calibration`` and ``ranking_arrays``, the
files this writes), ``pycutlass_rt._abi``'s enums (the words of kernel names, the rank
reasons) and ``pycutlass_rt._dtypes.DTYPE_TOKENS`` (a kernel name's dtype words);
``KernelInfo`` is public.
"""

from __future__ import annotations

import argparse
import array
import collections
import csv
import functools
import hashlib
import io
import json
import math
import os
import random
import re
import sys
import types
import zlib
from dataclasses import dataclass, field

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from heuristics import datafiles  # noqa: E402
from pycutlass_rt import KernelInfo, _model, _select, _table  # noqa: E402  (the library's model)
from pycutlass_rt._abi import Epilogue, RankReason, Schedule, Split  # noqa: E402
from pycutlass_rt._dtypes import DTYPE_TOKENS  # noqa: E402

REQUIRED = ("m", "n", "k", "kernel", "median_us")
#: what _table.TABLE_FORMATS reads (5: feature calibrations, neighbours, second look; 6:
#: format 5 written compact, long number arrays packed; 7: those in a binary file beside the
#: JSON, with the arrays the library ranks with: write_table)
TABLE_FORMAT = 7
#: a list of at least this many numbers (or of rows of numbers, one length) is packed
PACK_MIN = 64
PEER = "peer:cublas"  # sweep.py --peer's row: torch's cuBLAS call, not a kernel
#: ridge strength toward the all-configuration weights (per-configuration fit) and toward
#: zero (the all-configuration fit), in units of samples; a kernel's rows weigh
#: (best / its time) ** FOCUS, as selection cares about the fast ones (chosen by 5-fold
#: cross-validation over projections of the corpus's fit part)
SHRINK, SHRINK_SHARED, FOCUS = 32.0, 1.0, 5.0
#: the neighbours' smoothing (pycutlass_rt/_table.py): a Gaussian of this width in
#: log(M), log(N), log(K), its prior weight toward no further correction, and the least
#: row weight kept (kernels more than 1.8x slower than a sample's best add nothing there);
#: chosen by the same cross-validation (bf16: 80.5% -> 84.5% within 5%, fp8: 90.4% -> 92.5%)
NEAR_BANDWIDTH, NEAR_PRIOR, NEAR_MIN_WEIGHT = 0.25, 0.1, 0.05
WITHIN = 1.05  # "close to the best" in --check
#: the second look's trees (_table.py): boosting rounds, learning rate, leaves per tree,
#: least rows per leaf, and thresholds per feature (at most); they learn from out-of-fold
#: rankings over PAIR_FOLDS folds of the fit part's model families. Chosen by 5-fold
#: cross-validation over the fit part (2026-12-04, bf16: 87.6% within 5% without the
#: second look, 90.2% with; trees of depth 3 did 88.4-88.8%, a logistic regression 88.6%)
PAIR_ROUNDS, PAIR_RATE, PAIR_LEAVES = 200, 0.05, 15
PAIR_MIN_LEAF, PAIR_BINS, PAIR_FOLDS = 20, 255, 5

# the words of kernel names past the tile: KernelInfo holds them as they are
_SCHEDULES = {s.token for s in Schedule}
_SPLITS = {s.token for s in Split} - {Split.SPLIT_NONE.token}
_EPILOGUES = {e.token for e in Epilogue} - {Epilogue.EPI_LINEAR.token}
_NAME = re.compile(
    r"^sm(?P<family>\d+)_(?P<a>[a-z0-9]+)_(?P<b>[a-z0-9]+)_(?P<acc>[a-z0-9]+)_"
    r"(?P<d>[a-z0-9]+)_(?P<layout>[tn]{2})_(?P<tile>\d+x\d+x\d+)_(?P<rest>.+)_"
    r"a(?P<align>\d+)$"
)


config_of = _table.config_of  # a kernel name without dtypes and layouts


def kernel_info(name: str, index: int = 0) -> KernelInfo:
    """A KernelInfo decoded from a kernel name (for the model, without the library)."""
    m = _NAME.match(name)
    if not m:
        raise ValueError(f"not a kernel name: {name!r}")
    rest = m["rest"].split("_")
    x, y = (int(v) for v in rest[0][1:].split("x"))
    split = next((t for t in rest if t in _SPLITS), Split.SPLIT_NONE.token)
    epilogue = next((t for t in rest if t in _EPILOGUES), Epilogue.EPI_LINEAR.token)
    if rest[0].startswith("c"):  # CUTLASS 3.x: cluster and schedule
        if rest[1] not in _SCHEDULES:
            raise ValueError(f"{name!r}: unknown schedule {rest[1]!r}")
        cluster, warps, stages, schedule = (x, y, 1), (0, 0, 0), 0, rest[1]
    else:  # CUTLASS 2.x: warps and stages
        stages = int(rest[1][1:])
        cluster, warps = (1, 1, 1), (x, y, 1)
        schedule = (Schedule.SCHED_PIPELINED if stages == 2 else Schedule.SCHED_MULTISTAGE).token
    align = int(m["align"])
    return KernelInfo(
        index,
        name,
        int(m["family"]),
        DTYPE_TOKENS[m["a"]],
        DTYPE_TOKENS[m["b"]],
        DTYPE_TOKENS[m["acc"]],
        DTYPE_TOKENS[m["d"]],
        m["layout"],
        tuple(int(v) for v in m["tile"].split("x")),
        cluster,
        warps,
        stages,
        schedule,
        epilogue,
        split,
        (align, align, align),
        "swapab" in rest,
    )


# ---- reading sweeps -----------------------------------------------------------------------


@dataclass
class Sample:
    """One swept problem: every candidate's time, and where the numbers came from."""

    family: int
    m: int
    n: int
    k: int
    source: str  # path@sha256-prefix of the sweep file's CSV text
    sm_count: int
    cc: int
    times: dict = field(default_factory=dict)  # kernel name -> us
    order: list = field(default_factory=list)  # kernel names in the sweep's selection order
    peer_us: float | None = None  # torch's cuBLAS call on the same operands (--peer)

    @property
    def shape(self) -> tuple:
        return (self.m, self.n, self.k)

    @property
    def best(self) -> float:
        return min(self.times.values())

    @functools.cached_property
    def terms(self) -> dict:
        """Kernel name -> the model's terms (computed once, after every row is in)."""
        return {
            name: _model.terms(kernel_info(name), self.m, self.n, self.k, self.sm_count, self.cc)
            for name in self.times
        }

    @functools.cached_property
    def residuals(self) -> dict:
        """Kernel name -> log(measured / model time)."""
        return {name: math.log(us / self.terms[name].us) for name, us in self.times.items()}


def file_label(path: str, digest: str) -> str:
    """heuristics/data/sweeps/h200_bf16.csv.gz@1a2b3c4d5e6f7a8b (relative to the
    repository)."""
    full = os.path.abspath(path)
    rel = os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else path
    return f"{rel}@{digest[:16]}"


def read_samples(paths: list[str]) -> tuple[list[Sample], list[dict], int]:
    """(samples, sources, rows skipped: alignment fallbacks, families foreign to the GPU)."""
    samples: dict = {}
    peers: dict = {}  # (file, dtype, layout, m, n, k) -> us
    sources, skipped = [], 0
    for path in paths:
        text = datafiles.read_bytes(path)  # decompressed: the digest is the CSV text's
        digest = hashlib.sha256(text).hexdigest()
        label = file_label(path, digest)
        rows = 0
        with io.StringIO(text.decode("utf-8"), newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise SystemExit(f"{path}: missing columns {missing}")
            for i, row in enumerate(reader):
                if row["kernel"] == PEER:
                    peers[
                        (label, row.get("dtype"), row.get("layout"), row["m"], row["n"], row["k"])
                    ] = float(row["median_us"])
                    continue
                family = (
                    int(_NAME.match(row["kernel"])["family"])
                    if _NAME.match(row["kernel"])
                    else None
                )
                if family is None:
                    raise SystemExit(f"{path}: row {i + 2}: not a kernel name: {row['kernel']!r}")
                cc = int(row.get("cc") or family)
                if family not in _select.families_for(cc) or row["kernel"].endswith("_a1"):
                    skipped += 1
                    continue
                family = _select.families_for(cc)[0]  # the rules' family on this GPU
                key = (
                    label,
                    row.get("gpu"),
                    row.get("dtype"),
                    row.get("dtype_d"),
                    row.get("layout") or row["kernel"].split("_")[5],
                    family,
                    int(row["m"]),
                    int(row["n"]),
                    int(row["k"]),
                )
                s = samples.get(key)
                if s is None:
                    s = samples[key] = Sample(
                        family, key[6], key[7], key[8], label, int(row.get("sm_count") or 132), cc
                    )
                s.times[row["kernel"]] = float(row["median_us"])
                s.order.append((int(row.get("rank") or i), row["kernel"]))
                rows += 1
        sources.append({"file": label.rsplit("@", 1)[0], "sha256": digest, "rows": rows})
    for key, s in samples.items():
        s.order = [name for _, name in sorted(s.order)]
        s.peer_us = peers.get((key[0], key[2], key[4], *(str(v) for v in key[6:])))
    return list(samples.values()), sources, skipped


def heldout_shapes() -> set:
    """(M, N, K) of the corpus's held-out part that its fit part lacks (either orientation:
    a sweep records N = 1 problems as computed, M = 1)."""
    from heuristics import corpus

    def both(part):
        return {x for s in corpus.load(part) for x in ((s.m, s.n, s.k), (s.n, s.m, s.k))}

    return both("heldout") - both("fit")


def refuse_heldout(samples: list[Sample]) -> None:
    """Stops a fit on sweeps that hold shapes of the corpus's held-out part."""
    held = heldout_shapes()
    bad = sorted({(s.source, s.shape) for s in samples if s.shape in held})
    if bad:
        raise SystemExit(
            f"{len(bad)} swept shapes belong to the corpus's held-out part (first: "
            f"{bad[0][1]} in {bad[0][0]}): held-out sweeps judge a table (--check), they "
            "never fit one"
        )


# ---- fitting ------------------------------------------------------------------------------


def ridge(rows: list, lam: float, prior: np.ndarray) -> np.ndarray:
    """argmin sum weight (x w - y)^2 + lam |w - prior|^2 over rows of (x, y, weight)."""
    x = np.array([r[0] for r in rows])
    y = np.array([r[1] for r in rows])
    xw = x * np.array([r[2] for r in rows])[:, None]
    return np.linalg.solve(x.T @ xw + lam * np.eye(x.shape[1]), xw.T @ y + lam * prior)


def calibrate(samples: list[Sample], second_look: bool = True) -> dict:
    """One family's calibration: {"features": names, "weights": {config: w},
    "neighbours": ..., "second_look": ...}: per configuration, the weighted ridge fit of
    log(measured / model) on the expanded features, shrunk (SHRINK) toward the fit over
    every configuration's samples; then what that fit leaves, per swept shape, for the
    ranking to smooth; then the second look's trees (pair_trees)."""
    rows = collections.defaultdict(list)  # config -> [(expanded features, residual, weight)]
    for s in samples:
        for name, r in s.residuals.items():
            x = _model.expand(_model.features(s.terms[name]))
            rows[config_of(name)].append((x, r, (s.best / s.times[name]) ** FOCUS))
    shared = ridge([row for per in rows.values() for row in per], SHRINK_SHARED, 0.0)
    weights = {
        config: [round(float(v), 5) for v in ridge(per, SHRINK, shared)]
        for config, per in sorted(rows.items())
    }
    cal = {"features": list(_model.FEATURES), "weights": weights}
    cal["neighbours"] = neighbours(samples, cal)
    if second_look and (trees := pair_trees(samples)):
        cal["second_look"] = trees
    return {
        **cal,
        "samples": len(samples),
        "shapes": len({s.shape for s in samples}),
        "source": sorted({s.source for s in samples}),
    }


def predicted(cal: dict, config: str, terms) -> float:
    """log(time / model time) the calibration's weights give ``config`` on a problem whose
    model terms are ``terms`` (what pcr_rank computes before the neighbours)."""
    return float(np.dot(cal["weights"][config], _model.expand(_model.features(terms))))


def neighbours(samples: list[Sample], cal: dict) -> dict:
    """What the fitted weights leave of log(measured / model) on each swept shape, per
    configuration: {"bandwidth", "prior", "shapes": [[M, N, K], ...], "configs": {config:
    {"at": shape indices, "r": residuals, "w": row weights}}} (see pycutlass_rt/_table.py).
    Rows of a shape swept twice (two files, or two dtypes of one configuration) all stay."""
    index: dict = {}
    configs = collections.defaultdict(lambda: {"at": [], "r": [], "w": []})
    for s in samples:
        for name, us in s.times.items():
            w = (s.best / us) ** FOCUS
            if w < NEAR_MIN_WEIGHT:
                continue
            config = config_of(name)
            fitted = predicted(cal, config, s.terms[name])
            at = index.setdefault(s.shape, len(index))
            row = configs[config]
            row["at"].append(at)
            row["r"].append(round(s.residuals[name] - fitted, 4))
            row["w"].append(round(w, 4))
    return {
        "bandwidth": NEAR_BANDWIDTH,
        "prior": NEAR_PRIOR,
        "shapes": [list(shape) for shape in index],
        "configs": dict(sorted(configs.items())),
    }


# ---- the second look ----------------------------------------------------------------


def pair_features(s: Sample, a: KernelInfo, b: KernelInfo, us_a: float, us_b: float) -> list:
    """_model.PAIR_FEATURES of the pair (a ranked first, b second) on ``s``'s problem, as
    pcr_rank computes them."""
    fa, fb = s.terms[a.name].features, s.terms[b.name].features
    return [
        math.log(us_b / us_a),
        *(math.log(max(v, 1)) for v in s.shape),
        math.log(b.tile[0] / a.tile[0]),
        math.log(b.tile[1] / a.tile[1]),
        float(b.swap_ab) - float(a.swap_ab),
        float(b.split != a.split),
        *(y - x for x, y in zip(fa, fb)),
        *fa,
    ]


def ranking(s: Sample, rules: dict) -> list:
    """pcr_rank's order of ``s``'s swept kernels under ``rules``: (kernel, RankReason, us)."""
    cands = [kernel_info(name, i) for i, name in enumerate(sorted(s.times))]
    problem = types.SimpleNamespace(m=s.m, n=s.n, k=s.k, sm_count=s.sm_count, cc=s.cc)
    return _select.ranked(problem, cands, _select.families_for(s.cc), rules)


def leading_pair(s: Sample, table: dict):
    """(a, b, their calibrated us) where ``table``'s calibrated times rank two candidates
    first on ``s``, as pcr_rank would ask the second look; else None."""
    order = ranking(s, table)
    calibrated = RankReason.RANK_CALIBRATED, RankReason.RANK_SECOND_LOOK
    if len(order) < 2 or order[0][1] not in calibrated or order[1][1] not in calibrated:
        return None
    (a, _, us_a), (b, _, us_b) = order[:2]
    return (b, a, us_b, us_a) if order[0][1] == RankReason.RANK_SECOND_LOOK else (a, b, us_a, us_b)


def pair_trees(samples: list[Sample]) -> dict | None:
    """The second look: trees that tell, from the pair's features, whether the second of
    the two leading calibrated candidates is the faster, learnt from out-of-fold rankings
    (the fit part's model families in PAIR_FOLDS folds: each fold ranked by a calibration
    fitted without it, so the trees see the errors of shapes the calibration did not
    see). Rows weigh |log(time a / time b)|: a wrong swap costs what the times differ."""
    families = corpus_families()
    groups = sorted({g for s in samples if (g := families.get(s.shape)) is not None})
    if len(groups) < PAIR_FOLDS:
        return None
    random.Random(0).shuffle(groups)
    x, y, w = [], [], []
    for f in range(PAIR_FOLDS):
        held = set(groups[f::PAIR_FOLDS])
        train = [s for s in samples if families.get(s.shape) not in held]
        table = {"families": {}, "calibration": {f"sm{samples[0].family}": calibrate(train, False)}}
        for s in samples:
            if families.get(s.shape) in held and (pair := leading_pair(s, table)):
                a, b, us_a, us_b = pair
                ta, tb = s.times[a.name], s.times[b.name]
                x.append(pair_features(s, a, b, us_a, us_b))
                y.append(float(tb < ta))
                w.append(abs(math.log(ta / tb)))
    if len(x) < 2 * PAIR_MIN_LEAF or not 0 < sum(y) < len(y):
        return None
    return {"features": list(_model.PAIR_FEATURES), **boost(np.array(x), np.array(y), np.array(w))}


def boost(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict:
    """Gradient-boosted regression trees for a logistic score of y (0/1) with row weights
    w: PAIR_ROUNDS trees of up to PAIR_LEAVES leaves (grown best gain first, PAIR_MIN_LEAF
    rows at least per leaf, thresholds between PAIR_BINS quantiles per feature), each
    leaf's Newton step times PAIR_RATE. Returns {"base", "tree_start", "feature",
    "threshold", "left", "right", "value"}: flat node arrays, children after parents,
    as pcr_calibration's pair_* fields hold them."""
    n, d = x.shape
    cuts, codes = [], np.empty((n, d), np.int64)
    for j in range(d):
        values = np.unique(np.quantile(x[:, j], np.linspace(0, 1, PAIR_BINS + 1)))
        cut = (values[:-1] + values[1:]) / 2
        cuts.append(cut)
        codes[:, j] = np.searchsorted(cut, x[:, j], side="left")  # code <= t: x <= cut[t]
    p0 = float(np.clip(np.dot(w, y) / w.sum(), 1e-6, 1 - 1e-6))
    base = math.log(p0 / (1 - p0))
    raw = np.full(n, base)
    leaf = {"feature": -1, "threshold": 0.0, "left": -1, "right": -1, "value": 0.0}
    out = {"base": base, "tree_start": [], **{key: [] for key in leaf}}

    def new_leaf() -> int:
        for key, empty in leaf.items():
            out[key].append(empty)
        return len(out["feature"]) - 1

    def best_split(rows, g, h):
        best = None
        G, H = g[rows].sum(), h[rows].sum()
        for j in range(d):
            size = len(cuts[j]) + 1
            c = codes[rows, j]
            cg = np.cumsum(np.bincount(c, g[rows], size))[:-1]
            ch = np.cumsum(np.bincount(c, h[rows], size))[:-1]
            cn = np.cumsum(np.bincount(c, minlength=size))[:-1]
            ok = (cn >= PAIR_MIN_LEAF) & (len(rows) - cn >= PAIR_MIN_LEAF) & (ch > 1e-3)
            ok &= H - ch > 1e-3
            if not ok.any():
                continue
            gain = np.where(ok, cg**2 / np.maximum(ch, 1e-12) + (G - cg) ** 2 /
                            np.maximum(H - ch, 1e-12) - G**2 / H, -np.inf)  # fmt: skip
            t = int(np.argmax(gain))
            if gain[t] > 1e-12 and (best is None or gain[t] > best[0]):
                best = (float(gain[t]), j, t)
        return best

    for _ in range(PAIR_ROUNDS):
        p = 1 / (1 + np.exp(-raw))
        g, h = w * (p - y), w * p * (1 - p)
        root = new_leaf()
        out["tree_start"].append(root)
        leaves = {root: np.arange(n)}  # node -> its rows
        splits = {root: best_split(leaves[root], g, h)}
        while len(leaves) < PAIR_LEAVES:
            node = max(
                (nd for nd in leaves if splits[nd]), key=lambda nd: splits[nd][0], default=None
            )
            if node is None:
                break
            _, j, t = splits.pop(node)
            rows = leaves.pop(node)
            go_left = codes[rows, j] <= t
            out["feature"][node], out["threshold"][node] = j, float(cuts[j][t])
            for side, part in (("left", rows[go_left]), ("right", rows[~go_left])):
                child = out[side][node] = new_leaf()
                leaves[child] = part
                splits[child] = best_split(part, g, h)
        for node, rows in leaves.items():
            value = -PAIR_RATE * g[rows].sum() / max(h[rows].sum(), 1e-12)
            out["value"][node] = round(value, 6)
            raw[rows] += out["value"][node]
    out["threshold"] = [round(v, 9) for v in out["threshold"]]
    return out


def by_family(samples: list[Sample]) -> dict:
    """{"sm90": its samples, ...}, families in name order."""
    out = collections.defaultdict(list)
    for s in samples:
        out[f"sm{s.family}"].append(s)
    return dict(sorted(out.items()))


def calibrations(samples: list[Sample]) -> dict:
    """{"sm90": calibrate(its samples), ...} for the families the samples cover."""
    return {fam: calibrate(ss) for fam, ss in by_family(samples).items()}


def is_hand_rule(rule: dict) -> bool:
    """A rule written by a person (its source says ``hand: why``), not fitted."""
    return any(str(src).startswith("hand:") for src in rule.get("source", []))


def fit(samples: list[Sample], sources: list[dict], base: dict | None = None) -> dict:
    """The table: calibrations for the families the samples cover, ``base``'s rules kept.

    In a calibrated family only ``base``'s hand rules stay (first): they cover what sweeps
    do not see (e.g. launch-bound sizes, where host cost matters more than device time).
    """
    cal = calibrations(samples)
    families = dict((base or {}).get("families", {}))
    families.update({fam: [r for r in families.get(fam, []) if is_hand_rule(r)] for fam in cal})
    calibrated = ", ".join(cal) or "none"
    return {
        "format": TABLE_FORMAT,
        "about": f"Families {calibrated} calibrated by heuristics/fit.py from the sweeps "
        "in 'sources' (each calibration names its own); rules as in the base "
        "table. Rules are read first-match (max_m/max_n/max_k bounds, kernel-name "
        "patterns best first); then calibrated model times (the model's estimate "
        "times exp(weights . features), the configuration's weights fitted on the "
        "sweeps); unnamed, unmeasured candidates follow in model order.",
        "sources": sources,
        "families": dict(sorted(families.items())),
        "calibration": {**(base or {}).get("calibration", {}), **cal},
    }


# ---- the table file -------------------------------------------------------------------------


def _int_code(lo: int, hi: int) -> str | None:
    """The narrowest packed integer type that holds lo..hi (None: none does)."""
    for code in ("<i1", "<i2", "<i4", "<i8"):
        bound = 1 << (8 * int(code[2:]) - 1)
        if -bound <= lo and hi < bound:
            return code
    return None


def packed(values: list, arrays: bytearray) -> dict | None:
    """Appends ``values`` (numbers, or rows of numbers of one length) to ``arrays`` as
    little-endian values (at an offset a multiple of 8) and returns the packed form
    _table.read expands: {"packed": "<f8" (or "<i1".."<i8", the narrowest that holds the
    integers), "offset": bytes into ``arrays``, "count": values[, "shape": [rows,
    columns]]}; None, appending nothing, where they do not pack exactly (integers mixed
    with floats, ragged rows).

    >>> arrays = bytearray(b"x")
    >>> packed([1, 2, 300], arrays), len(arrays)
    ({'packed': '<i2', 'offset': 8, 'count': 3}, 14)
    >>> packed([[1.5, 2.0], [3.0, 4.0]], arrays)["shape"], packed([1, 2.5], arrays), len(arrays)
    ([2, 2], None, 48)
    """
    shape = None
    flat = values
    if values and all(isinstance(v, list) for v in values):
        widths = {len(v) for v in values}
        if len(widths) != 1 or widths == {0}:
            return None
        shape = [len(values), widths.pop()]
        flat = [x for row in values for x in row]
    if not flat:
        return None
    if all(isinstance(x, int) and not isinstance(x, bool) for x in flat):
        code = _int_code(min(flat), max(flat))
    elif all(isinstance(x, float) for x in flat):
        code = "<f8"
    else:
        return None
    if code is None:
        return None
    items = array.array(_table.PACKED_TYPES[code], flat)
    if items.itemsize != int(code[2:]):
        return None  # a platform whose C types have other sizes: the list as it is
    if sys.byteorder == "big":
        items.byteswap()
    arrays.extend(bytes(-len(arrays) % 8))  # aligned for the reader's typed views
    out = {"packed": code, "offset": len(arrays), "count": len(flat)}
    arrays.extend(items.tobytes())
    if shape:
        out["shape"] = shape
    return out


def compact(table: dict) -> tuple[dict, bytearray]:
    """``table`` with every list of PACK_MIN numbers or more packed (:func:`packed`), and
    the buffer that holds them: what formats 6 and 7 keep in JSON (format 6 ends it with
    the buffer as ``"arrays"``: {"size": its bytes, "deflate": its raw deflate stream in
    hex digits}; format 7 keeps it in the binary file beside it: :func:`write_table`)."""
    arrays = bytearray()

    def pack(obj):
        if isinstance(obj, dict):
            return {key: pack(value) for key, value in obj.items()}
        if isinstance(obj, list):
            if len(obj) >= PACK_MIN and (p := packed(obj, arrays)) is not None:
                return p
            return [pack(value) for value in obj]
        return obj

    return pack(table), arrays


def _deflated(buffer: bytes) -> bytes:
    """``buffer``'s raw deflate stream (no zlib header or checksum: the reader inflates it
    into one buffer of the size the table states)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    return deflate.compress(bytes(buffer)) + deflate.flush()


def binary_path(path: str) -> str:
    """The binary file :func:`write_table` writes beside the table ``path`` (``.bin`` for
    ``.json``)."""
    root, ext = os.path.splitext(path)
    return path + ".bin" if ext == ".bin" else root + ".bin"


def write_table(table: dict, path: str) -> None:
    """Writes ``table`` (format 5's content) as format 7: JSON at ``path`` holding all but
    its long number lists, which are packed (:func:`compact`) into a deflated buffer in the
    binary file beside it (:func:`binary_path`), with each calibration's ranking arrays
    (_table.ranking_arrays: what pcr_calibration takes, computed once here) ahead of it in
    the library's own types, uncompressed, so a process loads the table by reading them
    (pycutlass_rt/_table.py's TABLE_FORMATS notes the layout). _table.read gives back
    ``table``'s lists, every value exact. The JSON is indented: its rules, sources and
    scalars read and diff as text."""
    out, lists = compact(table)
    out = {"format": TABLE_FORMAT, **{k: v for k, v in out.items() if k != "format"}}
    where = binary_path(path)
    body = bytearray()  # what follows the header: offsets count from the file's start
    start = len(_table.BINARY_MAGIC) + 16
    ranking = {}
    for key, cal in table.get("calibration", {}).items():
        if _table.calibration(int(key[2:]), table) is None:
            continue  # not this version's features: the library is not handed it
        fields = {}
        for array_name, items in _table.ranking_arrays(cal).items():
            code = {"i": "<i4", "d": "<f8"}[items.typecode]
            if items.itemsize != int(code[2:]):
                raise SystemExit(f"this platform's {items.typecode!r} arrays are not {code}")
            if sys.byteorder == "big":
                items.byteswap()
            body.extend(bytes(-(start + len(body)) % 8))  # aligned for the library's types
            fields[array_name] = {"array": code, "offset": start + len(body), "count": len(items)}
            body.extend(items.tobytes())
        ranking[key] = fields
    end = start + len(body)
    stream = _deflated(lists)
    body.extend(stream)
    digest = hashlib.sha256(body).hexdigest()
    out["ranking"] = ranking
    out["arrays"] = {
        "file": os.path.basename(where),
        "size": start + len(body),
        "sha256": digest,
        "ranking": end,
        "lists": {"offset": end, "length": len(stream), "size": len(lists)},
    }
    # the binary file first: the old JSON refuses it by its header, should a process load
    # the table between the two writes
    with open(where, "wb") as f:
        f.write(_table.BINARY_MAGIC + bytes.fromhex(digest[:32]) + body)
    text = json.dumps(out, indent=1)
    with open(path, "w") as f:
        f.write(text + "\n")


def verify_sources(table: dict) -> tuple[list[str], list[str]]:
    """(files that differ from the digest ``table`` names them by, files not here): the
    ``sources`` and every calibration's ``source`` labels (``path@prefix``), paths relative
    to the repository; digests of the CSV text (datafiles.digest), packed or not."""
    named: dict = {}
    for src in table.get("sources", []):
        named.setdefault(src["file"], set()).add(src["sha256"])
    for cal in table.get("calibration", {}).values():
        for label in cal.get("source", []):
            path, _, prefix = str(label).rpartition("@")
            if path:
                named.setdefault(path, set()).add(prefix)
    differ, missing = [], []
    for path, digests in sorted(named.items()):
        full = path if os.path.isabs(path) else os.path.join(ROOT, path)
        if not os.path.exists(full):
            missing.append(path)
            continue
        have = datafiles.digest(full)
        if not all(have.startswith(d) for d in digests):
            differ.append(f"{path}: sha256 {have[:16]}, the table names {sorted(digests)}")
    return differ, missing


# ---- checking -----------------------------------------------------------------------------


def _model_choice(s: Sample, rules: dict) -> float:
    return s.times[ranking(s, rules)[0][0].name]


SELECTORS = {
    "table": lambda ss, table: [_model_choice(s, table) for s in ss],
    "model only": lambda ss, table: [_model_choice(s, {"families": {}}) for s in ss],
    "when swept": lambda ss, table: [s.times[s.order[0]] for s in ss],
}


def check(table: dict, samples: list[Sample]) -> dict:
    """{family: {selector: {"geomean": best/chosen, "within_5pct": %, "worst": [...]}}},
    and where the sweeps timed torch's cuBLAS call, {"vs peer": {...}} per family: the
    table's choice and the build's best against it (geomean, shapes below 0.85x, worst 5).
    """
    report = {}
    for fam, ss in by_family(samples).items():
        report[fam] = {}
        for name, pick in SELECTORS.items():
            ratios = [(s.best / us, s) for s, us in zip(ss, pick(ss, table))]
            close = sum(r >= 1 / WITHIN for r, _ in ratios)
            worst = sorted(ratios, key=lambda r: r[0])[:3]
            report[fam][name] = {
                "samples": len(ss),
                "geomean": geomean(r for r, _ in ratios),
                "within_5pct": round(100.0 * close / len(ratios), 1),
                "worst": [f"{s.m}x{s.n}x{s.k} {r:.3f}" for r, s in worst],
            }
            if name == "table":
                chosen = {id(s): us for s, us in zip(ss, pick(ss, table))}
        timed = [s for s in ss if s.peer_us]
        if timed:
            ours = sorted(((s.peer_us / chosen[id(s)], s) for s in timed), key=lambda t: t[0])
            report[fam]["vs peer"] = {
                "samples": len(timed),
                "chosen": geomean(r for r, _ in ours),
                "best": geomean(s.peer_us / s.best for s in timed),
                "below_085": sum(r < 0.85 for r, _ in ours),
                "worst": [f"{s.m}x{s.n}x{s.k} {r:.2f}" for r, s in ours[:5]],
            }
    return report


def geomean(values) -> float:
    logs = [math.log(v) for v in values]
    return round(math.exp(sum(logs) / len(logs)), 4)


def format_report(report: dict) -> str:
    lines = []
    for fam, selectors in report.items():
        for name, r in selectors.items():
            if name == "vs peer":
                lines.append(
                    f"{fam:6} vs cuBLAS   chosen {r['chosen']:.3f}x, build's best "
                    f"{r['best']:.3f}x (geomean of {r['samples']}); {r['below_085']} below "
                    f"0.85x; worst {', '.join(r['worst'])}"
                )
                continue
            lines.append(
                f"{fam:6} {name:11} best/chosen geomean {r['geomean']:.3f}, "
                f"{r['within_5pct']:5.1f}% within 5% of {r['samples']} samples; "
                f"worst {', '.join(r['worst'])}"
            )
    return "\n".join(lines)


# ---- cross-validation ---------------------------------------------------------------------


def corpus_families() -> dict:
    """(M, N, K) of the corpus's fit part -> its model family (either orientation: a sweep
    records N = 1 problems as computed, M = 1)."""
    from heuristics import corpus

    out: dict = {}
    for s in corpus.load("fit"):
        out.setdefault((s.m, s.n, s.k), s.family)
        out.setdefault((s.n, s.m, s.k), s.family)
    return out


def cross_validate(samples: list[Sample], folds: int, group_of, seed: int = 0) -> dict:
    """{source: (geomean best/chosen, % within 5%, samples)} of calibrations fitted without
    each fold of groups and judged on it: the groups (model families) are shuffled with
    ``seed`` and dealt into ``folds``; samples without a group (``group_of`` gives None)
    stay in every fit and are never judged. What the fit's settings are chosen by, on the
    fit part only."""
    groups = sorted({g for s in samples if (g := group_of(s)) is not None})
    order = groups[:]
    random.Random(seed).shuffle(order)
    ratios = collections.defaultdict(list)
    for f in range(folds):
        held = set(order[f::folds])
        train = [s for s in samples if group_of(s) not in held]
        table = {"families": {}, "calibration": calibrations(train)}
        for s in samples:
            if group_of(s) in held:
                ratios[s.source].append(s.best / _model_choice(s, table))
    return {
        source: (geomean(r), round(100.0 * sum(x >= 1 / WITHIN for x in r) / len(r), 1), len(r))
        for source, r in sorted(ratios.items())
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="*", help="raw sweep files written by heuristics/sweep.py")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--rewrite",
        metavar="TABLE",
        help="write TABLE (any format) in this version's format, its content unchanged; no sweeps",
    )
    what.add_argument("--out", help="table to write (JSON); its regret is reported")
    what.add_argument("--check", metavar="TABLE", help="report TABLE's regret; write nothing")
    what.add_argument(
        "--cv",
        type=int,
        metavar="FOLDS",
        help="cross-validate the fit over the corpus's model families (fit part); write nothing",
    )
    ap.add_argument("--base", help="table whose families the sweeps do not cover are kept")
    args = ap.parse_args(argv)
    if args.rewrite:
        if args.csv:
            ap.error("--rewrite takes no sweep files")
        write_table(_table.read(args.rewrite), args.rewrite)
        print(f"{args.rewrite}: written as format {TABLE_FORMAT}", file=sys.stderr)
        return 0
    if not args.csv:
        ap.error("the sweep files are required")
    samples, sources, skipped = read_samples(args.csv)
    if not samples:
        raise SystemExit("no usable rows in the sweep files")
    if skipped:
        print(
            f"skipped {skipped} rows (alignment-fallback kernels, or families that do not "
            "run on their GPU)",
            file=sys.stderr,
        )
    if args.cv:
        refuse_heldout(samples)
        families = corpus_families()
        report = cross_validate(samples, args.cv, lambda s: families.get(s.shape))
        for source, (gm, close, n) in report.items():
            print(f"{source}: best/chosen geomean {gm:.4f}, {close:5.1f}% within 5% of {n}")
        return 0
    differ = []
    if args.check:
        table = _table.read(args.check)
        differ, missing = verify_sources(table)
        named = len(table.get("sources", []))
        if missing:
            print(
                f"{args.check}: sweeps it names that are not here: {', '.join(missing)}",
                file=sys.stderr,
            )
        elif not differ and named:
            print(f"{args.check}: the {named} sweeps it names match their digests", file=sys.stderr)
    else:
        refuse_heldout(samples)
        base = _table.read(args.base) if args.base else None
        table = fit(samples, sources, base)
        write_table(table, args.out)
        print(
            f"{args.out}: {', '.join(table['calibration'])} calibrated from {len(samples)} samples",
            file=sys.stderr,
        )
    print(format_report(check(table, samples)))
    if differ:
        print(
            f"{args.check}: sweeps that differ from the digests it names:\n  "
            + "\n  ".join(differ),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
