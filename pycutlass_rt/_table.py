"""The shipped selection table: the rules and calibrations heuristics/fit.py writes.

Finds and loads ``heuristics/table_v1.json`` (installed beside the package, or in a source
tree) with the binary file of arrays beside it (:func:`table`), and resolves it against a
list of kernels into the pcr_table the library ranks with (:func:`resolve`): each rule's
patterns matched to the kernels' names, each calibration's configurations to the kernels'
configurations. Kernel names reduce to configurations (config_of) here, so the fitter and
the selector key the table the same way. :func:`read` gives any table file back as
format 5 holds it, every list expanded (what the fitter works with).
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
TABLE_FORMATS = (4, 5, 6, 7)  # the "format" values of heuristics/*.json this module reads
#: format 6 is format 5 written compact (heuristics/fit.py's ``compact``): minified, and a
#: list of numbers may be {"packed": type, "offset": bytes, "count": values} (with "shape":
#: [rows, columns] for a list of rows), its little-endian values at that offset of the
#: table's "arrays" ({"size": bytes, "deflate": the buffer's raw deflate stream in hex
#: digits}); read() gives back the list. Packed type -> array type code.
PACKED_TYPES = {"<i1": "b", "<i2": "h", "<i4": "i", "<i8": "q", "<f8": "d"}
#: Format 7 (heuristics/fit.py's ``write_table``) keeps the numbers in a binary file beside
#: the JSON, which names it: {"arrays": {"file": its name, "size": bytes, "sha256": of what
#: follows its header, "ranking": where its ranking arrays end, "lists": {"offset",
#: "length", "size"} of the packed lists' buffer as a raw deflate stream}}. The file starts
#: with BINARY_MAGIC and the first 16 bytes of that digest (a JSON and a binary file of
#: different writes are told apart without hashing), then the ranking arrays: per
#: calibration ("ranking": {"sm90": {field: {"array": "<i4" | "<f8", "offset", "count"}}})
#: the arrays of pcr_calibration that do not depend on the kernels, as
#: :func:`ranking_arrays` computes them from the lists, in the C types the library takes:
#: :func:`table` hands them over without a copy and leaves the lists deflated.
BINARY_MAGIC = b"pcrtbl7\n"
#: a ranking array's type in the binary file -> its ctypes type
RANKING_TYPES = {"<i4": ctypes.c_int32, "<f8": ctypes.c_double}


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


def _json(path: str):
    with open(path, "rb") as f:
        return json.loads(f.read())


def _binary_path(path: str, arrays: dict) -> str:
    """The binary file a format-7 table at ``path`` names (beside it)."""
    name = arrays["file"]
    if os.path.basename(name) != name:
        raise InvalidArgumentError(f"{path}: its binary file {name!r} is not a name beside it")
    return os.path.join(os.path.dirname(path), name)


def _binary(path: str, arrays: dict, end: int | None = None) -> bytearray:
    """The first ``end`` bytes (all: None) of the binary file a format-7 table names,
    checked against the table: its size, header and (all read) digest.

    Raises:
        InvalidArgumentError: the file is not the one the table was written with.
        OSError: it cannot be read.
    """
    where = _binary_path(path, arrays)
    size = arrays["size"]
    with open(where, "rb") as f:
        data = bytearray(size if end is None else end)
        have = os.fstat(f.fileno()).st_size
        got = f.readinto(data)
    header = BINARY_MAGIC + bytes.fromhex(arrays["sha256"][:32])
    if have != size or got != len(data) or data[: len(header)] != header:
        raise InvalidArgumentError(
            f"{where} is not the binary file {path} was written with (size {have}, "
            f"not {size}, or another header)"
        )
    if end is None:
        import hashlib  # only a full read checks the digest: the fitter's, not a launch's

        digest = hashlib.sha256(memoryview(data)[len(header) :]).hexdigest()
        if digest != arrays["sha256"]:
            raise InvalidArgumentError(f"{where}: sha256 {digest[:16]}, {path} says otherwise")
    return data


def _expanded(data, path: str):
    """A parsed table file as format 5 holds it (see :func:`read`)."""
    packed = data.pop("arrays", None) if isinstance(data, dict) else None
    if packed is None:
        return data
    if isinstance(packed, str):  # as the first format-6 tables held it: a zlib stream
        arrays = zlib.decompress(binascii.a2b_base64(packed))
    elif "file" in packed:  # format 7: a raw deflate stream in the binary file
        data.pop("ranking", None)  # derived from the lists: nothing format 5 holds
        lists = packed["lists"]
        start, size = lists["offset"], lists["size"]
        stream = memoryview(_binary(path, packed))[start : start + lists["length"]]
        arrays = zlib.decompress(stream, -15, size)
        if len(arrays) != size:
            raise InvalidArgumentError(f"{path}: packed lists of {len(arrays)} bytes, not {size}")
    else:  # raw deflate into one buffer of the stated size: no growing, no checksum pass
        size = packed["size"]
        arrays = zlib.decompress(binascii.a2b_hex(packed["deflate"]), -15, size)
        if len(arrays) != size:
            raise InvalidArgumentError(f"{path}: packed arrays of {len(arrays)} bytes, not {size}")
    return _expand(data, memoryview(arrays))


def read(path: str) -> dict:
    """A table file of any format, as format 5 holds it: packed lists (formats 6 and 7)
    expanded back into the lists they stand for, every value exact; a format-7 table's
    binary file checked against the digest the table names."""
    return _expanded(_json(path), path)


def _loaded(path: str) -> dict:
    """A table file as :func:`table` gives it: format 7 with its ranking arrays as ctypes
    arrays over the binary file's bytes and its lists left packed (``ranking`` holds
    every calibration this version ranks with); other formats as :func:`read` gives them."""
    data = _json(path)
    arrays = data.get("arrays") if isinstance(data, dict) else None
    if not (isinstance(arrays, dict) and "file" in arrays) or sys.byteorder != "little":
        return _expanded(data, path)  # the lists, resolved from them (resolve)
    del data["arrays"]
    raw = _binary(path, arrays, arrays["ranking"])
    ready = {}
    for key, fields in data.pop("ranking", {}).items():
        ready[key] = {
            name: (RANKING_TYPES[ref["array"]] * ref["count"]).from_buffer(raw, ref["offset"])
            for name, ref in fields.items()
        }
    data["ranking"] = ready
    for key, cal in data.get("calibration", {}).items():
        if calibration(int(key[2:]), data) is None:
            continue  # not this version's features: no ranking needed
        if key not in ready or ("pair_value" in ready[key]) != _pair_usable(cal):
            return read(path)  # written by another version of ranking_arrays: the lists
    return data


def shipped_paths() -> tuple:
    """Where the shipped table may be: installed beside the package, or in heuristics/ of a
    source tree (the first that exists is the one)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return (
        os.path.join(here, "heuristics", TABLE_FILE),
        os.path.join(os.path.dirname(here), "heuristics", TABLE_FILE),
    )


