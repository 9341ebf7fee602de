"""The shipped selection table: the rules and calibrations heuristics/fit.py writes.

Finds and reads ``heuristics/table_v1.json`` (installed beside the package, or in a source
tree; minified JSON whose long number arrays are packed, :func:`read`), checks its format,
and resolves it against a list of kernels into the pcr_table the library ranks with
(:func:`resolve`): each rule's patterns matched to the kernels' names, each calibration's
configurations to the kernels' configurations. Kernel names reduce to configurations
(config_of) here, so the fitter and the selector key the table the same way.
"""

from __future__ import annotations

import array
import binascii
import collections
import ctypes
import fnmatch
import functools
import itertools
import json
import operator
import os
import re
import sys
import warnings
import weakref
import zlib

from ._abi import Calibration, Rule, Table
from ._lib import load
from ._model import FEATURES, PAIR_FEATURES, WEIGHTS
from .errors import InvalidArgumentError

TABLE_FILE = "table_v1.json"
TABLE_FORMATS = (4, 5, 6)  # the "format" values of heuristics/*.json this module reads
#: format 6 is format 5 written compact (heuristics/fit.py's write_table): minified, and a
#: list of numbers may be {"packed": type, "offset": bytes, "count": values} (with "shape":
#: [rows, columns] for a list of rows), its little-endian values at that offset of the
#: table's "arrays" ({"size": bytes, "deflate": the buffer's raw deflate stream in hex
#: digits}); read() gives back the list. Packed type -> array type code.
PACKED_TYPES = {"<i1": "b", "<i2": "h", "<i4": "i", "<i8": "q", "<f8": "d"}


# ---- the shipped table ----------------------------------------------------------------


def _unpacked(spec: dict, arrays: memoryview) -> list:
    """The list a packed one (PACKED_TYPES) stands for, from the table's arrays."""
    code = PACKED_TYPES[spec["packed"]]
    start = spec["offset"]
    part = arrays[start : start + spec["count"] * int(spec["packed"][2:])]
    if sys.byteorder == "little":
        values = part.cast(code).tolist()
    else:
        items = array.array(code, part.tobytes())
        items.byteswap()
        values = items.tolist()
    if "shape" in spec:
        width = spec["shape"][1]
        values = [values[i : i + width] for i in range(0, len(values), width)]
    return values


def _expand(node, arrays: memoryview):
    """``node`` with every packed list in it (at any depth) expanded, in place."""
    if isinstance(node, dict):
        if "packed" in node:
            return _unpacked(node, arrays)
        for key, value in node.items():
            if isinstance(value, (dict, list)):
                node[key] = _expand(value, arrays)
    else:
        for i, value in enumerate(node):
            if isinstance(value, (dict, list)):
                node[i] = _expand(value, arrays)
    return node


def read(path: str) -> dict:
    """A table file of any format, as format 5 holds it: packed lists (format 6) expanded
    back into the lists they stand for, every value exact."""
    with open(path, "rb") as f:
        data = json.loads(f.read())
    packed = data.pop("arrays", None) if isinstance(data, dict) else None
    if packed is None:
        return data
    if isinstance(packed, str):  # as the first format-6 tables held it: a zlib stream
        arrays = zlib.decompress(binascii.a2b_base64(packed))
    else:  # raw deflate into one buffer of the stated size: no growing, no checksum pass
        size = packed["size"]
        arrays = zlib.decompress(binascii.a2b_hex(packed["deflate"]), -15, size)
        if len(arrays) != size:
            raise InvalidArgumentError(f"{path}: packed arrays of {len(arrays)} bytes, not {size}")
    return _expand(data, memoryview(arrays))


