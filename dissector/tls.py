"""TLS key logs: the files `--tls-keylog` names, read for the native core's TLS layer
(native/py/src/tls.rs), which decrypts the TLS connections whose client randoms they hold.

The format is NSS's key log (`LABEL <client random> <secret>` per line), as browsers, Python's
`ssl.SSLContext.keylog_filename`, OpenSSL's SSLKEYLOGFILE, curl and the Java agents write it. A pcapng
file's Decryption Secrets Blocks (`editcap --inject-secrets tls,KEYS`) are read by the capture reader
itself; nothing here is needed for them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["KeyLogError", "read_keylogs", "capture_keylogs", "MAX_KEYLOG_BYTES"]

# a key log line is ~180 bytes: this holds millions of connections' secrets and no capture by mistake
MAX_KEYLOG_BYTES = 1 << 30


class KeyLogError(ValueError):
    """A key log that cannot be used (its message is one line naming the file)."""


def read_keylogs(paths: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[bytes]:
    """The texts of the key log files, each checked to hold key log lines."""
    from dissector.native import core

    if paths is None:
        return []
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    texts = []
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
        taken, bad = core().keylog_lines(text)
        if taken == 0:
            raise KeyLogError(
                f"{name}: no TLS key log lines in it ({bad} lines not understood); expected the NSS format "
                "'LABEL <client random hex> <secret hex>' (CLIENT_RANDOM, CLIENT_TRAFFIC_SECRET_0, ...)"
            )
        texts.append(text)
    return texts


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