@functools.cache
def table() -> dict:
    """The shipped table (:func:`shipped_paths`) as :func:`resolve` takes it: format 7's
    lists left packed and its ranking arrays (``ranking``) over the bytes of its binary
    file, which the library takes as they are; read the lists with :func:`read`. A table
    this version cannot load warns, and kernels are then chosen by the analytic model."""
    for path in shipped_paths():
        if os.path.exists(path):
            try:
                data = _loaded(path)
            except (OSError, InvalidArgumentError) as e:  # its binary file missing or stale
                why = f"cannot be loaded ({e})"
            else:
                if data.get("format") in TABLE_FORMATS:
                    return data
                why = f"has table format {data.get('format')!r}, this version reads {TABLE_FORMATS}"
            warnings.warn(
                f"{path} {why}: kernels are chosen by the analytic model",
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
    r"(\d+x\d+x\d+_.+|f(?:\d+x\d+s\d+|any)(?:g\d+)?_(?:depthwise|direct)_.+)$"
)


def config_of(name: str) -> str:
    """A kernel's configuration: its name without dtypes and layouts, as rules name it (a
    convolution's keeps its pass: its configurations are not a GEMM's).

    >>> config_of("sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8")
    'sm90_*_128x256x64_c2x1_coop_a8'
    >>> config_of("sm80_wgrad_f16_f16_f32_f16_nhwc_128x128x32_w2x2_s3_splitk_a8")
    'sm80_wgrad_*_128x128x32_w2x2_s3_splitk_a8'
    >>> config_of("sm80_fprop_bf16_bf16_f32_bf16_nhwc_f7x7s1_depthwise_a8")
    'sm80_fprop_*_f7x7s1_depthwise_a8'
    >>> config_of("sm80_fprop_f16_f16_f32_f16_nhwc_f3x3s2g8_direct_biasact_a8")
    'sm80_fprop_*_f3x3s2g8_direct_biasact_a8'
    """
    m = _CONFIG.match(name)
    if not m:
        raise ValueError(f"not a kernel name: {name!r}")
    return f"{m[1]}*_{m[2]}"