@functools.cache
def table() -> dict:
    """The shipped table: installed beside the package, or heuristics/ in a source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (
        os.path.join(here, "heuristics", TABLE_FILE),
        os.path.join(os.path.dirname(here), "heuristics", TABLE_FILE),
    ):
        if os.path.exists(path):
            data = read(path)
            if data.get("format") in TABLE_FORMATS:
                return data
            warnings.warn(
                f"{path} has table format {data.get('format')!r}, this version "
                f"reads {TABLE_FORMATS}: kernels are chosen by the analytic model",
                RuntimeWarning,
                stacklevel=2,
            )
    return {"families": {}}


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
#
# Neighbours: a quadratic in the features cannot follow every step of a kernel's real
# behaviour (a tile count that just fits the SMs, an L2 that just holds a panel). Where
# sweeps timed shapes near the problem, their leftover error says more: each
# configuration's correction gains the average of its leftovers at the swept shapes,
# weighted by a Gaussian of the distance in log(M), log(N), log(K) and by the row's weight
# in the fit, against a prior weight of no further correction, so that far from every
# swept shape the fitted function alone decides (``neighbours`` in the table: bandwidth,
# prior, shapes, and per configuration the shapes' indices "at", leftovers "r", weights
# "w"). The library computes both (pcr_rank).
#
# Second look (format 5, ``second_look``): where the calibrated times of the two fastest
# candidates lead the ranking, gradient-boosted trees over features of the pair
# (_model.PAIR_FEATURES: their calibrated-time ratio, the problem's size, their tiles,
# splits and model features) say whether the second is in fact the faster; it then runs
# first. Fitted on the fit part's calibrated rankings out of fold, so the trees learn
# where the calibration errs on shapes it did not see.

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
    if cal and (
        tuple(cal.get("features", ())) != FEATURES
        or any(len(w) != WEIGHTS for w in cal.get("weights", {}).values())
    ):
        return None
    return cal


# ---- the table as the library ranks with it --------------------------------------------


class Resolved:
    """A table resolved against a list of kernels: the library's pcr_ranker of it, and its
    rules in the table's order, so that a ranking's rule index names a rule."""

    def __init__(self, table: Table, rules: list):
        lib = load()
        handle = ctypes.c_void_p()
        lib.check(lib.pcr_ranker_create(ctypes.byref(table), ctypes.byref(handle)))
        self.ranker = handle  # the library copied what it needs: the arrays may go
        self.rules = rules
        weakref.finalize(self, lib.pcr_ranker_destroy, handle)


#: ctypes scalar -> the array module's code of the same C type
_CODES = {ctypes.c_int32: "i", ctypes.c_double: "d"}


def _array(ctype, values):
    """A ctypes array of ``values``: numbers copied in C through an ``array.array`` (the
    table's arrays hold some 100,000 of them), structures one by one."""
    code = _CODES.get(ctype)
    if code is None or array.array(code).itemsize != ctypes.sizeof(ctype):
        return (ctype * len(values))(*values)
    items = array.array(code, values)
    return (ctype * len(items)).from_buffer(items)  # it keeps `items` alive


def resolve(rules: dict, kernels) -> Resolved:
    """``rules`` (the shipped table's form) resolved against ``kernels`` (KernelInfo, in
    the numbering the ranking's ids use): the pcr_ranker pcr_rank and pcr_selector_set take."""
    bases = [k.base_name for k in kernels]
    flat, crules = [], []
    for key, family_rules in rules["families"].items():
        for rule in family_rules:
            prefer = rule.get("prefer", [])
            position = [
                next((i for i, p in enumerate(prefer) if fnmatch.fnmatchcase(b, p)), -1)
                for b in bases
            ]
            bounds = (rule.get(b, -1) for b in ("max_m", "max_n", "max_k"))
            crules.append(
                Rule(int(key[2:]), len(prefer), *bounds, _array(ctypes.c_int32, position))
            )
            flat.append(rule)
    ccals = []
    for family, cal, arrays in _calibrations(rules):
        index = {c: i for i, c in enumerate(cal["weights"])}
        config = _array(ctypes.c_int32, [index.get(config_of(b), -1) for b in bases])
        near = cal.get("neighbours") or {"bandwidth": 1.0, "prior": 1.0}
        weights, shape, first, row_config, row_weight, row_leftover, pair = arrays
        ccals.append(
            Calibration(
                family,
                len(index),
                config,
                weights,
                near["prior"],
                near["bandwidth"],
                len(first) - 1,
                shape,
                first,
                row_config,
                row_weight,
                row_leftover,
                *pair,
            )
        )
    table = Table(
        len(bases), len(crules), len(ccals), _array(Rule, crules), _array(Calibration, ccals)
    )
    return Resolved(table, flat)


_CALIBRATIONS: dict = {}  # id(rules) -> (rules, [(family, calibration, arrays)])


def _calibrations(rules: dict) -> list:
    """Each usable calibration of ``rules`` with its kernel-independent arrays (weights by
    configuration, swept shapes and their rows), built once per rules object."""
    hit = _CALIBRATIONS.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1]
    out = []
    for key in rules.get("calibration", {}):
        cal = calibration(int(key[2:]), rules)
        if cal is None:
            continue
        index = {c: i for i, c in enumerate(cal["weights"])}
        near = cal.get("neighbours") or {"shapes": [], "configs": {}}
        # each swept shape's rows (configuration, weight, weight * leftover), in the order
        # of the configurations and then of their entries: a stable sort by shape
        at, config, weight, weighted = [], [], [], []
        for name, per in near["configs"].items():
            if name in index:  # leftovers of a configuration without weights add nothing
                at += per["at"]
                config += [index[name]] * len(per["at"])
                weight += per["w"]
                weighted += map(operator.mul, per["w"], per["r"])
        order = sorted(range(len(at)), key=at.__getitem__)
        counts = collections.Counter(at)
        start = list(
            itertools.accumulate((counts[s] for s in range(len(near["shapes"]))), initial=0)
        )
        arrays = (
            _array(ctypes.c_double, [x for w in cal["weights"].values() for x in w]),
            _array(ctypes.c_double, [float(v) for shape in near["shapes"] for v in shape]),
            _array(ctypes.c_int32, start),
            _array(ctypes.c_int32, _in_order(config, order)),
            _array(ctypes.c_double, _in_order(weight, order)),
            _array(ctypes.c_double, _in_order(weighted, order)),
            _second_look(cal.get("second_look")),
        )
        out.append((int(key[2:]), cal, arrays))
    if len(_CALIBRATIONS) >= 16:
        _CALIBRATIONS.clear()
    _CALIBRATIONS[id(rules)] = (rules, out)
    return out


def _in_order(values: list, order: list) -> list:
    """``values`` taken in ``order`` (indices), in one C call where there are several."""
    if len(order) < 2:
        return [values[i] for i in order]
    return list(operator.itemgetter(*order)(values))


def _second_look(trees: dict | None) -> tuple:
    """pcr_calibration's pair_* fields from a calibration's ``second_look`` (none: 0
    trees; features of another version: none either)."""
    if not trees or tuple(trees.get("features", ())) != PAIR_FEATURES:
        return (0, 0, None, None, None, None, None, None, 0.0)
    nodes = {len(trees[key]) for key in ("feature", "threshold", "left", "right", "value")}
    if len(nodes) != 1:
        raise InvalidArgumentError("the table's second look has node arrays of unequal lengths")
    return (
        len(trees["tree_start"]),
        len(trees["feature"]),
        _array(ctypes.c_int32, trees["tree_start"]),
        _array(ctypes.c_int32, trees["feature"]),
        _array(ctypes.c_double, trees["threshold"]),
        _array(ctypes.c_int32, trees["left"]),
        _array(ctypes.c_int32, trees["right"]),
        _array(ctypes.c_double, trees["value"]),
        float(trees["base"]),
    )
