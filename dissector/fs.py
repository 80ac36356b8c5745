"""Where captures live: local paths, and URIs of object stores and distributed filesystems.

    fs.is_uri("s3://caps/day1/a.pcap")      # True; also gs://, abfs(s)://, az://, hdfs://, viewfs://
    fs.local("file:///tmp/a.pcap")          # "/tmp/a.pcap": file:// is a local path
    with fs.open_sequential(uri) as f:      # read(n) / read1(n), ranged GETs fetched ahead of the reader
        ...
    fs.listing(uri)                         # the files of a prefix, as a directory's

The filesystems are pyarrow's (S3, GCS, Azure, HDFS: maintained clients, the same ones pyarrow's
datasets read with), and fsspec's for any scheme pyarrow lacks, when fsspec is installed.  A
remote file is read with positioned reads (one GET with a Range header each) of CHUNK bytes,
AHEAD of them in flight on threads (pyarrow releases the GIL), so the native core, which reads
captures through the file object it is handed, finds the next bytes already fetched instead of
waiting on a round trip.  Local files keep their own fast paths (memory maps, os reads):
nothing here is on them.

S3 endpoints other than AWS's (a self-hosted store) are taken from AWS_ENDPOINT_URL_S3 or
AWS_ENDPOINT_URL, as the AWS SDKs take them, and credentials from the SDK's usual chain; a URI's
query (`s3://b/k?endpoint_override=...`) is pyarrow's own and wins.  No credential is ever part
of a message.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import urlsplit

__all__ = [
    "AHEAD",
    "CHUNK",
    "RemoteError",
    "SCHEMES",
    "s3_env",
    "exists",
    "filesystem_of",
    "interrupted",
    "is_dir",
    "is_uri",
    "join",
    "listing",
    "local",
    "open_random",
    "fetch_range",
    "entries",
    "read_bytes",
    "write_bytes",
    "delete",
    "open_sequential",
    "size",
]

# pyarrow's names for them, and the Azure and HDFS spellings users write
SCHEMES = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "hdfs", "viewfs")
CHUNK = 8 << 20  # one ranged GET: large enough that a round trip is small beside its transfer
AHEAD = 4  # GETs in flight ahead of the reader


class RemoteError(OSError):
    """A remote file that cannot be reached or read (the message is the CLI's one line, without its
    `kafkawire: `).  An OSError, so that a read that fails mid-file is a file fault like any other
    (what was read before it is kept); landing.local and landing.spark end a land on one instead of
    committing it, since the store may answer the next run (interrupted(): which faults they are)."""


def is_uri(path: str | os.PathLike) -> bool:
    """Whether `path` is a remote URI (s3://, gs://, ...), not a local path (file:// is local)."""
    p = os.fspath(path)
    if not isinstance(p, str) or "://" not in p:
        return False
    scheme = p.split("://", 1)[0].lower()
    return scheme != "file" and scheme.isidentifier()


def local(path: str | os.PathLike) -> str:
    """`path` with a file:// URI turned into the local path it names; anything else as given."""
    p = os.fspath(path)
    if isinstance(p, str) and p[:7].lower() == "file://":
        from urllib.parse import unquote

        parts = urlsplit(p)
        if parts.netloc not in ("", "localhost"):
            raise RemoteError(f"{p}: a file:// URI names a local path (file:///path), not host {parts.netloc}")
        return unquote(parts.path)
    return p


def s3_env() -> tuple[str | None, str | None]:
    """(the S3 endpoint, the region) the environment names, as the AWS SDKs read them; every S3
    client of kafkawire's (pyarrow here, delta-rs and Spark's s3a in landing) is configured from it."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    return endpoint, region


def _env_s3() -> dict | None:
    """S3FileSystem's arguments from the environment: a self-hosted endpoint, a region; None when it
    names neither (pyarrow then asks S3 for the bucket's region)."""
    endpoint, region = s3_env()
    if not endpoint:
        return {"region": region} if region else None
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return {"endpoint_override": parts.netloc, "scheme": parts.scheme or "https", "region": region or "us-east-1"}


# a GCS client without credentials retries for 15 minutes by default: a store that cannot answer is
# one line in about this many seconds instead
GCS_RETRY_SECONDS = 10


@functools.lru_cache(maxsize=1)
def _store_errors() -> tuple:
    """What a store's client raises: OSError, and pyarrow's own base error, which the Azure client
    raises for a refused credential (imported when a store is first used, not at start-up)."""
    from pyarrow.lib import ArrowException

    return (OSError, ArrowException)


@functools.lru_cache(maxsize=32)
def _filesystem(scheme: str, authority: str, query: str):
    """One filesystem per store (bucket, account, namenode), kept: each holds its client and connections."""
    import pyarrow.fs as pafs

    if scheme in ("s3", "s3a"):
        s3 = _env_s3()
        if s3 is not None and not query:
            return pafs.S3FileSystem(**s3)
        return pafs.FileSystem.from_uri(f"s3://{authority}/?{query}" if query else f"s3://{authority}/")[0]
    if scheme in ("gs", "gcs") and not query:
        from datetime import timedelta

        return pafs.GcsFileSystem(retry_time_limit=timedelta(seconds=GCS_RETRY_SECONDS))
    uri = f"{scheme}://{authority}/" + (f"?{query}" if query else "")
    try:
        return pafs.FileSystem.from_uri(uri)[0]
    except ValueError as e:  # pyarrow's ArrowInvalid: a scheme it does not know
        known = str(e)
    try:
        import fsspec  # not a dependency: a scheme pyarrow does not know is read through it when present
    except ImportError:
        raise RemoteError(
            f"{scheme}:// cannot be read here ({_why(known) if known else 'unknown scheme'}); "
            "pyarrow reads s3, gs, abfs and hdfs, fsspec (when installed) the others"
        ) from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fsspec.filesystem(scheme)))


