"""`land` on the native core (landing.local.land_local: rows.rs writes the exchanges, errors,
connections, anomalies and records rows) against the oracle's rows over the items of the Python
pipeline (the frozen oracle, tests/oracle): the same tables, row for row, for every sample and
shared capture, damaged files, rotated sets, --records, --no-payloads and the filters."""

from __future__ import annotations

from pathlib import Path

import pytest

_native = pytest.importorskip("dissector._native")

from tests.oracle.capture import _capture_files, read_packets  # noqa: E402
from dissector.filters import Filter  # noqa: E402
from landing.local import land_local  # noqa: E402
from landing.schemas import TABLES  # noqa: E402
from landing.writer import dataset  # noqa: E402
from tests.oracle import rows as oracle_rows  # noqa: E402
from tests import oracle  # noqa: E402
from tests.test_corrupt_files import KINDS, damaged  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))


def rows(out: Path, table: str) -> list:
    t = dataset(out, table).to_table()
    cols = sorted(t.column_names)
    return sorted((tuple(repr(v) for v in r.values()) for r in t.select(cols).to_pylist()), key=repr)


def python_land(paths, out, monkeypatch, keep=None, **kw) -> dict:
    """The oracle's tables: the Python pipeline's items (those `keep` keeps), the oracle's rows."""
    items = oracle.stitched(read_packets(paths), ports=kw.pop("ports", ()))
    return oracle_rows.land(items if keep is None else filter(keep, items), out, **kw)


def check(paths, tmp_path, monkeypatch, ports=(), payloads=True, records=True, keep=None) -> dict:
    want = python_land(paths, tmp_path / "py", monkeypatch, keep, ports=ports, payloads=payloads, records=records)
    faults: list = []
    got = land_local(
        _capture_files(paths),
        tmp_path / "rs",
        ports=ports,
        payloads=payloads,
        records=records,
        faults=faults,
        filter=keep,
    )
    assert got == want
    assert sorted(want) == sorted(t for t in TABLES if records or t != "records")
    for t in want:
        a, b = rows(tmp_path / "rs", t), rows(tmp_path / "py", t)
        assert len(a) == len(b) == want[t], t
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert x == y, f"{t} row {i}:\nnative {x}\noracle {y}"
        assert dataset(tmp_path / "rs", t).schema == dataset(tmp_path / "py", t).schema, t
    return got


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples(path, tmp_path, monkeypatch):
    got = check([path], tmp_path, monkeypatch, ports=[29092])
    assert got["exchanges"] > 0
    check([path], tmp_path / "bare", monkeypatch, ports=[29092], records=False)


def test_shared_captures(shared_dir, tmp_path, monkeypatch):
    for i, path in enumerate(sorted((shared_dir / "pcaps").glob("*.pcap"))):
        check([path], tmp_path / str(i), monkeypatch)


def test_a_rotated_set_and_no_payloads(tmp_path, monkeypatch):
    paths = [ROOT / "samples" / "java-codecs-ak.pcap", ROOT / "samples" / "confluent-codecs.pcap"]
    check(paths, tmp_path / "a", monkeypatch, payloads=False)
    check(paths, tmp_path / "b", monkeypatch)
    check(paths, tmp_path / "c", monkeypatch, payloads=False, records=False)


FILTERS = {
    "api": Filter.of(apis=["Fetch", "3"]),
    "topic": Filter.of(topics=["kpy-*"]),
    "client": Filter.of(client_ids=["kw-producer-*"]),
    "errors": Filter.of(errors_only=True),
    "latency": Filter.of(min_latency=5.0),
    "time": Filter.of(time_from=1.0, time_to=4102444800.0),
}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filtered_landing(name, tmp_path, monkeypatch):
    """`land --filter`: the native rows of what the filter keeps are the oracle's rows of the items
    Filter keeps (on a land run's stable connection ids)."""
    paths = [ROOT / "samples" / "kafka-python-basic.pcap", ROOT / "samples" / "errors.pcap"]
    got = check(paths, tmp_path, monkeypatch, keep=FILTERS[name])
    whole = land_local(_capture_files(paths), tmp_path / "whole", records=True)
    if name != "time":
        assert 0 < got["exchanges"] < whole["exchanges"]


