"""The per-device tuned cache that pycutlass_rt.tune writes and kernel selection reads.

One JSON file per device key (GPU name, SM count, driver version, library build) in
``$PYCUTLASS_RT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pycutlass_rt``, else
``~/.cache/pycutlass_rt``. Entries map a canonical problem (the fields of the C side's
selection memo key) to the kernel measured fastest. A file is read once per process,
lazily, at the first selection on its device; a corrupt or foreign file is ignored with a
warning.

Files are opened without blocking and read only where the opened descriptor is a regular
file (a FIFO or a device at the path would otherwise stall selection), at most MAX_BYTES
of it, in strict mode too. Writes go to a temporary file in the same directory, fsynced,
renamed over the old one (readers never see half a file); the directory is fsynced after
the rename, so that the new name survives a crash. The temporary file is created with mode
0o666, which the kernel narrows by the writer's umask (and the directory's default ACL) as
for any new file: in a cache directory that a group shares (``umask 002``, a setgid
directory) the others can read what one wrote, where a fixed 0600 (mkstemp's) would leave
each file to its writer alone and everyone else's selection would ignore it.

With ``PYCUTLASS_RT_STRICT=1`` a device without a current cache (none, an unusable one,
or only caches made on another GPU, driver or library build) is an error at selection.
Entries that tune(strict=True) wrote are pinned: selection then offers that kernel alone,
or raises. The library's selector asks for a device's entries once (``tuned_for``, through
_select's provider) and looks them up itself.
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
import secrets
import stat
import threading
import warnings
from dataclasses import dataclass

from ._abi import Layout, Status, Tuned
from ._kernels import DTYPE_NAMES, kernels, layout_word
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
        self.unusable: dict = {}  # file path -> why it was ignored (strict mode's error says)
        self.bypass = 0  # > 0 while tune() records a callable: cache not consulted


_state = _State()


def reset() -> None:
    """Forgets every loaded file and device key (tests; tune() after writing), and every
    ranking the library remembers, so that the next selection reads the cache again."""
    with _state.lock:
        _state.devices.clear()
        _state.files.clear()
        _state.unusable.clear()
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
    user's callable so to record its problems even where the cache is stale or broken.
    The library asks for every device's say again on the way in and out."""
    with _state.lock:
        _state.bypass += 1
    load().pcr_select_clear()
    try:
        yield
    finally:
        with _state.lock:
            _state.bypass -= 1
        load().pcr_select_clear()


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
    return _render(dict(zip(_identity_names(), _identity_values(p))))


def _render(f: dict) -> str:
    """problem_key's text of identity fields ``f`` (name -> value)."""
    f = dict(f)
    dt = ",".join(DTYPE_NAMES.get(f.pop(f"dtype_{x}"), "-") for x in "abcd")
    lay = layout_word(f.pop("layout_a"), f.pop("layout_b"))
    align = ",".join(str(f.pop(f"align_{x}")) for x in "abcd")
    head = f"{f.pop('m')}x{f.pop('n')}x{f.pop('k')} {dt} {lay} align={align} sm{f.pop('cc')}"
    # a convolution's pass and geometry; a GEMM's (all zero) are left out, so its keys stay;
    # likewise the fields added later, where they are zero (keys made before them stay)
    op, conv = f.pop("op"), {n[5:]: f.pop(n) for n in list(f) if n.startswith("conv.")}
    later = {n: f.pop(n) for n in ("out_scale", "fast_accum") if n in f}
    tail = [f"op={op}", *(f"{n}={v}" for n, v in conv.items())] if op or any(conv.values()) else []
    tail += [f"{n}={v}" for n, v in later.items() if v]
    return " ".join([head, *(f"{name}={value}" for name, value in f.items()), *tail])


