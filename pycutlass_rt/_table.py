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
import json
import operator
import os
import re
import warnings

from ._model import FEATURES

TABLE_FILE = "table_v1.json"
TABLE_FORMATS = (3,)  # the "format" values of heuristics/*.json this module reads


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
