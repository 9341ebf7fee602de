#!/usr/bin/env python3
"""The measurement files of heuristics/data/: CSV text kept gzip-compressed.

``data/sweeps/`` holds the sweeps the shipped table was fitted from, ``data/eval/`` the
sweeps of the corpus's held-out part that judge a table, ``data/corpus/`` the shape
corpus (corpus.py). Each is one CSV per file, compressed (``.csv.gz``); neither the wheel
nor the sdist ships them (pyproject.toml's ``sdist.exclude``). Every tool reads a sweep
through :func:`read_bytes` or :func:`open_text`, so a plain ``.csv`` (a sweep still being
written under build/sweeps/) and its ``.csv.gz`` read alike, and :func:`digest` is the
sha256 of the CSV text, not of the compressed bytes: packing a sweep leaves the digest
the table names it by (``fit.py``'s ``sources``) as it was.

sweep.py writes plain CSV, flushed per shape so that a sweep cut short resumes with
``--append``; pack it into the data folder when it is done, and unpack a packed sweep
to add to it::

    python heuristics/datafiles.py pack build/sweeps/h200_bf16.csv heuristics/data/sweeps/
    python heuristics/datafiles.py unpack heuristics/data/sweeps/h200_bf16.csv.gz build/sweeps/

Packing is deterministic (no name or time in the gzip header): the same CSV text packs
to the same bytes.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> text = "m,n,k\\n1,2,3\\n"
>>> write_text(os.path.join(d, "s.csv.gz"), text)
>>> read_bytes(os.path.join(d, "s.csv.gz")) == text.encode()
True
>>> digest(os.path.join(d, "s.csv.gz")) == hashlib.sha256(text.encode()).hexdigest()
True
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
#: the data folder (not shipped)
DATA = os.path.join(HERE, "data")
SWEEPS = os.path.join(DATA, "sweeps")
EVAL = os.path.join(DATA, "eval")
CORPUS = os.path.join(DATA, "corpus")
GZ = ".gz"


def read_bytes(path: str) -> bytes:
    """The CSV text of ``path`` as bytes, decompressed where its name ends in ``.gz``."""
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if path.endswith(GZ) else data


def open_text(path: str) -> io.StringIO:
    """``path``'s CSV text, ready for ``csv.reader``/``csv.DictReader`` (as a file opened
    with ``newline=""``)."""
    return io.StringIO(read_bytes(path).decode("utf-8"), newline="")


def digest(path: str) -> str:
    """sha256 hex digest of ``path``'s CSV text (decompressed: the same for a ``.csv`` and
    its ``.csv.gz``)."""
    return hashlib.sha256(read_bytes(path)).hexdigest()


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to ``path``, gzip-compressed where its name ends in ``.gz``
    (deterministically: level 9, no file name, time 0)."""
    data = text.encode("utf-8")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        if path.endswith(GZ):
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9, mtime=0) as z:
                z.write(data)
        else:
            f.write(data)


def _target(src: str, dst: str, name: str) -> str:
    """``dst`` itself, or ``dst/name`` where ``dst`` is a folder (or ends in a slash)."""
    if dst.endswith(os.sep) or os.path.isdir(dst):
        return os.path.join(dst, name)
    return dst


def pack(src: str, dst: str) -> str:
    """Compresses the CSV ``src`` into ``dst`` (a ``.csv.gz`` path, or a folder); returns
    the path written."""
    out = _target(src, dst, os.path.basename(src) + GZ)
    if not out.endswith(GZ):
        raise SystemExit(f"{out}: a packed sweep's name ends in {GZ}")
    write_text(out, read_bytes(src).decode("utf-8"))
    return out


def unpack(src: str, dst: str) -> str:
    """Decompresses ``src`` (``.csv.gz``) into ``dst`` (a ``.csv`` path, or a folder);
    returns the path written."""
    name = os.path.basename(src)
    out = _target(src, dst, name[: -len(GZ)] if name.endswith(GZ) else name)
    if out.endswith(GZ):
        raise SystemExit(f"{out}: an unpacked sweep is plain CSV")
    write_text(out, read_bytes(src).decode("utf-8"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["pack", "unpack", "digest"])
    ap.add_argument(
        "paths",
        nargs="+",
        help="pack/unpack: the files (.csv to pack, .csv.gz to unpack), then the file or "
        "folder to write; digest: the files",
    )
    args = ap.parse_args(argv)
    if args.action == "digest":
        for path in args.paths:
            print(f"{digest(path)}  {path}")
        return 0
    if len(args.paths) < 2:
        raise SystemExit(f"{args.action}: name the files, then the file or folder to write")
    *sources, dst = args.paths
    if len(sources) > 1 and not (dst.endswith(os.sep) or os.path.isdir(dst)):
        raise SystemExit(f"{args.action}: several files go into a folder")
    for src in sources:
        out = (pack if args.action == "pack" else unpack)(src, dst)
        print(f"{out}: sha256 {digest(out)[:16]} of the CSV text", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
