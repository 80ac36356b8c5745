"""Which (api key, version) pairs tshark's Kafka dissector decodes, measured rather than read off
its source: one synthetic request and answer for every pair kafkawire's registry knows, each on
its own TCP connection, fed to tshark; a pair counts for tshark when neither message is marked
unknown, unsupported or malformed. docs/comparison.md quotes these figures and
tests/test_readme_examples.py holds it to them.

    python -m tests.tshark_coverage        # prints the figures
"""

from __future__ import annotations

import subprocess
import tempfile
import uuid
from pathlib import Path

from protocol import registry
from protocol.codec import encode_request, encode_response, with_size
from tests.pcapgen import Flow, write_pcap

PORT = 9092
# Minimal spec-valid messages: every field of the version, arrays empty, numbers 0. Array elements
# and bytes contents would measure how tshark parses what is nested inside (consumer protocol
# metadata, message sets), not whether it knows the version's layout.
_SCALAR = {"bool": False, "float64": 0.0, "string": "x", "bytes": b"", "records": b"", "uuid": uuid.UUID(int=1)}


def _in(rng, v) -> bool:
    return bool(rng) and rng[0] <= v <= rng[1]


def _value(f: dict, version: int, flexible: bool):
    if f.get("array"):
        return () if f["type"] in _NUMBERS else []
    if f["type"] == "struct":
        return _body(f["fields"], version, flexible)
    return _SCALAR.get(f["type"], 0)


_NUMBERS = ("int8", "int16", "int32", "int64", "uint16", "uint32", "bool", "float64")


def _body(fields: list, version: int, flexible: bool) -> dict:
    body = {}
    for f in fields:
        if _in(f["versions"], version) and not (flexible and _in(f.get("tagged"), version)):
            body[f["name"]] = _value(f, version, flexible)
    if "Acks" in body:
        body["Acks"] = -1  # acks=0 Produce gets no answer

    return body


def _message(key: int, version: int, direction: str) -> dict:
    s = registry.schema(key, version, direction)
    return _body(s["fields"], version, registry.is_flexible(key, version, direction))


def pairs() -> list[tuple[int, int]]:
    return [(k, v) for k in registry.api_keys() for v in registry.request_versions(k)]


def build(path: Path) -> list[tuple[int, int]]:
    """One connection per pair (client port 20000 + its index): request, then its answer."""
    pkts, done = [], []
    for i, (key, version) in enumerate(pairs()):
        try:
            req = encode_request(
                key, version, {"CorrelationId": i + 1, "ClientId": "cov"}, _message(key, version, "request")
            )
            resp = encode_response(key, version, {"CorrelationId": i + 1}, _message(key, version, "response"))
        except Exception as e:  # a pair our own encoder cannot build is a finding, not a skip
            raise AssertionError(f"cannot encode api {key} v{version}: {e}") from e
        flow = Flow(client=("10.0.0.1", 20000 + i), server=("10.0.0.2", PORT), t0=1_700_000_000.0 + i)
        pkts += [flow.send("c", with_size(req)), flow.send("s", with_size(resp))]
        done.append((key, version))
    write_pcap(path, pkts)
    return done


