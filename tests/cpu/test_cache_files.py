"""The tuned cache's files on disk: what is opened and how much of it is read (FIFOs,
oversized files, strict mode), and how a file is written (its mode under the umask, the
directory fsynced after the rename). Selection's use of the cache: tests/cpu/test_tune.py."""

import json
import os
import stat
import threading
import warnings

import pytest

from pycutlass_rt import _cache, errors

DEV = {"gpu": "NVIDIA H200", "sm_count": 132, "driver": 12080, "build": "b"}
ENTRY = {"p": {"kernel": "k", "us": 1.0}}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty cache directory, strict mode off, this process's loaded files forgotten,
    and the device key the fixture's lookups see: DEV (no library is asked)."""
    d = tmp_path / "cache"
    d.mkdir()
    monkeypatch.setenv(_cache.DIR_ENV, str(d))
    monkeypatch.delenv(_cache.STRICT_ENV, raising=False)
    monkeypatch.setattr(_cache, "device_key", lambda lib, device, names: DEV)
    monkeypatch.setattr(_cache, "problem_key", lambda problem: "p")
    monkeypatch.setattr(_cache._state, "files", {})
    monkeypatch.setattr(_cache._state, "unusable", {})
    return d


def lookup():
    """The tuned entry of problem "p" on DEV's device (the cache fixture's) as the library's
    selector is handed the device's say, or None; strict mode's refusal raised as the
    selector raises it."""
    with warnings.catch_warnings():  # the fixture's key "p" is no problem's
        warnings.filterwarnings("ignore", "ignoring tuned cache .*'p': not a problem key")
        _, _, refusal = _cache.tuned_for(None, 0)
    if refusal is not None:
        raise errors.UnsupportedError(refusal)
    cf = _cache.loaded(DEV)
    return None if cf is None else cf.entries.get("p")


def returns_quickly(fn, seconds=10):
    """(fn()'s result, the messages of the warnings it gave), or a failure where it does not
    return within ``seconds`` (a read blocked on a FIFO would wait for a writer forever)."""
    box = {}

    def call():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                box["value"] = fn()
            except BaseException as e:  # raised again in the test's thread
                box["error"] = e
        box["warnings"] = [str(w.message) for w in caught]

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"{fn} blocked for {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"], box["warnings"]


def valid(dev=DEV, entries=ENTRY):
    return json.dumps(
        {"kind": _cache.KIND, "format": _cache.FORMAT, "device": dev, "entries": entries}
    )


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no os.mkfifo here")


# ---- what is opened ------------------------------------------------------------------------


@needs_fifo
def test_a_fifo_at_the_path_is_ignored_without_blocking(cache_dir):
    path = _cache.path_for(DEV)
    os.mkfifo(path)
    cf, said = returns_quickly(lambda: _cache.read(path))
    assert cf is None and said == [
        f"ignoring tuned cache {path}: unreadable (not a regular file: a FIFO)"
    ]
    hit, said = returns_quickly(lookup)
    assert hit is None and "a FIFO" in said[0]  # selection goes on without the cache


@needs_fifo
def test_strict_mode_names_the_fifo_and_does_not_block(cache_dir, monkeypatch):
    os.mkfifo(_cache.path_for(DEV))
    os.mkfifo(cache_dir / "other.json")  # the error lists the directory's files: opened too
    monkeypatch.setenv(_cache.STRICT_ENV, "1")
    with pytest.raises(errors.UnsupportedError) as e:
        returns_quickly(lookup)
    assert "PYCUTLASS_RT_STRICT=1" in str(e.value) and "a FIFO" in str(e.value)
    os.unlink(_cache.path_for(DEV))
    monkeypatch.setattr(_cache._state, "files", {})
    monkeypatch.setattr(_cache._state, "unusable", {})
    with pytest.raises(errors.UnsupportedError, match="no tuned cache at all"):
        returns_quickly(lookup)


@needs_fifo
def test_a_write_replaces_a_fifo(cache_dir):
    path = _cache.path_for(DEV)
    os.mkfifo(path)
    _, said = returns_quickly(lambda: _cache.store(DEV, ENTRY))
    assert said and said[0].startswith("replacing tuned cache")
    assert stat.S_ISREG(os.stat(path).st_mode)
    assert _cache.read(path, DEV).entries == ENTRY


def test_a_directory_at_the_path_is_ignored(cache_dir):
    os.mkdir(_cache.path_for(DEV))
    with pytest.warns(RuntimeWarning, match="not a regular file: a directory"):
        assert lookup() is None


def test_a_symlink_to_a_regular_file_is_read(cache_dir, tmp_path):
    """The descriptor is checked, not the name: a link to a cache file is read."""
    target = tmp_path / "elsewhere.json"
    target.write_text(valid())
    os.symlink(target, _cache.path_for(DEV))
    assert _cache.read(_cache.path_for(DEV), DEV).entries == ENTRY


# ---- how much is read ----------------------------------------------------------------------


@pytest.fixture
def bytes_read(monkeypatch):
    """The bytes os.read returned, in total (the cap's proof: never the whole file)."""
    seen = [0]
    real = os.read

    def counting(fd, n):
        chunk = real(fd, n)
        seen[0] += len(chunk)
        return chunk

    monkeypatch.setattr(os, "read", counting)
    return seen


