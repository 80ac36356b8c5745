"""tshark as the independent oracle of the tests: the Kafka requests of a capture as tshark 4.0
reads them (`-o tcp.reassemble_out_of_order:TRUE`, Kafka decoded on the capture's broker port)."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path


def kafka_fields(pcap: Path, *fields: str, port: int | None = None, display: str | None = None) -> list[list[str]]:
    """One row per packet tshark shows (`display` filters them), the values of `fields` in it
    (a field several times in one packet: its values joined by commas)."""
    cmd = ["tshark", "-o", "tcp.reassemble_out_of_order:TRUE", "-r", str(pcap), "-T", "fields"]
    if port is not None:
        cmd[3:3] = ["-d", f"tcp.port=={port},kafka"]
    if display:
        cmd += ["-Y", display]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"tshark failed on {pcap}: {out.stderr.strip()[-500:]}")
    return [line.split("\t") for line in out.stdout.splitlines() if line]


def request_versions(pcap: Path, port: int | None = None, by_client: bool = False) -> Counter:
    """(api key, version) of every request (with by_client: (client id, api key, version)) ->
    how many; a packet that holds several requests counts each."""
    fields = ("kafka.api_key", "kafka.api_version", "kafka.client_id")
    counts: Counter = Counter()
    for keys, versions, clients in kafka_fields(pcap, *fields, port=port):
        if not (keys and versions):  # requests carry a version; tshark's response rows do not
            continue
        ids = clients.split(",") if by_client else None
        for i, (k, v) in enumerate(zip(keys.split(","), versions.split(","), strict=True)):
            counts[(ids[i], int(k), int(v)) if ids else (int(k), int(v))] += 1
    return counts