def _resolve(uri: str):
    """(filesystem, path inside it, the URI's prefix that path is joined to)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        try:
            import fsspec  # noqa: F401
        except ImportError:
            raise RemoteError(
                f"{uri.split('?')[0]}: unknown scheme {scheme}:// (known: {', '.join(SCHEMES)}, file)"
            ) from None
    try:
        fs = _filesystem(scheme, parts.netloc, parts.query)
    except RemoteError:
        raise
    except (ValueError, *_store_errors()) as e:
        raise RemoteError(f"cannot reach {scheme}://{parts.netloc}: {_why(e)}") from None
    if scheme in ("abfs", "abfss"):
        # container@account/path, or account/container/path: pyarrow's own reading of them
        container, at, _ = parts.netloc.rpartition("@")
        path = container + parts.path if at else parts.path
    elif scheme in ("s3", "s3a", "gs", "gcs", "az"):
        path = parts.netloc + parts.path  # the bucket (container) is the path's first part
    else:
        path = parts.path
    return fs, path.rstrip("/") or "/", f"{parts.scheme}://{parts.netloc}"


def filesystem_of(uri: str):
    """(pyarrow filesystem, path inside it) of a URI, for writers (landing.lake)."""
    fs, path, _ = _resolve(uri)
    return fs, path


def _info(uri: str):
    fs, path, _ = _resolve(uri)
    try:
        return fs.get_file_info(path)
    except _store_errors() as e:
        raise RemoteError(f"cannot read {_bare(uri)}: {_why(e)}") from None


def _bare(uri: str) -> str:
    return uri.split("?", 1)[0]  # a query may hold options (never shown)


def _why(e: BaseException) -> str:
    """An error's first line, without pyarrow's 'Detail:' tail (request ids, stack frames)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text.split(". Detail:")[0].split("; Details:")[0]


def interrupted(faults) -> str | None:
    """The first of a run's file faults (dissector.items.file_fault's lines) that a remote read ended,
    or None: the store may have the bytes again for the next run, so such a landing is not committed."""
    return next((f for f in faults if f": {RemoteError.__name__}: " in f), None)


def exists(uri: str) -> bool:
    import pyarrow.fs as pafs

    return _info(uri).type != pafs.FileType.NotFound


def is_dir(uri: str) -> bool:
    """A directory, or an object-store prefix that holds objects."""
    import pyarrow.fs as pafs

    return _info(uri).type == pafs.FileType.Directory


def size(uri: str) -> int:
    import pyarrow.fs as pafs

    info = _info(uri)
    if info.type != pafs.FileType.File:
        raise RemoteError(f"cannot read {_bare(uri)}: " + ("no such file" if info.size is None else "not a file"))
    return info.size


def join(uri: str, name: str) -> str:
    return uri.rstrip("/") + "/" + name


def listing(uri: str) -> list[str]:
    """The files directly under a directory or prefix (not hidden ones), as URIs in name order."""
    import pyarrow.fs as pafs

    fs, path, _ = _resolve(uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    except _store_errors() as e:
        raise RemoteError(f"cannot list {_bare(uri)}: {_why(e)}") from None
    names = sorted(i.base_name for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith("."))
    return [join(_bare(uri), n) for n in names]


def entries(uri: str) -> list[tuple[str, int, int]]:
    """(URI, size, mtime in ns) of the files directly under a directory or prefix (not hidden ones),
    in name order; none for a prefix that holds nothing."""
    import pyarrow.fs as pafs

    fs, path, _ = _resolve(uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False, allow_not_found=True))
    except _store_errors() as e:
        raise RemoteError(f"cannot list {_bare(uri)}: {_why(e)}") from None
    files = [i for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith(".")]
    return [(join(_bare(uri), i.base_name), i.size, i.mtime_ns or 0) for i in sorted(files, key=lambda i: i.base_name)]


