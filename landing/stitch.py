"""Packets -> landing items with connection ids that do not depend on how the capture was split.

Both engines land through the native core's stitched run: the local one over all packets of
the set (`file_items`), the Spark one over the packets of the connections hashed to one task
(every packet of a TCP 4-tuple goes to the same task, in capture order).  The
dissector's connection number is an ordinal of first appearance, which a task
seeing a subset cannot know; the core makes it a 63-bit hash of the client, the
broker and the connection's first packet time (native/py/src/rows.rs), the same in any
split.  Table order is not the dissector's request-time order (tables are
sets; sort by ids), so no reorder window is needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dissector.native import DEFAULT_MAX_FRAME_SIZE

__all__ = ["file_items"]


def file_items(
    files: list, *, ports: Iterable[int] = (), show_secrets: bool = False, progress=None, tls_keylogs=()
) -> Iterator:
    """The items of the capture files `files` with stable connection ids, as they complete
    (tls_keylogs: key log texts, dissector.tls.read_keylogs)."""
    from dissector import native
    from dissector.files import capture_files

    out = native.stitched(
        capture_files(files),
        ports=ports,
        max_frame_size=DEFAULT_MAX_FRAME_SIZE,
        progress=progress,
        tls_keylogs=tls_keylogs,
        show_secrets=show_secrets,
    )
    yield from out
