"""Writes native/core/data/registry.json, the core's copy of the registry's schema data, from the
files protocol.codegen generates out of Kafka's message specs and error table
(protocol/_generated/registry_data.py, internal_data.py and error_codes.py):

    python native/tools/gen_registry.py > native/core/data/registry.json

The core embeds the file (kafkawire_core::spec), so it decodes without Python and the bindings
hand nothing down; Python's `protocol` package keeps its own copy for encoding and decoding.
tests/test_native_boundary.py fails while the written file is not what this prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def plain(v):
    """The data as JSON holds it: tuples (version ranges) become lists."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


def document() -> dict:
    sys.path.insert(0, str(ROOT))
    from protocol._generated import error_codes, internal_data, registry_data

    return {
        "generated": "by `python native/tools/gen_registry.py` from protocol/_generated; do not edit",
        "api_names": plain(registry_data.API_NAMES),
        # (api key, direction) keys as a list: JSON objects key by strings only
        "messages": [[k, d, plain(segs)] for (k, d), segs in sorted(registry_data.MESSAGES.items())],
        "headers": plain(registry_data.HEADERS),
        "data": plain(registry_data.DATA),
        "internal_data": plain(internal_data.DATA),
        "internal_topics": plain(internal_data.TOPICS),
        # code -> [name, retriable], Kafka's error table
        "errors": plain(error_codes.ERRORS),
    }


def source() -> str:
    return json.dumps(document(), separators=(",", ":"), sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(source())
