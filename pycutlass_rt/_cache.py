"""The per-device tuned cache that pycutlass_rt.tune writes and kernel selection reads.

One JSON file per device key (GPU name, SM count, driver version, library build) in
``$PYCUTLASS_RT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pycutlass_rt``, else
``~/.cache/pycutlass_rt``. Entries map a canonical problem (the fields of the C side's
selection memo key) to the kernel measured fastest. A file is read once per process,
lazily, at the first selection on its device; a corrupt or foreign file is ignored with a
warning. Writes go to a temporary file renamed over the old one, so readers never see
half a file.

With ``PYCUTLASS_RT_STRICT=1`` a device without a current cache (none, or only caches
made on another GPU, driver or library build) is an error at selection. Entries that
tune(strict=True) wrote are pinned: selection then offers that kernel alone, or raises
(see _select.apply_tuned).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import functools
import glob
import hashlib
import json
import os
import re
import tempfile
import threading
import warnings
from dataclasses import dataclass

from ._abi import Status
from ._kernels import DTYPE_NAMES, layout_word
from ._lib import load
from .errors import UnsupportedError

DIR_ENV = "PYCUTLASS_RT_CACHE_DIR"
STRICT_ENV = "PYCUTLASS_RT_STRICT"
KIND = "pycutlass_rt tuned kernels"
#: 2: problem keys spell every identity field (format 1 lacked staged, activation and scales)
FORMAT = 2
#: a cache file larger than this is not read (a tuned cache holds a few thousand entries)
MAX_BYTES = 16 << 20
#: the types an entry's fields must have when present; "kernel" must be there
ENTRY_TYPES = {
    "kernel": str,
    "pinned": bool,
    "us": (int, float),
    "table_kernel": (str, type(None)),
    "table_us": (int, float, type(None)),
    "candidates": int,
    "date": str,
}


@dataclass
class Hit:
    """A cache entry for one problem, and the file it came from."""

    entry: dict
    path: str

    @property
    def pinned(self) -> bool:
        return bool(self.entry.get("pinned"))


@dataclass
class CacheFile:
    """One device key's file, as read (or last written) by this process."""

    path: str
    device: dict
    entries: dict  # problem key -> {"kernel", "us", "date", "pinned", ...}


class _State:
    """What this process has loaded; one lock guards it (selection may run in threads)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.devices: dict = {}  # CUDA ordinal -> device key dict, or None (no device)
        self.files: dict = {}  # file path -> CacheFile, or None (absent or ignored)
        self.bypass = 0  # > 0 while tune() records a callable: cache not consulted


_state = _State()


def reset() -> None:
    """Forgets every loaded file and device key (tests; tune() after writing), and every
    ranking the library remembers, so that the next selection reads the cache again."""
    with _state.lock:
        _state.devices.clear()
        _state.files.clear()
    load().pcr_select_clear()


def cache_dir() -> str:
    """$PYCUTLASS_RT_CACHE_DIR, else $XDG_CACHE_HOME/pycutlass_rt, else ~/.cache/pycutlass_rt."""
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pycutlass_rt")


def strict() -> bool:
    """Whether PYCUTLASS_RT_STRICT asks for a current tuned cache on every device."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def bypassed():
    """Selection ignores the cache inside, strict mode and pins included: tune() runs the
    user's callable so to record its problems even where the cache is stale or broken."""
    with _state.lock:
        _state.bypass += 1
    try:
        yield
    finally:
        with _state.lock:
            _state.bypass -= 1