def _length(values) -> int:
    """How many values a list holds, or a packed one (format 7 as :func:`table` loads it)
    stands for."""
    return values["count"] if isinstance(values, dict) else len(values)


def calibration(family: int, rules: dict | None = None) -> dict | None:
    """The table's calibration of ``family`` ({"features": [...], "weights": {config: w}}),
    or None (also when its features are not this version's: the model alone decides)."""
    rules = table() if rules is None else rules
    cal = rules.get("calibration", {}).get(f"sm{family}")
    if cal and (
        tuple(cal.get("features", ())) != FEATURES
        or any(_length(w) != WEIGHTS for w in cal.get("weights", {}).values())
    ):
        return None
    return cal


def _pair_usable(cal: dict) -> bool:
    """Whether a calibration's second look is trees over this version's pair features."""
    trees = cal.get("second_look")
    return bool(trees) and tuple(trees.get("features", ())) == PAIR_FEATURES


def ranking_arrays(cal: dict) -> dict:
    """The arrays of pcr_calibration that do not depend on the kernels, from a calibration
    as format 5 holds it: {field: array.array} ("i": int32, "d": double), the weights by
    configuration, the swept shapes and their rows, and the second look's trees where this
    version ranks with them (:func:`resolve` hands them to the library; heuristics/fit.py
    writes them into a format-7 table's binary file)."""
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
    start = itertools.accumulate((counts[s] for s in range(len(near["shapes"]))), initial=0)
    out = {
        "weights": array.array("d", [x for w in cal["weights"].values() for x in w]),
        "shape": array.array("d", [float(v) for shape in near["shapes"] for v in shape]),
        "row_start": array.array("i", start),
        "row_config": array.array("i", _in_order(config, order)),
        "row_weight": array.array("d", _in_order(weight, order)),
        "row_leftover": array.array("d", _in_order(weighted, order)),
    }
    if _pair_usable(cal):
        trees = cal["second_look"]
        fields = ("feature", "threshold", "left", "right", "value")
        if len({len(trees[key]) for key in fields}) != 1:
            raise InvalidArgumentError("the table's second look has node arrays of unequal lengths")
        for key, code in zip(("tree_start", *fields), "iidiid"):
            out[f"pair_{key}"] = array.array(code, trees[key])
    return out


def _in_order(values: list, order: list) -> list:
    """``values`` taken in ``order`` (indices), in one C call where there are several."""
    if len(order) < 2:
        return [values[i] for i in order]
    return list(operator.itemgetter(*order)(values))


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


#: the array module's code -> the ctypes scalar of the same C type
_CTYPES = {"i": ctypes.c_int32, "d": ctypes.c_double}


def _array(items: array.array):
    """A ctypes array over ``items`` (array.array of a code in _CTYPES), without a copy
    where the C types agree (the table's arrays hold some 100,000 numbers)."""
    ctype = _CTYPES[items.typecode]
    if items.itemsize != ctypes.sizeof(ctype):
        return (ctype * len(items))(*items)
    return (ctype * len(items)).from_buffer(items)  # it keeps `items` alive


def _matching(pattern: str, names: list) -> list:
    """The indices of ``names`` that ``fnmatch.fnmatchcase`` matches with ``pattern``; for
    a pattern whose only wildcard is ``*`` (as rules' are) by its literal parts, as
    compiling a regular expression per pattern costs more than matching all names."""
    if "?" in pattern or "[" in pattern:
        match = re.compile(fnmatch.translate(pattern)).match
        return [i for i, name in enumerate(names) if match(name)]
    if "*" not in pattern:
        return [i for i, name in enumerate(names) if name == pattern]
    first, *middle, last = pattern.split("*")
    least = len(first) + len(last)
    hits = [
        i
        for i, name in enumerate(names)
        if name.endswith(last) and name.startswith(first) and len(name) >= least
    ]
    middle = [part for part in middle if part]  # "**" is "*"
    if middle:
        hits = [i for i in hits if _in_turn(names[i], middle, len(first), len(last))]
    return hits


