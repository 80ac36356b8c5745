"""The kinds of anomaly an item can name, registered once in native/core/anomalies.tsv (kind,
severity, group, layer, summary, as Wireshark registers its expert info).

The core's table is made of that file when it is built (native/core/build.rs), this side's is
generated from it (dissector/_generated/anomalies.py), and the engine refuses a configuration
whose table differs from the core's (tests/test_native_boundary.py holds them equal).
"""

from __future__ import annotations

from dissector._generated.anomalies import TABLE, AnomalyKind

__all__ = ["AnomalyKind", "FILE_FAULTS", "TABLE"]

# anomalies of the capture files themselves (no connection): a command's one-line error
FILE_FAULTS = frozenset((AnomalyKind.CORRUPT_FILE, AnomalyKind.TRUNCATED_FILE, AnomalyKind.EMPTY_FILE))
