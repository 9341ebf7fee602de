"""The shipped selection table: the rules and calibrations heuristics/fit.py writes.

Finds and reads ``heuristics/table_v1.json`` (installed beside the package, or in a source
tree), checks its format, and answers the questions ranking asks of it: the first rule
of a family whose shape bounds hold, and a calibrated family's correction of the model
(log(measured / model time), a linear function of the model's features) for a kernel
configuration. Kernel names reduce to configurations (config_of) here, so the fitter and
the selector key the table the same way.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
import os
import re
import warnings

from ._model import FEATURES

TABLE_FILE = "table_v1.json"
TABLE_FORMATS = (4,)  # the "format" values of heuristics/*.json this module reads


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
# weights w of the model's features (_model.FEATURES) and their pairwise products
# (_model.expand): the configuration's estimate on a problem is its model time times
# exp(w . expand(features)). heuristics/fit.py fits w by ridge
# regression of log(measured / model time) on the fit part of the shape corpus, shrunk
# toward the weights fitted over all configurations, so a shape no sweep measured is
# judged by its waves, K-loop length, intensity and split, not by its nearness to a swept
# M. fit.py --check reports how this choice does on the corpus's held-out part.

_CONFIG = re.compile(
    r"^(sm\d+_(?:(?:fprop|dgrad|wgrad)_)?)[a-z0-9]+_[a-z0-9]+_[a-z0-9]+_[a-z0-9]+_(?:[tn]{2}|nhwc)_"
    r"(\d+x\d+x\d+_.+)$"
)


def config_of(name: str) -> str:
    """A kernel's configuration: its name without dtypes and layouts, as rules name it (a
    convolution's keeps its pass: its configurations are not a GEMM's).

    >>> config_of("sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8")
    'sm90_*_128x256x64_c2x1_coop_a8'
    >>> config_of("sm80_wgrad_f16_f16_f32_f16_nhwc_128x128x32_w2x2_s3_splitk_a8")
    'sm80_wgrad_*_128x128x32_w2x2_s3_splitk_a8'
    """
    m = _CONFIG.match(name)
    if not m:
        raise ValueError(f"not a kernel name: {name!r}")
    return f"{m[1]}*_{m[2]}"


def calibration(family: int, rules: dict | None = None) -> dict | None:
    """The table's calibration of ``family`` ({"features": [...], "weights": {config: w}}),
    or None (also when its features are not this version's: the model alone decides)."""
    rules = table() if rules is None else rules
    cal = rules.get("calibration", {}).get(f"sm{family}")
    if cal and tuple(cal.get("features", ())) != FEATURES:
        return None
    return cal


def correction(cal: dict, config: str, feats: tuple) -> float | None:
    """log(time / model time) the calibration predicts for ``config``, or None where no
    sweep timed the configuration.

    >>> from pycutlass_rt._model import WEIGHTS
    >>> cal = {"weights": {"c": [0.5] + [0.0] * (WEIGHTS - 1)}}
    >>> correction(cal, "c", (1.0,) * len(FEATURES)), correction(cal, "d", ())
    (0.5, None)
    """
    w = cal["weights"].get(config)
    if w is None:
        return None
    # w . expand(feats), without building expand's list: once per new shape and candidate
    n = len(feats)
    acc, at = w[0] + sum(map(operator.mul, w[1 : n + 1], feats)), n + 1
    for i, x in enumerate(feats):
        if x:  # several features are 0 on most problems (no tail, no split, whole tiles)
            acc += x * sum(map(operator.mul, w[at : at + n - i], feats[i:]))
        at += n - i
    return acc


# ---- neighbours: what the fitted function leaves, smoothed over nearby swept shapes -----
#
# A quadratic in the features cannot follow every step of a kernel's real behaviour (a
# tile count that just fits the SMs, an L2 that just holds a panel). Where sweeps timed
# shapes near the problem, their leftover error says more: each configuration's
# correction gains the average of its leftovers at the swept shapes, weighted by a
# Gaussian of the distance in log(M), log(N), log(K) and by the row's weight in the fit,
# against a prior weight of no further correction, so that far from every swept shape
# the fitted function alone decides.


class _Near:
    """A calibration's neighbours, bucketed for lookup: swept shapes by cell of the log
    space (a cell as wide as a neighbour's reach, so a query reads its cell and the 26
    around it), each with its rows (config, weight, weight x leftover). Pure Python: the
    runtime needs no numpy."""

    def __init__(self, near: dict):
        self.prior = near["prior"]
        self.scale = -0.5 / near["bandwidth"] ** 2
        self.reach2 = math.log(1e3) / -self.scale  # Gaussian weights below 1e-3 add nothing
        self.width = math.sqrt(self.reach2)
        rows: list = [[] for _ in near["shapes"]]
        for config, per in near["configs"].items():
            for at, r, w in zip(per["at"], per["r"], per["w"]):
                rows[at].append((config, w, w * r))
        self.cells: dict = {}
        for shape, own in zip(near["shapes"], rows):
            logs = tuple(math.log(max(v, 1)) for v in shape)
            self.cells.setdefault(self._cell(logs), []).append((logs, own))

    def _cell(self, logs: tuple) -> tuple:
        return tuple(math.floor(x / self.width) for x in logs)

    def correct(self, m: int, n: int, k: int) -> dict:
        """{config: further log correction} at (m, n, k)."""
        q = tuple(math.log(max(v, 1)) for v in (m, n, k))
        cm, cn, ck = self._cell(q)
        num: dict = {}
        den: dict = {}
        for cell in itertools.product(
            (cm - 1, cm, cm + 1), (cn - 1, cn, cn + 1), (ck - 1, ck, ck + 1)
        ):
            for logs, own in self.cells.get(cell, ()):
                d2 = (logs[0] - q[0]) ** 2 + (logs[1] - q[1]) ** 2 + (logs[2] - q[2]) ** 2
                if d2 > self.reach2:
                    continue
                g = math.exp(self.scale * d2)
                for config, w, wr in own:
                    num[config] = num.get(config, 0.0) + g * wr
                    den[config] = den.get(config, 0.0) + g * w
        return {c: v / (den[c] + self.prior) for c, v in num.items()}


_COMPILED: dict = {}  # id(calibration) -> (calibration, _Near): built once per table


def neighbours(cal: dict, m: int, n: int, k: int) -> dict:
    """{config: further log(time / model time)} from the calibration's swept neighbours of
    (m, n, k): 0 (absent) for configurations with none nearby.

    >>> cal = {"neighbours": {"bandwidth": 0.25, "prior": 0.1, "shapes": [[64, 64, 64]],
    ...        "configs": {"c": {"at": [0], "r": [0.2], "w": [1.0]}}}}
    >>> round(neighbours(cal, 64, 64, 64)["c"], 3), neighbours(cal, 4096, 64, 64)
    (0.182, {})
    """
    near = cal.get("neighbours")
    if not near or not near["shapes"]:
        return {}
    hit = _COMPILED.get(id(cal))
    if hit is None or hit[0] is not cal:
        hit = _COMPILED[id(cal)] = (cal, _Near(near))
    return hit[1].correct(m, n, k)