def tshark_verdicts(pcap: Path, port: int = PORT) -> dict[int, list[str]]:
    """Per client port: one verdict per Kafka message tshark saw ('ok', 'unsupported', 'unknown', 'malformed')."""
    out = subprocess.run(
        [
            "tshark",
            "-n",
            "-r",
            str(pcap),
            "-d",
            f"tcp.port=={port},kafka",
            "-T",
            "fields",
            "-E",
            "occurrence=f",
            "-e",
            "tcp.srcport",
            "-e",
            "tcp.dstport",
            "-e",
            "kafka.len",
            "-e",
            "kafka.unsupported_api_version",
            "-e",
            "kafka.unknown_api_key",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    verdicts: dict[int, list[str]] = {}
    for line in out.splitlines():
        src, dst, length, unsupported, unknown, malformed, severity = (line.split("\t") + [""] * 7)[:7]
        if not length:
            continue
        client = int(dst) if int(src) == port else int(src)
        v = (
            "unsupported"
            if unsupported
            else "unknown"
            if unknown
            else "malformed"
            if malformed
            else "malformed"
            if severity and int(severity, 0) >= 0x00800000
            else "ok"
        )  # PI_ERROR and above
        verdicts.setdefault(client, []).append(v)
    return verdicts


def measure() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        pcap = Path(tmp) / "every-version.pcap"
        done = build(pcap)
        verdicts = tshark_verdicts(pcap)
    ok, unsupported, malformed = [], [], []
    for i, pair in enumerate(done):
        v = verdicts.get(20000 + i, [])
        if v == ["ok", "ok"]:
            ok.append(pair)
        elif "unsupported" in v or "unknown" in v or not v:
            unsupported.append(pair)
        else:
            malformed.append(pair)
    keys = {k for k, _ in done}
    known = ok + malformed
    return {
        "pairs": len(done),
        "apis": len(keys),
        "tshark_known": len(known),
        "tshark_known_apis": len({k for k, _ in known}),
        "tshark_ok": len(ok),
        "tshark_apis": len({k for k, _ in ok}),
        "tshark_unsupported": len(unsupported),
        "tshark_malformed": len(malformed),
        "ok": ok,
        "unsupported": unsupported,
        "malformed": malformed,
    }


def real_samples() -> list[Path]:
    """The bundled captures of real clients (errors.pcap sends a made-up version and API key on purpose)."""
    return [
        p
        for p in sorted(Path(__file__).resolve().parents[1].joinpath("samples").glob("*.pcap"))
        if p.name != "errors.pcap"
    ]


def samples(paths) -> dict:
    """Real captures: the distinct (api key, version) pairs of their requests, and those tshark leaves undecoded."""
    import dissector

    pairs, undecoded, requests, requests_undecoded, ours_undecodable = set(), set(), 0, 0, 0
    known = set(registry.api_keys())
    for path in paths:
        seen = [x for x in dissector.dissect([str(path)]) if x.type == "exchange" and x.api_key is not None]
        ours_undecodable += sum(x.status == "undecodable" for x in seen)
        for port in sorted({int(x.broker.rsplit(":", 1)[1]) for x in seen}):
            out = subprocess.run(
                [
                    "tshark",
                    "-n",
                    "-r",
                    str(path),
                    "-d",
                    f"tcp.port=={port},kafka",
                    "-Y",
                    f"tcp.dstport=={port} && kafka",
                    "-T",
                    "fields",
                    "-E",
                    "occurrence=f",
                    "-e",
                    "kafka.api_key",
                    "-e",
                    "kafka.api_version",
                    "-e",
                    "kafka.unsupported_api_version",
                    "-e",
                    "kafka.unknown_api_key",
                    "-e",
                    "_ws.malformed",
                ],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            ).stdout
            for line in out.splitlines():
                key, version, unsupported, unknown, malformed = (line.split("\t") + [""] * 5)[:5]
                if not key or not version:
                    continue
                pair = (int(key), int(version))
                if pair[0] not in known:  # tshark reading a raw SASL token (after SaslHandshake v0) as a request
                    continue
                pairs.add(pair)
                requests += 1
                if unsupported or unknown or malformed:
                    undecoded.add(pair)
                    requests_undecoded += 1
    return {
        "pairs": len(pairs),
        "undecoded": sorted(undecoded),
        "requests": requests,
        "requests_undecoded": requests_undecoded,
        "kafkawire_undecodable": ours_undecodable,
    }


if __name__ == "__main__":
    m = measure()
    print({k: v for k, v in m.items() if not isinstance(v, list)})
    print("malformed:", m["malformed"])
    missing: dict[int, list[int]] = {}
    for k, v in m["unsupported"]:
        missing.setdefault(k, []).append(v)
    print("not decoded (unknown or unsupported):", {registry.api_name(k): vs for k, vs in missing.items()})
    s = samples(real_samples())
    print(
        "samples:",
        {k: v for k, v in s.items() if k != "undecoded"},
        [f"{registry.api_name(k)} v{v}" for k, v in s["undecoded"]],
    )