def identity_of(key: str) -> list | None:
    """The identity values (pcr_problem_identity's, in its order) of a problem key, or
    None where ``key`` is not one :func:`problem_key` writes.

    Example:
        >>> key = "16x4096x4096 bfloat16,bfloat16,-,bfloat16 tn align=16,16,0,16 sm90 " \\
        ...       "batch=1 c_mode=0 staged=0 bias=0 activation=0 align_bias=0 epilogue=0 " \\
        ...       "grouped=0 scale_m=0 scale_n=0"
        >>> values = identity_of(key)
        >>> values[:3], _render(dict(zip(_identity_names(), values))) == key
        ([16, 4096, 4096], True)
        >>> identity_of("16x4096 bfloat16") is None
        True
    """
    names = _identity_names()
    f = dict.fromkeys(names, 0)
    codes = {name: code for code, name in DTYPE_NAMES.items()}
    layouts = {
        layout_word(x, y): (x, y)
        for x in Layout
        for y in Layout
        if (x == Layout.NHWC) == (y == Layout.NHWC)
    }
    try:
        mnk, dtypes, layout, align, sm, *rest = key.split(" ")
        f["m"], f["n"], f["k"] = (int(v) for v in mnk.split("x"))
        for x, word in zip("abcd", dtypes.split(","), strict=True):
            f[f"dtype_{x}"] = 0 if word == "-" else codes[word]
        f["layout_a"], f["layout_b"] = layouts[layout]
        for x, v in zip("abcd", align.removeprefix("align=").split(","), strict=True):
            f[f"align_{x}"] = int(v)
        f["cc"] = int(sm.removeprefix("sm"))
        conv = False  # past "op=": a convolution's geometry, its names without "conv."
        for item in rest:
            name, value = item.split("=")
            conv |= name == "op"
            name = f"conv.{name}" if conv and f"conv.{name}" in f else name
            if name not in f:
                return None
            f[name] = int(value)
    except (ValueError, KeyError):
        return None
    return [f[n] for n in names] if _render(f) == key else None


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