def test_filtered_landing_by_connection(tmp_path, monkeypatch):
    path = ROOT / "samples" / "kafka-python-basic.pcap"
    land_local([str(path)], tmp_path / "whole")
    conn = sorted(r["connection_id"] for r in dataset(tmp_path / "whole", "connections").to_table().to_pylist())[1]
    got = check([path], tmp_path, monkeypatch, keep=Filter.of(connections=[conn]))
    assert got["connections"] == 1 and got["exchanges"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_files(kind, tmp_path, monkeypatch):
    blob, _ = damaged(kind)
    path = tmp_path / f"{kind}.pcap"
    path.write_bytes(blob)
    check([path], tmp_path, monkeypatch)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_stitched_items(path, monkeypatch):
    """dissector.native.stitched (a land run's items) on the native core: the items of the
    oracle's stitched run, with the same stable connection ids."""
    from dissector import native
    from tests.native_compare import assert_same_items

    got = list(native.stitched([str(path)], ports=[29092], max_frame_size=native.DEFAULT_MAX_FRAME_SIZE))
    want = list(oracle.stitched(read_packets([path]), ports=[29092]))
    assert_same_items(got, want, path.name)
    assert all(x.connection is None or x.connection > 1 << 20 for x in got)  # stable ids, not ordinals


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_POOL = [p.read_bytes() for p in SAMPLES if p.stat().st_size < 64 << 10]


@st.composite
def _damaged(draw):
    data = bytearray(draw(st.sampled_from(_POOL)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(24, len(data) - 1))
        op = draw(st.integers(0, 3))
        if op == 0:
            data[i] = draw(st.integers(0, 255))
        elif op == 1:
            del data[i : i + draw(st.integers(1, 200))]
        elif op == 2:
            data[i:i] = draw(st.binary(min_size=1, max_size=32))
        else:
            data[i : i + 4] = draw(st.sampled_from([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x00\x00\x00\x00"]))
    return bytes(data)


@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(_damaged())
def test_damaged_real_captures_land_alike(tmp_path_factory, data):
    """Hostile input through the native rows: damaged real captures land as the Python pipeline lands them."""
    import pytest as _pytest

    tmp = tmp_path_factory.mktemp("d")
    path = tmp / "x.pcap"
    path.write_bytes(data)
    with _pytest.MonkeyPatch.context() as m:
        check([path], tmp, m, ports=[29092])


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_packet_rows_give_the_python_pipelines_items(path):
    """A Spark task's input: one bucket's packets as rows, the set's end given (as a tuple or as a
    callable asked after the last row). The native core gives the oracle's items."""
    from tests.oracle.capture import CaptureAnomaly
    from tests.ranges_reference import conn_bucket as _bucket
    from tests.oracle import conn_key

    whole = list(read_packets([str(path)]))
    times = [p.ts for p in whole if type(p) is not CaptureAnomaly]
    end = (times[-1], max(times))
    seen = 0
    # a bucket, and a bucket of the capture's first half (requests unanswered, frames cut at its end)
    for b, pkts in ((0, whole), (1, whole), (0, whole[: len(whole) // 2])):
        rows = [
            (p.ts, p.kind, p.detail, p.index)
            if type(p) is CaptureAnomaly
            else (p.ts, p.src, p.sport, p.dst, p.dport, p.seq, p.ack, p.flags, p.payload, p.missing, p.index)
            for p in pkts
            if type(p) is CaptureAnomaly and b == 0 or type(p) is not CaptureAnomaly and _bucket(conn_key(p), 2) == b
        ]
        want = [_plain(it) for it in oracle.row_items(iter(rows), ports=[29092], end=end)]
        got = [_plain(it) for it in row_items(iter(rows), ports=[29092], end=lambda: end)]
        assert got == want
        seen += sum(r[0] == "Exchange" for r in got)
    assert seen > 0


def row_items(rows, *, ports=(), end=None):
    """The native core's items of packets given as rows (as the Spark engine's stage 1 ships
    them), redacted: a Spark task's run."""
    from dissector import native
    from tests.redact_reference import redact

    out = native.stitched([], ports=ports, max_frame_size=native.DEFAULT_MAX_FRAME_SIZE, packets=rows, end=end)
    return map(redact, out)


def _plain(x):
    """An item as plain values (a bytes field may be a memoryview on one side, bytes on the other)."""
    import dataclasses

    if isinstance(x, memoryview):
        return bytes(x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if dataclasses.is_dataclass(x):
        return (type(x).__name__, *(_plain(getattr(x, f.name)) for f in dataclasses.fields(x)))
    return x


@pytest.mark.parametrize("end", [(9.0, 9.5), lambda: (9.0, 9.5)], ids=["tuple", "callable"])
def test_packet_rows_close_what_is_open_at_the_sets_end(end):
    """A stream cut mid-resync in this task's share closes at the whole set's last packet time."""
    rows = [
        (0.5, "corrupt_file", "x.pcap: bad record header at offset 99", 7),
        (1.0, "10.0.0.1", 40000, "10.0.0.2", 9092, 1000, 0, 0x02, b"", 0, 0),
        (1.1, "10.0.0.1", 40000, "10.0.0.2", 9092, 1001, 0, 0x18, b"GET / HTTP/1.1\r\n\r\n", 0, 1),
    ]
    got = {
        "python": [_plain(i) for i in oracle.row_items(iter(rows), end=end)],
        "native": [_plain(i) for i in row_items(iter(rows), end=end)],
    }
    assert got["native"] == got["python"]
    kinds = [(i[0], i[2], i[3]) for i in got["native"] if i[0] == "Anomaly"]
    assert kinds == [("Anomaly", 0.5, "corrupt_file"), ("Anomaly", 1.1, "frame_too_large"), ("Anomaly", 9.0, "resync")]


def _python_held_records(path: Path) -> Path:
    """A capture whose Produce request and Fetch response carry bytes after their last field (so
    Python's lenient decoder decodes them and the lander leaves them to Python), beside a plain
    Produce the native core decodes: records of both kinds of exchange."""
    import protocol
    from protocol.records import Record, build_batch
    from tests.pcapgen import Flow, write_pcap

    recs = [
        Record(0, 1_700_000_000_000, b"k", b"\x00\x00\x00\x00\x07avro", [("h", b"x"), ("\xff", None)]),
        Record(1, -1, None, b"v"),
    ]
    batch = build_batch(recs, base_offset=0, codec="gzip", producer_id=5, producer_epoch=1, base_sequence=3)

    def produce(corr):
        body = {
            "Acks": -1,
            "TimeoutMs": 1000,
            "TopicData": [{"Name": "orders", "PartitionData": [{"Index": 0, "Records": batch}]}],
        }
        return protocol.encode_request(0, 9, {"CorrelationId": corr, "ClientId": "c"}, body)

    def produced(corr, base):
        parts = [{"Index": 0, "ErrorCode": 0, "BaseOffset": base}]
        return protocol.encode_response(
            0, 9, {"CorrelationId": corr}, {"Responses": [{"Name": "orders", "PartitionResponses": parts}]}
        )

    fetch = protocol.encode_request(
        1,
        11,
        {"CorrelationId": 3, "ClientId": "c"},
        {"MaxWaitMs": 500, "MinBytes": 1, "Topics": [{"Topic": "orders", "Partitions": [{"Partition": 0}]}]},
    )
    fetched = protocol.encode_response(
        1,
        11,
        {"CorrelationId": 3},
        {
            "Responses": [
                {"Topic": "orders", "Partitions": [{"PartitionIndex": 0, "HighWatermark": 2, "Records": batch}]}
            ]
        },
    )
    flow = Flow()
    pkts = flow.handshake()
    for side, msg in [
        ("c", produce(1) + b"\0\0"),  # trailing bytes: Python's
        ("s", produced(1, 40)),
        ("c", produce(2)),  # the native core's
        ("s", produced(2, 42)),
        ("c", fetch),
        ("s", fetched + b"\0"),  # trailing bytes: Python's
    ]:
        pkts.append(flow.send(side, protocol.with_size(msg)))
    pkts += flow.close()
    return write_pcap(path, pkts)


@pytest.mark.parametrize("payloads", [True, False])
def test_records_of_exchanges_left_to_python(tmp_path, monkeypatch, payloads):
    path = _python_held_records(tmp_path / "held.pcap")
    got = check([path], tmp_path, monkeypatch, ports=[9092], payloads=payloads)
    assert got["exchanges"] == 3 and got["records"] == 6
