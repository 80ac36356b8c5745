"""TLS key logs: the files `--tls-keylog` names, read for the native core's TLS layer
(native/py/src/tls.rs), which decrypts the TLS connections whose client randoms they hold. The
core's parser is the only one: a file is checked by what it took of it (load_keylogs), and an
engine in this process is handed that parse rather than the text.

The format is NSS's key log (`LABEL <client random> <secret>` per line), as browsers, Python's
`ssl.SSLContext.keylog_filename`, OpenSSL's SSLKEYLOGFILE, curl and the Java agents write it. A pcapng
file's Decryption Secrets Blocks (`editcap --inject-secrets tls,KEYS`) are read by the capture reader
itself; nothing here is needed for them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dissector.native import KeyLog

__all__ = ["KeyLogError", "load_keylogs", "read_keylogs", "capture_keylogs", "MAX_KEYLOG_BYTES"]

# a key log line is ~180 bytes: this holds millions of connections' secrets and no capture by mistake
MAX_KEYLOG_BYTES = 1 << 30


class KeyLogError(ValueError):
    """A key log that cannot be used (its message is one line naming the file)."""


def read_keylogs(paths: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[bytes]:
    """The texts of the key log files, each checked to hold key log lines: what travels to another
    process (a Spark task), which parses them again. A run in this process takes load_keylogs()'s."""
    return [bytes(k) for k in load_keylogs(paths)]


def load_keylogs(paths: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[KeyLog]:
    """The key log files, each parsed by the core once (_native.KeyLog) and checked by what that
    parse took: an engine made with them (tls_keylogs=) takes them as they are."""
    from dissector.native import core

    if paths is None:
        return []
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    logs = []
    for path in paths:
        if isinstance(path, (bytes, bytearray, memoryview)):
            # a key log's text handed over where its file name belongs: refused without echoing it
            raise TypeError("read_keylogs takes key log file paths (str or os.PathLike), not their bytes")
        name = os.fsdecode(path)
        try:
            size = os.path.getsize(path)
            if size > MAX_KEYLOG_BYTES:
                raise KeyLogError(f"{name}: {size} bytes is no TLS key log (over {MAX_KEYLOG_BYTES})")
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            raise KeyLogError(f"cannot read TLS key log {name}: {e.strerror or e}") from None
        log = core().KeyLog(text)
        if log.taken == 0:
            raise KeyLogError(
                f"{name}: no TLS key log lines in it ({log.not_understood} lines not understood); expected the "
                "NSS format 'LABEL <client random hex> <secret hex>' (CLIENT_RANDOM, CLIENT_TRAFFIC_SECRET_0, ...)"
            )
        logs.append(log)
    return logs


def capture_keylogs(files: Iterable[str | os.PathLike]) -> list[bytes]:
    """The key logs the capture files' pcapng Decryption Secrets Blocks hold before their first packet.
    A local run reads every such block as it meets it; a Spark job sends these to its tasks, which
    read ranges of the files."""
    from dissector.files import FILE_ERRORS, open_capture
    from dissector.native import core

    texts = []
    for f in files:
        try:
            text = core().leading_secrets(os.fsencode(f), open_capture, FILE_ERRORS)
        except (OSError, EOFError, ValueError, *FILE_ERRORS):
            continue  # the run itself reports an unreadable file, in its own words
        if text:
            texts.append(text)
    return texts