def tuned_for(lib, device: int) -> tuple[list, str, str | None]:
    """What the library's selector is handed for CUDA device ``device``: its tuned entries
    (pcr_tuned records), where they came from ("cache file PATH", "" for none), and strict mode's
    refusal (the message every selection there then raises; None where selection may go
    on). tune() recording (the bypass) hands nothing over."""
    if _state.bypass:
        return [], "", None
    names = [k.name for k in kernels()]
    dev = device_key(lib, device, names)
    if dev is None:
        return [], "", None
    cf = loaded(dev)
    if cf is None:
        return [], "", str(_stale_error(dev)) if strict() else None
    index = {name: i for i, name in enumerate(names)}
    entries = []
    for key, entry in cf.entries.items():
        values, kernel = identity_of(key), index.get(entry["kernel"])
        if values is None or kernel is None:  # edited by hand: the file's key is this build's
            warnings.warn(
                f"ignoring tuned cache {cf.path}'s entry {key!r}: "
                + (
                    "not a problem key"
                    if values is None
                    else f"{entry['kernel']} is missing from this build"
                ),
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        record = Tuned(kernel=kernel, pinned=bool(entry.get("pinned")))
        record.identity[: len(values)] = values
        entries.append(record)
    return entries, f"cache file {cf.path}", None


def source_of(lib, device: int) -> str:
    """How messages name where ``device``'s tuned entries come from: "cache file PATH"
    ("" for none; files are read once, so this reads none anew)."""
    if _state.bypass or device < 0:
        return ""
    dev = device_key(lib, device, [k.name for k in kernels()])
    cf = loaded(dev) if dev is not None else None
    return f"cache file {cf.path}" if cf else ""


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


#: how cache files are opened: never waiting (for a FIFO's writer, a device), never taking a
#: controlling terminal, never inherited by a child
_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def _size_words(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n} bytes"


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((word for test, word in kinds if test(mode)), "not a file")


def _read_capped(path: str) -> bytes:
    """The contents of the regular file at ``path``, of at most MAX_BYTES.

    The descriptor is checked, not the path (a stat before the open could see another
    file than the one opened), and read for at most MAX_BYTES + 1 bytes, so a file that
    grows meanwhile is still refused rather than read whole.

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: not a regular file, or larger than MAX_BYTES.
        OSError: it cannot be opened or read.
    """
    cap = MAX_BYTES
    fd = os.open(path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"not a regular file: {_file_kind(st.st_mode)}")
        chunks, left = [], cap + 1
        if st.st_size <= cap:
            while left:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
    finally:
        os.close(fd)
    if st.st_size > cap or left == 0:
        raise ValueError(f"larger than {_size_words(cap)}")
    return b"".join(chunks)


def _examine(path: str, dev: dict | None) -> tuple:
    """(the CacheFile, None); (None, None) where nothing is at ``path``; else (None, why
    the file is not used)."""
    try:
        doc = json.loads(_read_capped(path))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nesting too deep
        return None, f"unreadable ({e})"
    why = _problem_of(doc)
    if why is None and dev is not None and doc["device"] != dev:
        why = f"made for {describe(doc['device'])}, this is {describe(dev)}"
    if why:
        return None, why
    return CacheFile(path, doc["device"], doc["entries"]), None


def read(path: str, dev: dict | None = None, verb: str = "ignoring") -> CacheFile | None:
    """The file at ``path``, or None when absent; a corrupt, oversized, deeply nested or
    mistyped file, one that is not a regular file, or one made for another device key than
    ``dev`` is ignored with a RuntimeWarning ("<verb> tuned cache ...")."""
    cf, why = _examine(path, dev)
    if why:
        warnings.warn(f"{verb} tuned cache {path}: {why}", RuntimeWarning, stacklevel=2)
    return cf


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
    cf, why = _examine(path, dev)
    if why:
        warnings.warn(f"ignoring tuned cache {path}: {why}", RuntimeWarning, stacklevel=2)
    with _state.lock:
        if path not in _state.files:
            _state.files[path] = cf
            if why:
                _state.unusable[path] = why
        return _state.files[path]


def _stale_error(dev: dict) -> UnsupportedError:
    path = path_for(dev)
    with _state.lock:
        why = _state.unusable.get(path)
    if why:
        return UnsupportedError(
            f"{STRICT_ENV}=1 requires a tuned cache made on this device, driver and library "
            f"build ({describe(dev)}), and its file {path} is unusable: {why}\n"
            f"Run pycutlass_rt.tune(..., strict=True) here to write it anew, or unset "
            f"{STRICT_ENV} to let the shipped table choose"
        )
    others = []
    for other in sorted(glob.glob(os.path.join(cache_dir(), "*.json"))):
        # the same capped, non-blocking reads as selection's: any file here may be hostile
        with contextlib.suppress(OSError, ValueError, RecursionError):
            doc = json.loads(_read_capped(other))
            if isinstance(doc, dict) and isinstance(doc.get("device"), dict):
                others.append(f"  {other}: {describe(doc['device'])}")
    found = (
        ("only caches made elsewhere:\n" + "\n".join(others)) if others else "no tuned cache at all"
    )
    return UnsupportedError(
        f"{STRICT_ENV}=1 requires a tuned cache made on this device, driver and library "
        f"build ({describe(dev)}: {path}), and {cache_dir()} holds {found}\n"
        f"Run pycutlass_rt.tune(..., strict=True) here, or unset {STRICT_ENV} to let the "
        "shipped table choose"
    )


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
    directory = os.path.dirname(path)
    fd, tmp = _new_temp(directory)
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
    _fsync_dir(directory)
    with _state.lock:
        _state.files[path] = CacheFile(path, dev, merged)
        _state.unusable.pop(path, None)
    return path


def _new_temp(directory: str) -> tuple:
    """(descriptor, path) of a new, empty file in ``directory`` to write the next version
    in: mode 0o666 narrowed by the umask, as any new file (see the module docstring)."""
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_EXCL
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_BINARY", 0)
    )
    for _ in range(100):
        tmp = os.path.join(directory, f".tmp-{secrets.token_hex(8)}.json")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # another writer's name: draw again
            continue
    raise FileExistsError(f"no free temporary file name in {directory}")


def _fsync_dir(directory: str) -> None:
    """Flushes ``directory``'s entries, so the rename that published a file survives a
    crash; where a directory cannot be opened or synced (Windows, some file systems) the
    rename stands without it."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