def read_bytes(uri: str) -> bytes:
    """A small remote file's bytes; FileNotFoundError when there is none."""
    fs, path, _ = _resolve(uri)
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except FileNotFoundError:
        raise
    except _store_errors() as e:
        if "not found" in str(e).lower() or "no such" in str(e).lower():
            raise FileNotFoundError(_bare(uri)) from None
        raise RemoteError(f"cannot read {_bare(uri)}: {_why(e)}") from None


def write_bytes(uri: str, data: bytes) -> None:
    """A small remote file written whole (an object store's PUT replaces an object at once)."""
    fs, path, _ = _resolve(uri)
    try:
        with fs.open_output_stream(path) as f:
            f.write(data)
    except _store_errors() as e:
        raise RemoteError(f"cannot write {_bare(uri)}: {_why(e)}") from None


def delete(uri: str) -> None:
    """A remote file removed (none there: nothing to do)."""
    fs, path, _ = _resolve(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass
    except _store_errors() as e:
        raise RemoteError(f"cannot delete {_bare(uri)}: {_why(e)}") from None


class RandomFile:
    """A remote file for positioned reads: `size`, read_at(n, offset), close()."""

    def __init__(self, uri: str):
        fs, path, _ = _resolve(uri)
        self.uri = uri
        try:
            self._f = fs.open_input_file(path)
            self.size = self._f.size()
        except _store_errors() as e:
            raise RemoteError(f"cannot read {_bare(uri)}: {_why(e)}") from None

    def read_at(self, n: int, offset: int) -> bytes:
        try:
            return self._f.read_at(n, offset)
        except _store_errors() as e:
            raise RemoteError(f"read failed at byte {offset:,}: {_why(e)}") from None

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> RandomFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_random(uri: str) -> RandomFile:
    return RandomFile(uri)


def fetch_range(uri: str, start: int, end: int, dst: str | os.PathLike) -> None:
    """Bytes [start, end) of a remote file written at the same offsets of a local file (sparse
    before `start`), so that a reader of byte ranges reads it as it reads a local capture; CHUNK
    ranged GETs, AHEAD at a time."""
    with RandomFile(uri) as f, open(dst, "wb") as out:
        pending: deque[tuple[int, Future]] = deque()
        at = start
        while at < end or pending:
            while at < end and len(pending) < AHEAD:
                n = min(CHUNK, end - at)
                pending.append((at, _pool().submit(f.read_at, n, at)))
                at += n
            where, job = pending.popleft()
            out.seek(where)
            out.write(job.result())


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            # shared by every open file: a run reads its files one after another, and the bound keeps
            # a set of many small files from opening a connection per file at once
            _POOL = ThreadPoolExecutor(max_workers=2 * AHEAD, thread_name_prefix="kafkawire-fetch")
        return _POOL


class ReadAhead:
    """A remote file read front to back: read(n) and read1(n) as a buffered file's, with the next
    AHEAD chunks of CHUNK bytes already being fetched by ranged GETs.  Memory: (AHEAD + 1) * CHUNK."""

    def __init__(self, uri: str, chunk: int = CHUNK, ahead: int = AHEAD):
        self._file = RandomFile(uri)
        self.name = _bare(uri)
        self._chunk, self._ahead = chunk, ahead
        self._pending: deque[Future] = deque()
        self._next = 0  # the offset of the next chunk to ask for
        self._buf = memoryview(b"")
        self._pos = 0  # bytes given so far
        self.closed = False
        self._ask()

    def _ask(self) -> None:
        while len(self._pending) < self._ahead and self._next < self._file.size:
            n = min(self._chunk, self._file.size - self._next)
            self._pending.append(_pool().submit(self._file.read_at, n, self._next))
            self._next += n

    def _refill(self) -> bool:
        if not self._pending:
            return False
        data = self._pending.popleft().result()  # RemoteError (an OSError): the reader's file fault
        self._buf = memoryview(data)
        self._ask()
        return True

    def read1(self, n: int = -1) -> bytes:
        if not self._buf and not self._refill():
            return b""
        k = len(self._buf) if n is None or n < 0 else min(n, len(self._buf))
        out, self._buf = self._buf[:k].tobytes(), self._buf[k:]
        self._pos += k
        return out

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            parts = []
            while chunk := self.read1():
                parts.append(chunk)
            return b"".join(parts)
        parts, want = [], n
        while want > 0 and (chunk := self.read1(want)):
            parts.append(chunk)
            want -= len(chunk)
        return b"".join(parts)

    def peek(self, n: int = 1) -> bytes:
        if not self._buf:
            self._refill()
        return self._buf[:n].tobytes()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for f in self._pending:
            f.cancel()
        for f in self._pending:
            if not f.cancelled():
                try:
                    f.result()
                except OSError:
                    pass  # the reader stopped before it: nobody is waiting for those bytes
        self._pending.clear()
        self._file.close()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_sequential(uri: str) -> ReadAhead:
    return ReadAhead(uri)
