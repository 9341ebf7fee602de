"""The shipped selection table: the rules and calibrations heuristics/fit.py writes.

Finds and reads ``heuristics/table_v1.json`` (installed beside the package, or in a source
tree), checks its format, and answers the questions ranking asks of it: the first rule
of a family whose shape bounds hold, and a calibrated family's measured residual
(log(measured / model time)) for a kernel configuration at the finest level a sweep
timed it: the shape, its M bucket, or all samples. Kernel names reduce to
configurations (config_of) and problems to calibration levels (bucket_keys) here, so
the fitter and the selector key the table the same way.
"""

from __future__ import annotations

import functools
import json
import os
import re
import warnings

TABLE_FILE = "table_v1.json"
TABLE_FORMATS = (1, 2)  # the "format" values of heuristics/*.json this module reads


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