def _in_turn(name: str, parts: list, head: int, tail: int) -> bool:
    """Whether ``parts`` occur in ``name`` in turn, apart, between its first ``head`` and
    last ``tail`` characters (leftmost first: where one fits, a later one fits too)."""
    at, end = head, len(name) - tail
    for part in parts:
        at = name.find(part, at, end)
        if at < 0:
            return False
        at += len(part)
    return True


def _positions(prefer: list, names: list, memo: dict):
    """pcr_rule.position: per name, the index of the first of ``prefer`` that matches it,
    or -1."""
    position = array.array("i", [-1]) * len(names)
    for j in range(len(prefer) - 1, -1, -1):  # the first pattern's matches written last
        pattern = prefer[j]
        hits = memo.get(pattern)
        if hits is None:
            hits = memo[pattern] = _matching(pattern, names)
        for i in hits:
            position[i] = j
    return _array(position)


def resolve(rules: dict, kernels) -> Resolved:
    """``rules`` (the shipped table's form: :func:`table`'s or :func:`read`'s) resolved
    against ``kernels`` (KernelInfo, in the numbering the ranking's ids use): the
    pcr_ranker pcr_rank and pcr_selector_set take."""
    bases = [k.base_name for k in kernels]
    flat, crules, memo = [], [], {}
    for key, family_rules in rules["families"].items():
        for rule in family_rules:
            prefer = rule.get("prefer", [])
            bounds = (rule.get(b, -1) for b in ("max_m", "max_n", "max_k"))
            crules.append(Rule(int(key[2:]), len(prefer), *bounds, _positions(prefer, bases, memo)))
            flat.append(rule)
    ccals, configs = [], None
    for family, cal, arrays in _calibrations(rules):
        if configs is None:
            configs = [config_of(b) for b in bases]
        index = {c: i for i, c in enumerate(cal["weights"])}
        config = _array(array.array("i", [index.get(c, -1) for c in configs]))
        near = cal.get("neighbours") or {"bandwidth": 1.0, "prior": 1.0}
        pair = {}
        if "pair_value" in arrays:
            pair = dict(
                pair_trees=len(arrays["pair_tree_start"]),
                pair_nodes=len(arrays["pair_feature"]),
                pair_base=float(cal["second_look"]["base"]),
            )
        ccals.append(
            Calibration(
                family=family,
                configs=len(index),
                config=config,
                prior=near["prior"],
                bandwidth=near["bandwidth"],
                shapes=len(arrays["row_start"]) - 1,
                **arrays,
                **pair,
            )
        )
    table = Table(
        len(bases),
        len(crules),
        len(ccals),
        (Rule * len(crules))(*crules),
        (Calibration * len(ccals))(*ccals),
    )
    return Resolved(table, flat)


_CALIBRATIONS: dict = {}  # id(rules) -> (rules, [(family, calibration, arrays)])


def _calibrations(rules: dict) -> list:
    """Each usable calibration of ``rules`` with its kernel-independent arrays as ctypes
    arrays (:func:`ranking_arrays`; format 7 as :func:`table` loads it holds them ready),
    built once per rules object."""
    hit = _CALIBRATIONS.get(id(rules))
    if hit is not None and hit[0] is rules:
        return hit[1]
    ready = rules.get("ranking", {})
    out = []
    for key in rules.get("calibration", {}):
        cal = calibration(int(key[2:]), rules)
        if cal is None:
            continue
        arrays = ready.get(key)
        if arrays is None:
            arrays = {field: _array(items) for field, items in ranking_arrays(cal).items()}
        out.append((int(key[2:]), cal, arrays))
    if len(_CALIBRATIONS) >= 16:
        _CALIBRATIONS.clear()
    _CALIBRATIONS[id(rules)] = (rules, out)
    return out
