"""The record schemas of Kafka's internal topics, read from Kafka's own jars.

Brokers write their own topics with types the message specs do not hold:
`__cluster_metadata` with the metadata records (`common/metadata/*.json` in the
`kafka-metadata` jar), and the coordinators' topics with key/value types that only
their jars' sources carry (`common/message/*.json`). mvn fetches the jars once, at
generation time; the runtime reads what this writes into `_generated/`.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

from .specs import normalise_spec, strip_comments

KAFKA_VERSION = "4.3.1"

# topic -> (artifact, classifier, folder in the jar, the spec types it holds). The
# coordinators' JSON files are not in their main jars, only in the sources jars.
TOPICS = {
    "__cluster_metadata": ("kafka-metadata", "", "common/metadata/", ("metadata",)),
    "__consumer_offsets": (
        "kafka-group-coordinator",
        "sources",
        "common/message/",
        ("coordinator-key", "coordinator-value"),
    ),
    "__transaction_state": (
        "kafka-transaction-coordinator",
        "sources",
        "common/message/",
        ("coordinator-key", "coordinator-value"),
    ),
    "__share_group_state": (
        "kafka-share-coordinator",
        "sources",
        "common/message/",
        ("coordinator-key", "coordinator-value"),
    ),
}


class FetchError(RuntimeError):
    pass


def fetch_jar(artifact: str, classifier: str, into: Path, version: str = KAFKA_VERSION, timeout: float = 600) -> Path:
    """org.apache.kafka:<artifact>:<version>[:sources] from Maven Central, by mvn (cached in `into`)."""
    name = f"{artifact}-{version}{'-' + classifier if classifier else ''}.jar"
    jar = into / name
    if jar.is_file():
        return jar
    into.mkdir(parents=True, exist_ok=True)
    coords = f"org.apache.kafka:{artifact}:{version}:jar" + (f":{classifier}" if classifier else "")
    cmd = ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={coords}", f"-DoutputDirectory={into}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise FetchError("mvn is not installed: it fetches Kafka's jars for the internal topics' schemas") from None
    except subprocess.TimeoutExpired:
        raise FetchError(f"mvn did not fetch {coords} within {timeout:.0f}s") from None
    if proc.returncode != 0 or not jar.is_file():
        raise FetchError(f"mvn could not fetch {coords}: {(proc.stdout + proc.stderr).strip()[-500:]}")
    return jar


def read_jar(jar: Path, folder: str, types: tuple[str, ...]) -> list[dict]:
    """The jar's spec files of the given types, normalised as protocol.codegen.specs does."""
    specs = []
    with zipfile.ZipFile(jar) as z:
        for name in sorted(z.namelist()):
            if not (name.startswith(folder) and name.endswith(".json")):
                continue
            spec = json.loads(strip_comments(z.read(name).decode("utf-8")))
            if spec.get("type") in types:
                specs.append(normalise_spec(spec, jar.stem))
    return specs


def internal_schemas(cache: Path) -> tuple[dict, dict]:
    """(data, topics): data is name -> [segment] as registry DATA holds it; topics is
    topic -> {"kind", and per record type id the key and value type names}."""
    data: dict = {}
    topics: dict = {}
    for topic, (artifact, classifier, folder, types) in TOPICS.items():
        specs = read_jar(fetch_jar(artifact, classifier, cache), folder, types)
        if not specs:
            raise FetchError(f"{artifact} {KAFKA_VERSION} holds no {'/'.join(types)} specs under {folder}")
        if "metadata" in types:
            entry = {"kind": "metadata", "records": {}}
        else:
            entry = {"kind": "coordinator", "keys": {}, "values": {}}
        for s in specs:
            if s["name"] in data:
                raise FetchError(f"{s['name']} is defined twice ({s['source']})")
            lo, hi = s["valid"]
            data[s["name"]] = [
                {
                    "name": s["name"],
                    "source": s["source"],
                    "removed": False,
                    "versions": list(range(lo, hi + 1)),
                    "flexible": s["flexible"],
                    "fields": s["fields"],
                }
            ]
            table = {"metadata": "records", "coordinator-key": "keys", "coordinator-value": "values"}[s["type"]]
            entry[table][s["api_key"]] = s["name"]
        topics[topic] = {k: dict(sorted(v.items())) if isinstance(v, dict) else v for k, v in entry.items()}
    return data, topics