def problem_key(p) -> str:
    """The canonical problem as a string: every field of its identity, the list the C side's
    selection memo keys on (``pcr_problem_identity``), so that a tuned entry applies to
    exactly the problems it was tuned for.

    Example:
        >>> from pycutlass_rt._abi import Dtype, Layout, Problem
        >>> bf16 = Dtype.BF16
        >>> problem_key(Problem(m=16, n=4096, k=4096, batch=1, dtype_a=bf16, dtype_b=bf16,
        ...                     dtype_d=bf16, layout_b=Layout.COL_MAJOR, align_a=16,
        ...                     align_b=16, align_d=16, cc=90))  # doctest: +NORMALIZE_WHITESPACE
        '16x4096x4096 bfloat16,bfloat16,-,bfloat16 tn align=16,16,0,16 sm90 batch=1 c_mode=0
         staged=0 bias=0 activation=0 align_bias=0 epilogue=0 grouped=0 scale_m=0 scale_n=0'
    """
    f = dict(zip(_identity_names(), _identity_values(p)))
    dt = ",".join(DTYPE_NAMES.get(f.pop(f"dtype_{x}"), "-") for x in "abcd")
    lay = layout_word(f.pop("layout_a"), f.pop("layout_b"))
    align = ",".join(str(f.pop(f"align_{x}")) for x in "abcd")
    head = f"{f.pop('m')}x{f.pop('n')}x{f.pop('k')} {dt} {lay} align={align} sm{f.pop('cc')}"
    # a convolution's pass and geometry; a GEMM's (all zero) are left out, so its keys stay;
    # likewise the fields added later, where they are zero (keys made before them stay)
    op, conv = f.pop("op"), {n[5:]: f.pop(n) for n in list(f) if n.startswith("conv.")}
    later = {n: f.pop(n) for n in ("out_scale",) if n in f}
    tail = [f"op={op}", *(f"{n}={v}" for n, v in conv.items())] if op or any(conv.values()) else []
    tail += [f"{n}={v}" for n, v in later.items() if v]
    return " ".join([head, *(f"{name}={value}" for name, value in f.items()), *tail])


@functools.lru_cache(maxsize=1)
def _identity_names() -> tuple:
    return tuple(load().pcr_problem_identity_names().decode().split())


def _identity_values(p) -> list:
    values = (ctypes.c_int64 * len(_identity_names()))()
    lib = load()
    lib.check(lib.pcr_problem_identity(ctypes.byref(p), values, len(values)))
    return list(values)


def build_id(lib, kernel_names) -> str:
    """A hash of the library's build info and kernel list: changes with every rebuild
    that could change what a kernel name runs."""
    text = lib.pcr_build_info().decode() + "\n" + "\n".join(kernel_names)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _query_device(lib, device: int, kernel_names) -> dict | None:
    name, cc, sms = ctypes.create_string_buffer(256), ctypes.c_int32(), ctypes.c_int32()
    drv = ctypes.c_int32()
    if (
        device < 0
        or lib.pcr_device_name(device, name, 256) != Status.OK
        or lib.pcr_device_cc(device, ctypes.byref(cc), ctypes.byref(sms)) != Status.OK
    ):
        return None  # no such device here: nothing to look up
    lib.pcr_driver_version(ctypes.byref(drv))
    return {
        "gpu": name.value.decode(errors="replace"),
        "sm_count": sms.value,
        "driver": drv.value,
        "build": build_id(lib, kernel_names),
    }


def has_say(lib, device: int, kernel_names) -> bool:
    """Whether the tuned cache has a say in kernel choice on CUDA device ``device``: strict
    mode, tune() recording (the bypass), or a cache file of the device. Where it has none,
    the library may rank new problems itself (_select.hand_over)."""
    if _state.bypass or strict():
        return True
    dev = device_key(lib, device, kernel_names)
    return dev is not None and loaded(dev) is not None


def device_key(lib, device: int, kernel_names) -> dict | None:
    """{"gpu", "sm_count", "driver", "build"} of CUDA device ``device``, queried once."""
    with _state.lock:
        if device in _state.devices:
            return _state.devices[device]
    key = _query_device(lib, device, kernel_names)
    with _state.lock:
        _state.devices[device] = key
    return key


def file_name(dev: dict) -> str:
    """``<gpu>-<SMs>sm-<hash of the whole key>.json``: readable, and one per device key."""
    digest = hashlib.sha256(json.dumps(dev, sort_keys=True).encode()).hexdigest()[:16]
    slug = re.sub(r"[^a-z0-9]+", "-", dev["gpu"].lower()).strip("-") or "gpu"
    return f"{slug}-{dev['sm_count']}sm-{digest}.json"


def path_for(dev: dict) -> str:
    return os.path.join(cache_dir(), file_name(dev))


def _problem_of(doc) -> str | None:
    """Why ``doc`` is not a usable cache file, or None."""
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return "not a pycutlass_rt tuned cache"
    if doc.get("format") != FORMAT:
        return f"format {doc.get('format')!r}, this version reads {FORMAT}"
    entries = doc.get("entries")
    if not isinstance(entries, dict) or not all(_entry_ok(e) for e in entries.values()):
        return "malformed entries"
    if not isinstance(doc.get("device"), dict):
        return "no device key"
    return None