def oversized(path, cap):
    """A valid cache file of DEV of more than ``cap`` bytes, at ``path``."""
    entries = {f"p{i}": {"kernel": "k" * 40} for i in range(cap // 40 + 8)}
    with open(path, "w") as f:
        f.write(valid(entries=entries))
    assert os.path.getsize(path) > cap


def test_oversized_files_are_ignored_and_read_no_further_than_the_cap(
    cache_dir, monkeypatch, bytes_read
):
    monkeypatch.setattr(_cache, "MAX_BYTES", 4096)
    oversized(_cache.path_for(DEV), 4096)
    with pytest.warns(RuntimeWarning, match="larger than 4096 bytes"):
        assert lookup() is None
    assert bytes_read[0] <= 4097


def test_strict_mode_refuses_an_oversized_file_with_a_typed_error(
    cache_dir, monkeypatch, bytes_read
):
    monkeypatch.setattr(_cache, "MAX_BYTES", 4096)
    monkeypatch.setenv(_cache.STRICT_ENV, "1")
    path = _cache.path_for(DEV)
    oversized(path, 4096)
    with pytest.warns(RuntimeWarning), pytest.raises(errors.UnsupportedError) as e:
        lookup()
    message = str(e.value)
    assert "PYCUTLASS_RT_STRICT=1" in message and path in message
    assert "larger than 4096 bytes" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read once: the same error, no second read
        with pytest.raises(errors.UnsupportedError, match="larger than"):
            lookup()
    assert bytes_read[0] <= 4097


def test_strict_mode_reads_the_other_files_capped(cache_dir, monkeypatch, bytes_read):
    """The error lists the caches made elsewhere: each read capped, oversized ones left out."""
    monkeypatch.setattr(_cache, "MAX_BYTES", 4096)
    monkeypatch.setenv(_cache.STRICT_ENV, "1")
    other = {**DEV, "gpu": "NVIDIA A100"}
    oversized(cache_dir / "big.json", 4096)
    (cache_dir / "a100.json").write_text(valid(dev=other, entries={}))
    with pytest.raises(errors.UnsupportedError) as e:
        lookup()
    assert "only caches made elsewhere" in str(e.value) and "NVIDIA A100" in str(e.value)
    assert "big.json" not in str(e.value)
    assert bytes_read[0] <= 2 * 4097


def test_a_file_at_the_cap_is_read(tmp_path, monkeypatch):
    path = tmp_path / "cache.json"
    path.write_text(valid())
    monkeypatch.setattr(_cache, "MAX_BYTES", os.path.getsize(path))
    assert _cache.read(str(path), DEV).entries == ENTRY


# ---- how a file is written -----------------------------------------------------------------


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("umask, mode", [(0o002, 0o664), (0o022, 0o644), (0o077, 0o600)])
def test_written_files_take_the_umasks_mode(cache_dir, umask, mode):
    """0o666 narrowed by the umask, as any new file: a group's shared cache stays readable
    to the group (umask 002), never a fixed 0600."""
    old = os.umask(umask)
    try:
        path = _cache.store(DEV, ENTRY)
        assert stat.S_IMODE(os.stat(path).st_mode) == mode
        path = _cache.store(DEV, {"q": {"kernel": "k"}})  # a rewrite: a new file, same mode
        assert stat.S_IMODE(os.stat(path).st_mode) == mode
    finally:
        os.umask(old)
    assert os.listdir(cache_dir) == [os.path.basename(path)]  # no temporary left


def test_the_directory_is_fsynced_after_the_rename(cache_dir, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        events.append(("fsync", "dir" if stat.S_ISDIR(mode) else "file", os.fstat(fd).st_ino))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.path.basename(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = _cache.store(DEV, ENTRY)
    assert [e[:2] for e in events] == [
        ("fsync", "file"),  # the temporary file's data, before it is published
        ("replace", os.path.basename(path)),
        ("fsync", "dir"),  # the new name
    ]
    assert events[2][2] == os.stat(cache_dir).st_ino


def test_a_directory_that_cannot_be_fsynced_still_gets_the_file(cache_dir, monkeypatch):
    """Where fsync of a directory fails (EINVAL on some file systems, Windows), the write
    stands."""
    real_fsync = os.fsync

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = _cache.store(DEV, ENTRY)
    assert _cache.read(path, DEV).entries == ENTRY


def test_a_write_makes_the_file_usable_in_strict_mode(cache_dir, monkeypatch):
    """An unusable file's strict-mode error ends once tune() writes the file anew."""
    path = _cache.path_for(DEV)
    with open(path, "w") as f:
        f.write("{not json")
    monkeypatch.setenv(_cache.STRICT_ENV, "1")
    with pytest.warns(RuntimeWarning), pytest.raises(errors.UnsupportedError, match="unusable"):
        lookup()
    with pytest.warns(RuntimeWarning, match="replacing"):
        _cache.store(DEV, ENTRY)
    assert lookup() == ENTRY["p"]
