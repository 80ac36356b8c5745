"""Where a run's time goes, by stage: a `perf record -g` profile's samples grouped by the symbol's
module (capture, tcp, decode, render, rows, ...), libc's copies and allocation, the kernel, Python.

    perf record -F 999 -g -o /tmp/perf.data -- python -m kafkawire land CAPTURE --out /tmp/t --quiet
    python bench/perf_stages.py /tmp/perf.data

The groups are by symbol name, so a copy or an allocation counts where it happens (libc), not
for the stage that asked for it: read the copy and allocation rows as costs spread over the rest.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys


def main(data: str) -> None:
    out = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol", "--stdio", "-g", "none"],
        capture_output=True,
        text=True,
    ).stdout
    rules = [
        ("read: kernel copy and file I/O", r"\[k\]|_copy_to_iter"),
        ("capture reader", r"capture::|PacketReader|FileRecords|packet::"),
        ("tcp reassembly / tls", r"kafkawire_core::tcp|kafkawire_core::tls|stream::"),
        ("frames and pairing", r"kafkawire_core::frames|kafkawire_core::exchanges|order::|engine::|land::"),
        (
            "decoding (fast and lenient), walks",
            r"kafkawire_core::decode|kafkawire_core::lenient|schema::|topics::|nested::|internal::|redact::|Value>",
        ),
        ("records, crc, codecs", r"records::|crc32|record_sets|compression|zstd|lz4|snap|inflate|flate"),
        ("rendering lines and JSON", r"render::|json::|ryu|itoa"),
        ("table rows and Arrow", r"rows::|columns::|arrow"),
        ("memory copies (memmove/memcpy)", r"memmove|memcpy"),
        ("allocation", r"malloc|free|_int_|realloc|unlink_chunk|consolidate"),
        ("hashing", r"Hasher|hash_one|sip"),
        (
            "Python interpreter and pyarrow/parquet",
            r"libpython|_PyEval|libarrow|libparquet|pyarrow|\.cpython-311-x86_64-linux-gnu\.so.*Py|libz",
        ),
    ]
    tot = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        pct, dso, kind, sym = float(m[1]), m[2], m[3], m[4].strip()
        text = f"{dso} [{kind}] {sym}"
        for name, rx in rules:
            if re.search(rx, text):
                tot[name] += pct
                break
        else:
            tot["other"] += pct
    for k, v in tot.most_common():
        print(f"{v:6.1f}%  {k}")


if __name__ == "__main__":
    main(sys.argv[1])