def _entry_ok(entry) -> bool:
    """Whether a cache entry has a kernel name and fields of the types tune() writes (a
    hand-edited ``"pinned": "false"`` must not pin)."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("kernel"), str)
        and all(
            isinstance(entry[f], t) and (t is bool or not isinstance(entry[f], bool))
            for f, t in ENTRY_TYPES.items()
            if f in entry
        )
    )


def read(path: str, dev: dict | None = None, verb: str = "ignoring") -> CacheFile | None:
    """The file at ``path``, or None when absent; a corrupt, oversized, deeply nested or
    mistyped file, or one made for another device key than ``dev``, is ignored with a
    RuntimeWarning ("<verb> tuned cache ...")."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES >> 20} MiB")
        doc = json.loads(raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nesting too deep
        warnings.warn(f"{verb} tuned cache {path}: unreadable ({e})", RuntimeWarning, stacklevel=2)
        return None
    why = _problem_of(doc)
    if why is None and dev is not None and doc["device"] != dev:
        why = f"made for {describe(doc['device'])}, this is {describe(dev)}"
    if why:
        warnings.warn(f"{verb} tuned cache {path}: {why}", RuntimeWarning, stacklevel=2)
        return None
    return CacheFile(path, doc["device"], doc["entries"])


def describe(dev: dict) -> str:
    return (
        f"{dev.get('gpu')} ({dev.get('sm_count')} SMs), driver {dev.get('driver')}, "
        f"library build {dev.get('build')}"
    )


def loaded(dev: dict) -> CacheFile | None:
    """The cache file of device key ``dev``, read from disk on first use only."""
    path = path_for(dev)
    with _state.lock:
        if path in _state.files:
            return _state.files[path]
    cf = read(path, dev)
    with _state.lock:
        _state.files.setdefault(path, cf)
        return _state.files[path]


def _stale_error(dev: dict) -> UnsupportedError:
    others = []
    for path in sorted(glob.glob(os.path.join(cache_dir(), "*.json"))):
        with contextlib.suppress(OSError, ValueError), open(path) as f:
            doc = json.load(f)
            if isinstance(doc, dict) and isinstance(doc.get("device"), dict):
                others.append(f"  {path}: {describe(doc['device'])}")
    found = (
        ("only caches made elsewhere:\n" + "\n".join(others)) if others else "no tuned cache at all"
    )
    return UnsupportedError(
        f"{STRICT_ENV}=1 requires a tuned cache made on this device, driver and library "
        f"build ({describe(dev)}: {path_for(dev)}), and {cache_dir()} holds {found}\n"
        f"Run pycutlass_rt.tune(..., strict=True) here, or unset {STRICT_ENV} to let the "
        "shipped table choose"
    )


def lookup(lib, problem, kernel_names) -> Hit | None:
    """The tuned entry for ``problem`` on its device, or None.

    Raises:
        UnsupportedError: strict mode, and the device has no current cache file.
    """
    if _state.bypass:
        return None
    dev = device_key(lib, problem.device, kernel_names)
    if dev is None:
        return None
    cf = loaded(dev)
    if cf is None:
        if strict():
            raise _stale_error(dev)
        return None
    entry = cf.entries.get(problem_key(problem))
    return Hit(entry, cf.path) if entry is not None else None


def store(dev: dict, entries: dict) -> str:
    """Merges ``entries`` (problem key -> entry) into the device's file, atomically.

    The file is re-read first, under a lock that writers take in turn (on the cache
    directory), so entries that another process wrote meanwhile survive; for the same
    problem the newer entry wins. Returns the file's path.
    """
    path = path_for(dev)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _locked(os.path.dirname(path)):
        return _store_locked(path, dev, entries)


@contextlib.contextmanager
def _locked(directory: str):
    """Holds an exclusive advisory lock on ``directory`` (POSIX flock on the directory
    itself, so no lock file is left behind; elsewhere, none)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: writers are not serialized
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _store_locked(path: str, dev: dict, entries: dict) -> str:
    current = read(path, dev, "replacing")
    merged = {**(current.entries if current else {}), **entries}
    doc = {
        "kind": KIND,
        "format": FORMAT,
        "device": dev,
        "entries": merged,
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with _state.lock:
        _state.files[path] = CacheFile(path, dev, merged)
    return path
