"""Decode speed: kafkawire against kio 0.6.5 (Rust-backed) on the same bytes, in the same run.

    python bench/bench_decode.py [--budget SECONDS] [--profile]

Each message is built with kafkawire's encoder, checked to decode alike with
both libraries, then timed best-of-N (short ~20 ms loops taken in turns by the
contenders, ~--budget seconds each per case). Three kafkawire figures: the Python body decoder alone (the same
work kio's entity_reader does), the public protocol.decode_response/decode_request
(header, error wrapping, nested payloads), and the native core's fast decoder
(kafkawire_core::decode), timed through the editable build's test hook
`dissector._native.Registry.decode_*`, which builds the same Python objects, checked equal ("-"
where the fast decoder refuses the frame and the core's lenient path reads it, or where the
native core is not built with its test hooks). In a run the core builds no Python objects for a
body: its lines and rows are made in Rust.
Ratio = kafkawire body msgs/s / kio msgs/s; native ratio = native msgs/s / kio msgs/s.
Targets (issue 2): >= 0.5x on the Metadata response, >= 1x where the message is mostly bytes.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import protocol  # noqa: E402
from protocol import registry  # noqa: E402
from protocol.records import Record, build_batch  # noqa: E402

try:
    from tests.kio_compat import diff, kio_class, kio_decode, schema_fields
except ImportError as exc:  # kio is a dev extra
    sys.exit(f"bench needs kio 0.6.5 (pip install -e '.[dev]'): {exc}")

HEADER = {"CorrelationId": 7}


def metadata_v12(topics: int = 50, partitions: int = 10) -> tuple:
    brokers = [
        {"NodeId": i, "Host": f"broker-{i}.kafka.internal", "Port": 9092, "Rack": f"rack-{i % 3}"} for i in range(3)
    ]
    body = {
        "ThrottleTimeMs": 0,
        "Brokers": brokers,
        "ClusterId": "kafkawire-bench-cluster",
        "ControllerId": 1,
        "Topics": [
            {
                "ErrorCode": 0,
                "Name": f"orders.region-{t:03d}",
                "TopicId": uuid.UUID(int=t + 1),
                "IsInternal": False,
                "Partitions": [
                    {
                        "ErrorCode": 0,
                        "PartitionIndex": p,
                        "LeaderId": p % 3,
                        "LeaderEpoch": 4,
                        "ReplicaNodes": [p % 3, (p + 1) % 3, (p + 2) % 3],
                        "IsrNodes": [p % 3, (p + 1) % 3, (p + 2) % 3],
                        "OfflineReplicas": [],
                    }
                    for p in range(partitions)
                ],
                "TopicAuthorizedOperations": -2147483648,
            }
            for t in range(topics)
        ],
    }
    return "response", 3, 12, protocol.encode_response(3, 12, HEADER, body)


def _batch(size: int, seed: int) -> bytes:
    """A real magic-2 batch of ~size bytes (1 KB values), uncompressed."""
    value = bytes((seed + i) % 251 for i in range(1000))
    records = [
        Record(offset=i, timestamp=1_700_000_000_000 + i, key=b"key-%d" % i, value=value)
        for i in range(max(1, size // 1020))
    ]
    return build_batch(records, base_offset=seed * 10_000)


def fetch_v16(partitions: int = 4, size: int = 256 * 1024) -> tuple:
    body = {
        "ThrottleTimeMs": 0,
        "ErrorCode": 0,
        "SessionId": 12345,
        "Responses": [
            {
                "TopicId": uuid.UUID(int=99),
                "Partitions": [
                    {
                        "PartitionIndex": p,
                        "ErrorCode": 0,
                        "HighWatermark": 1_000_000,
                        "LastStableOffset": 1_000_000,
                        "LogStartOffset": 0,
                        "AbortedTransactions": None,
                        "PreferredReadReplica": -1,
                        "Records": _batch(size, p),
                    }
                    for p in range(partitions)
                ],
            }
        ],
        "NodeEndpoints": [],
    }
    return "response", 1, 16, protocol.encode_response(1, 16, HEADER, body)


def produce_v9(partitions: int = 3, size: int = 16 * 1024) -> tuple:
    body = {
        "TransactionalId": None,
        "Acks": -1,
        "TimeoutMs": 30000,
        "TopicData": [
            {"Name": "orders", "PartitionData": [{"Index": p, "Records": _batch(size, p)} for p in range(partitions)]}
        ],
    }
    return "request", 0, 9, protocol.encode_request(0, 9, {"CorrelationId": 7, "ClientId": "bench"}, body)


def api_versions_v3(apis: int = 60) -> tuple:
    body = {
        "ErrorCode": 0,
        "ApiKeys": [{"ApiKey": k, "MinVersion": 0, "MaxVersion": 3 + k % 10} for k in range(apis)],
        "ThrottleTimeMs": 0,
    }
    return "response", 18, 3, protocol.encode_response(18, 3, HEADER, body)


CASES = {
    "Metadata v12 response (50 topics x 10 partitions)": metadata_v12,
    "Fetch v16 response (4 x 256 KB record batches)": fetch_v16,
    "Produce v9 request (3 x 16 KB record batches)": produce_v9,
    # Where kio's copy of the record bytes starts to outweigh kafkawire's per-field Python work.
    "Produce v9 request (3 x 256 KB record batches)": lambda: produce_v9(size=256 * 1024),
    "ApiVersions v3 response (60 apis)": api_versions_v3,
}
TARGETS = {"Metadata": 0.5, "Fetch": 1.0, "Produce": 1.0, "ApiVersions": None}


def _calibrate(fn, target: float = 0.02) -> int:
    """Calls per timed loop so that one loop takes about `target` seconds."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - start
        if took >= target or n >= 1 << 24:
            return n
        n = max(n * 2, int(n * target / max(took, 1e-9)))


