"""The capture files of a run: which files a set of paths names, how each is opened, where it starts.

The native core reads the packets; this module is the I/O edge it is handed: `open_capture`
(gzip, bzip2 and xz wrappers detected by magic, through Python's own decompressors) and the
expansion of directories of rotated files (`capture_files`).  A capture may be a local path or a
URI (s3://, gs://, abfs://, hdfs://, file://: dissector.fs), a directory or an object-store prefix.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from collections.abc import Iterable
from typing import IO

__all__ = ["capture_files", "compression", "open_capture", "unreadable", "FILE_ERRORS"]

# What reading a damaged file raises besides OSError, EOFError and ValueError: the decompressors' errors.
FILE_ERRORS = (zlib.error, lzma.LZMAError)


def capture_files(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """The files `paths` name, a directory (or an object-store prefix) standing for its files (not
    hidden ones) in name order; file:// URIs as the local paths they name."""
    from dissector import fs

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for p in paths:
        p = fs.local(p)
        if fs.is_uri(p):
            out.extend(fs.listing(p) if fs.is_dir(p) else [p])
        elif os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                full = os.path.join(p, name)
                if not name.startswith(".") and os.path.isfile(full):
                    out.append(full)
        else:
            out.append(p)
    return out


def unreadable(path: str) -> str | None:
    """Why a capture path (a file, a directory, a URI) cannot be read, in one line; None if it can."""
    from dissector import fs

    try:
        path = fs.local(path)
        if fs.is_uri(path):
            if not fs.exists(path):
                return f"cannot read {path.split('?')[0]}: no such file or prefix"
            return None
        if not os.path.isdir(path):
            with open(path, "rb"):
                pass
    except fs.RemoteError as e:
        return str(e)
    except OSError as e:
        return f"cannot read {path}: {e.strerror or e}"
    return None


def compression(head: bytes) -> str | None:
    """The wrapper whose magic a file's first 6 bytes are ("gzip", "bz2" or "xz"), else None."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:3] == b"BZh":
        return "bz2"
    if head == b"\xfd7zXZ\x00":
        return "xz"
    return None


def open_capture(path: str) -> IO[bytes]:
    """A capture file for reading, decompressed when it is gzip, bzip2 or xz; a stream (`-`, a pipe,
    a live capture) read as it comes (dissector.stream)."""
    from dissector import fs, stream

    path = fs.local(path)
    if fs.is_uri(path):
        f = fs.open_sequential(path)
        kind = compression(f.peek(6))
    elif stream.is_stream(path):
        return stream.open_stream(path)  # type: ignore[return-value]
    else:
        f = open(path, "rb")  # noqa: SIM115 -- returned open; the reader closes it
        kind = compression(f.read(6))
        f.seek(0)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    if kind == "bz2":
        return bz2.BZ2File(f)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(f)  # type: ignore[return-value]
    return f