def race(fns: list, budget: float) -> list[float]:
    """Seconds per call for each fn: best of many short loops, taken in turns.

    Short loops in alternation let every contender see the same machine load
    (the box is shared), and the minimum discards the loops a neighbour slowed.
    """
    counts = [_calibrate(fn) for fn in fns]
    best = [float("inf")] * len(fns)
    deadline = time.perf_counter() + budget * len(fns)
    while time.perf_counter() < deadline:
        for i, (fn, n) in enumerate(zip(fns, counts, strict=True)):
            start = time.perf_counter()
            for _ in range(n):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / n)
    return best


def prepare(direction: str, api_key: int, version: int, frame: bytes):
    """(kafkawire body decoder, public decoder, kio decoder), after checking both read the same values."""
    if direction == "request":
        _, pos = protocol.decode_request_header(frame)
        public = lambda: protocol.decode_request(frame)  # noqa: E731
    else:
        _, pos = protocol.decode_response_header(frame, api_key, version)
        public = lambda: protocol.decode_response(frame, api_key, version)  # noqa: E731
    dec = registry.codec(api_key, version, direction)[0]
    cls = kio_class(api_key, version, direction)
    ours, end = dec(frame, pos)
    theirs, kend = kio_decode(cls, frame, pos)
    fields, flexible = schema_fields(api_key, version, direction)
    problems = diff(theirs, ours, fields, version, flexible)
    if end != len(frame) or kend != len(frame) or problems:
        raise SystemExit(f"kafkawire and kio disagree on {api_key} v{version} {direction}: {problems[:3]}")
    from kio.serial import entity_reader

    reader = entity_reader(cls)
    return (
        (lambda: dec(frame, pos)),
        public,
        (lambda: reader(frame, pos)),
        _native_decoder(direction, api_key, version, frame, public),
    )


def _native_decoder(direction: str, api_key: int, version: int, frame: bytes, public):
    """The native core's decode of the whole frame to Python objects, checked against the public decoder;
    None when the native core is not built with its test hooks, or its fast decoder refuses the frame."""
    try:
        from dissector import _native
    except ImportError:
        return None
    if not hasattr(_native, "Registry"):  # a wheel: the hooks are an editable build's
        return None
    reg = _native.Registry(nested=False)
    if direction == "request":
        fn = lambda: reg.decode_request(frame)  # noqa: E731
    else:
        fn = lambda: reg.decode_response(frame, api_key, version)  # noqa: E731
    got = fn()
    if isinstance(got, str):
        return None
    if got[0] != public().body:
        raise SystemExit(f"the native decoder and the Python one disagree on {api_key} v{version} {direction}")
    return fn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=1.5, help="seconds per case and decoder (default 1.5)")
    ap.add_argument("--profile", action="store_true", help="cProfile the Metadata body decoder and exit")
    args = ap.parse_args(argv)

    if args.profile:
        import cProfile
        import pstats

        body, _, _, _ = prepare(*metadata_v12())
        cProfile.runctx("for _ in range(300): body()", globals(), {"body": body}, "/tmp/kafkawire-metadata.prof")
        pstats.Stats("/tmp/kafkawire-metadata.prof").sort_stats("tottime").print_stats(12)
        return 0

    rows = []
    for label, build in CASES.items():
        direction, api_key, version, frame = build()
        body, public, kio, native = prepare(direction, api_key, version, frame)
        times = race([body, public, kio] + ([native] if native else []), args.budget)
        rows.append((label, len(frame), *(1 / t for t in times[:3]), 1 / times[3] if native else None))

    print(
        f"{'message':52} {'bytes':>9} {'kafkawire/s':>12} {'public/s':>10} {'native/s':>10} {'kio/s':>10} "
        f"{'ratio':>6} {'native':>7}  target"
    )
    for label, size, body, public, kio, native in rows:
        target = TARGETS[label.split()[0]]
        verdict = "" if target is None else (f">= {target}x " + ("ok" if body / kio >= target else "MISSED"))
        nat, nratio = (f"{native:>10,.0f}", f"{native / kio:>6.2f}x") if native else (f"{'-':>10}", f"{'-':>7}")
        print(
            f"{label:52} {size:>9} {body:>12,.0f} {public:>10,.0f} {nat} {kio:>10,.0f} {body / kio:>5.2f}x "
            f"{nratio}  {verdict}"
        )
    print(
        f"python {sys.version.split()[0]}, kio 0.6.5; ratio = kafkawire body decoder / kio entity_reader, "
        "both on the same frame; public = protocol.decode_request/decode_response; native = the native core's "
        "decode of the same frame (header and body) to the same objects"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
