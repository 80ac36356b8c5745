"""TLS: connections recognised on any port, decrypted with key logs, and what was inside them.

The oracle is what the clients did (samples/tls/*.json: every listener's forced version and cipher
suite, the records each client produced and consumed back, written by the workload itself) and the
same workload over the broker's PLAINTEXT listener in the same capture. The captures are real
(samples/make_captures.py: Apache Kafka with six SSL listeners each forcing one TLS version and
suite, and a SASL_SSL listener; kafka-python and aiokafka logging keys through
SSLContext.keylog_filename, the Java client through the extract-tls-secrets agent, confluent-kafka
with the keys taken on the broker side). Damage (a flipped byte, a lost segment, another capture's
key log) is made on copies of them.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import dpkt
import pyarrow.parquet as pq
import pytest

import dissector
from dissector.tls import KeyLogError, read_keylogs
from landing.local import land_local

ROOT = Path(__file__).resolve().parents[1]
TLS = ROOT / "samples" / "tls"
NAMES = ["tls-kafka-python-ak", "tls-java-ak", "tls-confluent-ak", "tls-keyupdate-ak"]


def witness(name: str) -> dict:
    return json.loads((TLS / f"{name}.json").read_text())


def items(path: Path, keys=None, **kw) -> list:
    return list(dissector.dissect(path, connections=True, tls_keylog=keys, **kw))


def by_port(its: list) -> dict[int, list]:
    out = collections.defaultdict(list)
    for x in its:
        if x.type in ("exchange", "connection"):
            out[int(x.broker.rsplit(":", 1)[1])].append(x)
    return out


def tls_ports(w: dict) -> dict[int, dict]:
    return {v["port"]: v for v in w["listeners"].values() if v["tls_version"]}


@pytest.mark.parametrize("name", NAMES)
def test_without_keys_each_tls_connection_is_one_anomaly(name):
    """No key log: no frame is read from TLS bytes; each TLS connection is one tls_encrypted anomaly
    naming the version and suite its listener forces; plaintext connections decode as before."""
    w = witness(name)
    its = items(TLS / f"{name}.pcap")
    ports = tls_ports(w)
    anomalies = [x for x in its if x.type == "anomaly"]
    assert anomalies and all(a.kind == "tls_encrypted" for a in anomalies)
    assert not [x for x in its if x.type == "exchange" and int(x.broker.rsplit(":", 1)[1]) in ports]
    conns = {a.connection for a in anomalies}
    assert len(conns) == len(anomalies)  # one per connection
    with_keys = [x for x in items(TLS / f"{name}.pcap", TLS / f"{name}.keys") if x.type == "connection" and x.tls]
    assert len(anomalies) == len(with_keys)
    for a in anomalies:
        assert "no key log given" in a.detail
        version, suite = a.detail.split("(", 1)[1].split(")", 1)[0].split(",")[0].split()
        assert (version, suite) in {(v["tls_version"], v["cipher_suite"]) for v in ports.values()}
    plain = w["listeners"]["PLAINTEXT"]["port"]
    runs = [r for r in w["runs"] if r["listener"] == "PLAINTEXT"]
    if runs:
        assert {x.api_name for x in by_port(its)[plain] if x.type == "exchange"} >= {"Produce", "Fetch"}


@pytest.mark.parametrize("name", NAMES)
def test_every_connection_decrypted_with_its_listeners_version_and_suite(name):
    w = witness(name)
    its = items(TLS / f"{name}.pcap", TLS / f"{name}.keys")
    assert not [x for x in its if x.type == "anomaly" and x.kind.startswith("tls_")]
    ports = tls_ports(w)
    seen = set()
    for port, xs in by_port(its).items():
        for x in xs:
            if port not in ports:
                assert x.tls is None
                continue
            want = ports[port]
            assert x.tls["decrypted"] is True
            assert (x.tls["version"], x.tls["cipher_suite"]) == (want["tls_version"], want["cipher_suite"])
            seen.add(port)
    assert seen == {r["port"] for r in w["runs"] if r["tls_version"]}
    # every exchange on a TLS connection answered and decoded
    tls_x = [x for x in its if x.type == "exchange" and x.tls]
    assert tls_x and all(x.status == "ok" or x.api_name == "Fetch" for x in tls_x)


def landed(tmp_path: Path, pcap: Path, keys: Path | None) -> dict:
    out = tmp_path / "lake"
    land_local([str(pcap)], out, records=True, tls_keylogs=read_keylogs(keys) if keys else [])
    return {t: pq.read_table(out / t).to_pandas() for t in ("exchanges", "connections", "records", "anomalies")}


def _pair(r: dict) -> tuple[str, str]:
    """A witness record as (key, value), or (key, sha256 of the value) where it gives that."""
    return (r["key"], r["value"] if "value" in r else r["value_sha256"])


def pairs(df, hashed: bool = False) -> list[tuple[str, str]]:
    def value(v: bytes) -> str:
        return hashlib.sha256(v).hexdigest() if len(v) > 64 else v.decode()

    return [(k.decode(), value(v)) for k, v in zip(df.key, df.value, strict=True)]


@pytest.mark.parametrize("name", NAMES)
def test_decrypted_records_equal_what_the_clients_produced_and_consumed(tmp_path, name):
    w = witness(name)
    t = landed(tmp_path, TLS / f"{name}.pcap", TLS / f"{name}.keys")
    rec = t["records"]
    for run in w["runs"]:
        mine = rec[rec.topic == run["topic"]]
        produced = mine[mine.direction == "produce"]
        fetched = mine[mine.direction == "fetch"].drop_duplicates("offset").sort_values("offset")
        assert pairs(produced) == [_pair(r) for r in run["produced"]], run["listener"]
        assert pairs(fetched) == [_pair(r) for r in run["consumed"]], run["listener"]
        assert list(fetched.offset) == [r["offset"] for r in run["consumed"]]
        assert set(produced.client_id) == {run["producer_client_id"]}
    # the tables carry the TLS facts: connections (version, suite, decrypted) and exchanges
    conns = t["connections"]
    ports = tls_ports(w)
    for _, c in conns.iterrows():
        port = int(c.broker.rsplit(":", 1)[1])
        if port in ports:
            assert (c.tls_version, c.tls_cipher_suite, c.tls_decrypted) == (
                ports[port]["tls_version"],
                ports[port]["cipher_suite"],
                True,
            )
        else:
            assert c.tls_version is None
    ex = t["exchanges"]
    assert set(ex.dropna(subset=["tls_version"]).tls_version) == {
        r["tls_version"] for r in w["runs"] if r["tls_version"]
    }


def test_key_updates_move_both_sides_to_their_next_secrets():
    """The JVMs' jdk.tls.keyLimits forced a KeyUpdate every 16 KiB: tshark counted 61, some in the
    middle of a Produce request. Only the first traffic secrets are in the key log; each next one
    is derived, and every record after the updates decrypts (the records equal the clients' above)."""
    name = "tls-keyupdate-ak"
    w = witness(name)
    updates = w["key_updates"]
    assert sum(u["client_to_broker"] + u["broker_to_client"] for u in updates.values()) > 50
    assert "TRAFFIC_SECRET_1" not in (TLS / f"{name}.keys").read_text()
    its = items(TLS / f"{name}.pcap", TLS / f"{name}.keys")
    assert not [x for x in its if x.type == "anomaly"]
    for pair, u in updates.items():
        if not u["client_to_broker"]:
            continue
        cport, bport = pair.split("->")
        mine = [x for x in its if x.type == "exchange" and x.client.endswith(":" + cport)]
        assert len(mine) >= u["kafka_frames"] // 2 and all(x.status == "ok" for x in mine), pair


def test_sasl_ssl_login_decrypted_and_redacted():
    """SASL over TLS: the SCRAM exchange is read inside the TLS stream; its proof is redacted as in
    plaintext, and the password appears in no output."""
    name = "tls-kafka-python-ak"
    w = witness(name)
    sasl = next(r for r in w["runs"] if r["listener"] == "SASL_SSL")
    its = items(TLS / f"{name}.pcap", TLS / f"{name}.keys")
    auth = [x for x in its if x.type == "exchange" and x.api_name == "SaslAuthenticate"]
    assert len(auth) >= 4 and all(x.tls and x.tls["version"] == "TLSv1.3" for x in auth)
    assert any(f"n={sasl['sasl']['user']}" in str(x.request) for x in auth)
    final = [x for x in auth if "p=" in str(x.request.get("AuthBytes"))]
    assert final and all("p=<redacted>" in str(x.request["AuthBytes"]) for x in final)


def test_same_workload_over_tls_and_plaintext_gives_the_same_exchanges():
    """kafka-python ran the same workload over PLAINTEXT and over each SSL listener: the decrypted
    exchanges are the plaintext run's (the same APIs, versions and order of requests on the producer's
    and the consumer's connections), the names of topic and clients aside."""
    name = "tls-kafka-python-ak"
    w = witness(name)
    its = [x for x in items(TLS / f"{name}.pcap", TLS / f"{name}.keys") if x.type == "exchange"]

    def shape(run):
        mine = [x for x in its if x.client_id in (run["producer_client_id"], run["consumer_client_id"])]
        role = {run["producer_client_id"]: "p", run["consumer_client_id"]: "c"}
        # what is asked, not how often: long-poll Fetches repeat as time passes, and a client retries
        # InitProducerId while the coordinator starts
        return {(role[x.client_id], x.api_name, x.api_version) for x in mine}

    runs = {r["listener"]: r for r in w["runs"] if r["client"] == "kafka-python"}
    plain = shape(runs.pop("PLAINTEXT"))
    assert plain
    for listener, run in runs.items():
        if run["sasl"]:
            continue  # the SASL handshake adds its own requests
        assert shape(run) == plain, listener


def test_key_log_in_a_decryption_secrets_block():
    """editcap --inject-secrets: the pcapng carries its key log; no option is needed, and the
    output is the pcap's with its key log, line for line."""
    dsb = TLS / "tls-kafka-python-ak-dsb.pcapng"
    ref = TLS / "tls-kafka-python-ak"

    def lines(*args):
        r = subprocess.run(
            [sys.executable, "-m", "kafkawire", "dissect", "--format", "jsonl", *map(str, args)],
            capture_output=True,
            check=True,
        )
        return r.stdout.splitlines()

    a, b = lines(dsb), lines(ref.with_suffix(".pcap"), "--tls-keylog", ref.with_suffix(".keys"))
    assert a == b and len(a) > 100


def test_partial_keys_and_another_captures_key_log(tmp_path):
    """Half the connections' secrets: those decrypt, the rest are tls_encrypted anomalies saying the
    key log has none for their client random. A key log of another capture decrypts nothing and
    reads no frame from TLS bytes."""
    name = "tls-java-ak"
    lines = (TLS / f"{name}.keys").read_text().splitlines()
    randoms = sorted({ln.split()[1] for ln in lines if ln.split()[0].endswith("TRAFFIC_SECRET_0")})
    keep = set(randoms[::2])
    half = tmp_path / "half.keys"
    half.write_text("\n".join(ln for ln in lines if ln.startswith("RSA") or ln.split()[1] in keep) + "\n")
    its = items(TLS / f"{name}.pcap", half)
    enc = [x for x in its if x.type == "anomaly"]
    dec = [x for x in its if x.type == "connection" and x.tls]
    assert all(a.kind == "tls_encrypted" and "has none for client random" in a.detail for a in enc)
    assert len(dec) == len(keep) + 12 and len(enc) == len(randoms) - len(keep)  # 12: TLS 1.2, by session id
    assert all(x.status == "ok" or x.api_name == "Fetch" for x in its if x.type == "exchange")

    other = items(TLS / f"{name}.pcap", TLS / "tls-kafka-python-ak.keys")
    assert other and all(x.type == "anomaly" and x.kind == "tls_encrypted" for x in other)
    assert len(other) == len(randoms) + 12


def _tcp(buf: bytes):
    eth = dpkt.ethernet.Ethernet(buf)
    ip = eth.data
    return eth, ip, ip.data


def _rewrite(src: Path, dst: Path, change) -> None:
    """dst: src's packets through change(i, eth, tcp) -> bytes, None (dropped) or the packet."""
    with open(src, "rb") as f:
        r = dpkt.pcap.Reader(f)
        recs = list(r)
        link = r.datalink()
    with open(dst, "wb") as f:
        wr = dpkt.pcap.Writer(f, linktype=link, snaplen=262144)
        for i, (ts, buf) in enumerate(recs):
            out = change(i, buf)
            if out is not None:
                wr.writepkt(out, ts)


def _server_records(src: Path, port: int, after: int = 0) -> list[int]:
    """Indices of the packets from `port` whose payload starts with a TLS application data record,
    of the connections that send at least `after` more such packets after it (those are left out)."""
    flows = collections.defaultdict(list)
    with open(src, "rb") as f:
        for i, (_, buf) in enumerate(dpkt.pcap.Reader(f)):
            _, _, tcp = _tcp(buf)
            p = bytes(tcp.data)
            if tcp.sport == port and len(p) > 64 and p[:3] == b"\x17\x03\x03":
                flows[tcp.dport].append(i)
    return sorted(i for f in flows.values() for i in f[: len(f) - after])


def test_a_damaged_record_is_counted_and_the_rest_decodes(tmp_path):
    """A flipped byte in one record's tag: that record fails authentication (one tls_decrypt_failed
    anomaly with its count), the frames layer sees a hole there rather than garbage, and every other
    connection and the records after it on the same connection still decode."""
    name = "tls-kafka-python-ak"
    w = witness(name)
    port = w["listeners"]["TLS13_AES128"]["port"]
    idx = _server_records(TLS / f"{name}.pcap", port, after=2)
    victim = idx[len(idx) // 2]

    def flip(i, buf):
        if i != victim:
            return buf
        b = bytearray(buf)
        b[-1] ^= 0x55
        return bytes(b)

    bad = tmp_path / "flipped.pcap"
    _rewrite(TLS / f"{name}.pcap", bad, flip)
    ref = items(TLS / f"{name}.pcap", TLS / f"{name}.keys")
    its = items(bad, TLS / f"{name}.keys")
    failed = [x for x in its if x.type == "anomaly" and x.kind == "tls_decrypt_failed"]
    assert len(failed) == 1 and failed[0].detail.startswith("1 of ")
    conn = failed[0].connection
    others = lambda xs: [  # noqa: E731
        (x.api_name, x.correlation_id, x.status) for x in xs if x.type == "exchange" and x.connection != conn
    ]
    assert others(its) == others(ref)
    mine = [x for x in its if x.type == "exchange" and x.connection == conn]
    theirs = [x for x in ref if x.type == "exchange" and x.connection == conn]
    assert len(mine) >= len(theirs) - 2 and sum(x.status == "ok" for x in mine) >= len(theirs) - 2
    # no frame read across the hole: what is not an exchange is said
    assert not [x for x in its if x.type == "anomaly" and x.kind in ("bad_frame_size", "frame_too_large")]


def test_a_lost_segment_resynchronises_on_the_next_record(tmp_path):
    """A segment holding a whole record is lost: one tls_record_lost anomaly for the connection; the
    direction finds the next record boundary and its sequence number (it authenticates), so what
    follows decodes."""
    name = "tls-java-ak"
    w = witness(name)
    port = w["listeners"]["TLS12_AES128"]["port"]
    idx = _server_records(TLS / f"{name}.pcap", port, after=2)
    assert idx
    victim = idx[len(idx) // 2]
    lost = tmp_path / "lost.pcap"
    _rewrite(TLS / f"{name}.pcap", lost, lambda i, buf: None if i == victim else buf)
    its = items(lost, TLS / f"{name}.keys")
    kinds = collections.Counter(x.kind for x in its if x.type == "anomaly")
    assert kinds["tls_record_lost"] == 1, kinds
    a = next(x for x in its if x.type == "anomaly" and x.kind == "tls_record_lost")
    assert "resynchronised 1 times" in a.detail
    ref = items(TLS / f"{name}.pcap", TLS / f"{name}.keys")
    ok = lambda xs: sum(x.type == "exchange" and x.status == "ok" for x in xs)  # noqa: E731
    assert ok(its) >= ok(ref) - 3


def test_key_log_files_refused_in_one_line(tmp_path):
    with pytest.raises(KeyLogError, match="cannot read TLS key log"):
        read_keylogs(tmp_path / "missing.keys")
    (tmp_path / "junk.keys").write_text("hello\nworld\n")
    with pytest.raises(KeyLogError, match="no TLS key log lines"):
        read_keylogs(tmp_path / "junk.keys")
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "dissect", str(TLS / "tls-java-ak.pcap"), "--tls-keylog", "/nonexistent"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_a_key_log_is_parsed_once_and_the_engine_takes_that_parse():
    """The core's parser is the only one, and a run parses a key log once: load_keylogs checks each
    file by what the core took of it, and the engine's config holds that parse (the object itself),
    not a text to parse again. Parsed key logs decrypt as their texts do, one after another as
    their texts would be read; a parsed key log travels (pickle) as its text and shows none of it."""
    import pickle

    from dissector import native
    from dissector.tls import load_keylogs

    path, other = TLS / "tls-java-ak.keys", TLS / "tls-kafka-python-ak.keys"
    text = path.read_bytes()
    (log,) = load_keylogs(path)
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(b"#")]
    assert (log.taken, log.not_understood) == (len(lines), 0)
    cfg = native.config(ports=(), max_frame_size=1 << 20, connections=False, window=0.0, tls_keylogs=[log, text])
    assert cfg.tls_keylogs[0] is log  # handed over parsed
    assert bytes(cfg.tls_keylogs[1]) == text and cfg.tls_keylogs[1].taken == log.taken  # a text: parsed there
    assert bytes(log) == text and read_keylogs(path) == [text]
    shipped = pickle.loads(pickle.dumps(log))
    assert type(shipped) is bytes and shipped == text
    assert not any(line.split()[-1].lower() in repr(log).lower().encode() for line in lines)

    def run(keylogs):
        kw = dict(ports=(), max_frame_size=native.DEFAULT_MAX_FRAME_SIZE, connections=True, window=native.WINDOW)
        return list(native.dissect([str(TLS / "tls-java-ak.pcap")], tls_keylogs=keylogs, **kw))

    (other_log,) = load_keylogs(other)
    by_text = run([other.read_bytes(), text])
    assert any(x.type == "connection" and x.tls for x in by_text)
    assert run([other_log, log]) == by_text


def test_cli_says_what_stayed_encrypted():
    r = subprocess.run(
        [sys.executable, "-m", "kafkawire", "dissect", str(TLS / "tls-confluent-ak.pcap")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0
    assert r.stdout.count("tls_encrypted") == 10
    assert "10 of 10 TLS connections" in r.stderr and "--tls-keylog" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkawire",
            "dissect",
            str(TLS / "tls-confluent-ak.pcap"),
            "--tls-keylog",
            str(TLS / "tls-confluent-ak.keys"),
            "--format",
            "jsonl",
        ],
        capture_output=True,
        text=True,
    )
    rows = [json.loads(ln) for ln in r.stdout.splitlines()]
    ex = [x for x in rows if x["type"] == "exchange"]
    assert len(ex) >= 20 and all(x["tls"]["decrypted"] for x in ex) and r.stderr == ""


def test_appended_landing_carries_tls_connections(tmp_path):
    """A TLS capture cut into 6 files landed in 6 appended runs gives the one-run tables: open TLS
    connections (keys, sequence numbers, a record cut at a file edge) go on from file to file."""
    from landing.carry import land_append

    name = "tls-kafka-python-ak"
    keys = read_keylogs(TLS / f"{name}.keys")
    with open(TLS / f"{name}.pcap", "rb") as f:
        r = dpkt.pcap.Reader(f)
        recs, link = list(r), r.datalink()
    parts = []
    for i in range(6):
        p = tmp_path / f"part{i}.pcap"
        with open(p, "wb") as f:
            wr = dpkt.pcap.Writer(f, linktype=link, snaplen=262144)
            for ts, buf in recs[len(recs) * i // 6 : len(recs) * (i + 1) // 6]:
                wr.writepkt(buf, ts)
        parts.append(p)
    one = tmp_path / "one"
    land_local([str(p) for p in parts], one, tls_keylogs=keys)
    app = tmp_path / "app"
    state = tmp_path / "state"
    for p in parts:
        land_append([str(p)], app, state, tls_keylogs=keys)

    def table(root, t):
        df = pq.read_table(root / t).to_pandas().drop(columns=["date"], errors="ignore")
        return df.sort_values(list(df.columns[:3])).reset_index(drop=True)

    for t in ("exchanges", "connections"):
        a, b = table(one, t), table(app, t)
        assert len(a) == len(b) and len(a) > 30
        assert a.drop(columns=["request_json", "response_json"], errors="ignore").equals(
            b.drop(columns=["request_json", "response_json"], errors="ignore")
        ), t


def test_plaintext_capture_is_unchanged_by_a_key_log():
    """A key log given to a capture without TLS changes no line."""
    cap = ROOT / "samples" / "kafka-python-ak.pcap"

    def lines(*extra):
        return subprocess.run(
            [sys.executable, "-m", "kafkawire", "dissect", "--format", "jsonl", str(cap), *extra],
            capture_output=True,
            check=True,
        ).stdout

    assert lines() == lines("--tls-keylog", str(TLS / "tls-java-ak.keys"))


@pytest.mark.skipif(not os.path.exists("/usr/bin/tshark"), reason="tshark is not installed")
def test_tshark_decrypts_the_same_kafka_requests():
    """An independent reading: tshark with the same key log decodes the same Kafka requests
    (API key, correlation id) on each TLS connection it can follow."""
    name = "tls-kafka-python-ak"
    w = witness(name)
    ports = tls_ports(w)
    args = ["tshark", "-r", str(TLS / f"{name}.pcap"), "-o", f"tls.keylog_file:{TLS / f'{name}.keys'}"]
    for p in ports:
        args += ["-d", f"tcp.port=={p},tls", "-d", f"tls.port=={p},kafka"]
    to_broker = " or ".join(f"tcp.dstport == {p}" for p in ports)
    args += ["-Y", f"kafka and ({to_broker})", "-T", "fields", "-e", "tcp.dstport", "-e", "kafka.api_key"]
    args += ["-e", "kafka.correlation_id"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300).stdout
    theirs = collections.Counter()
    for ln in out.splitlines():
        parts = ln.split("\t")
        if len(parts) == 3 and parts[0] and int(parts[0]) in ports and parts[1]:
            for k, c in zip(parts[1].split(","), parts[2].split(","), strict=False):
                theirs[(int(parts[0]), int(k), int(c))] += 1
    mine = collections.Counter(
        (int(x.broker.rsplit(":", 1)[1]), x.api_key, x.correlation_id)
        for x in items(TLS / f"{name}.pcap", TLS / f"{name}.keys")
        if x.type == "exchange" and x.tls
    )
    assert theirs and set(theirs) <= set(mine)
    assert len(set(theirs)) >= 0.9 * len(set(mine))


def test_report_and_replay_read_tls_captures_with_keys(tmp_path):
    """report CAPTURE --tls-keylog: the tls section counts the decrypted connections by version and
    suite, and without keys the encrypted ones with their bytes; replay plans the decrypted requests."""
    cap, keys = TLS / "tls-confluent-ak.pcap", TLS / "tls-confluent-ak.keys"

    def report(*extra):
        r = subprocess.run(
            [sys.executable, "-m", "kafkawire", "report", str(cap), "--format", "json", "--quiet", *extra],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(r.stdout)["tls"]

    rows = report("--tls-keylog", str(keys))
    got = {(r["tls_version"], r["tls_cipher_suite"]): (r["decrypted"], r["connections"]) for r in rows}
    assert got == {
        ("TLSv1.3", "TLS_AES_128_GCM_SHA256"): (True, 5),
        ("TLSv1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"): (True, 5),
    }
    rows = report()
    assert {(r["tls_version"], r["decrypted"], r["connections"]) for r in rows} == {
        ("TLSv1.3", False, 5),
        ("TLSv1.2", False, 5),
    }
    assert all(r["bytes"] > 10000 for r in rows)
    plan = subprocess.run(
        [sys.executable, "-m", "kafkawire", "replay", str(cap), "--to", "127.0.0.1:9", "--dry-run"]
        + ["--tls-keylog", str(keys)],
        capture_output=True,
        text=True,
    )
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("10 connection(s)")


def test_a_capture_ending_inside_a_record(tmp_path):
    """The capture stops in the middle of a record (the last packet cut short, nothing after it):
    everything before it decodes, and the connection's tls_record_lost anomaly says a record was cut."""
    name = "tls-java-ak"
    w = witness(name)
    port = w["listeners"]["TLS13_AES256"]["port"]
    victim = _server_records(TLS / f"{name}.pcap", port, after=2)[-1]

    def cut(i, buf):
        if i > victim:
            return None
        if i < victim:
            return buf
        eth, ip, tcp = _tcp(buf)
        tcp.data = bytes(tcp.data)[: len(tcp.data) // 2]
        tcp.sum = 0
        ip.len = len(ip) - len(ip.data) + len(bytes(tcp))
        ip.data = tcp
        ip.sum = 0
        return bytes(eth)

    short = tmp_path / "short.pcap"
    _rewrite(TLS / f"{name}.pcap", short, cut)
    its = items(short, TLS / f"{name}.keys")
    lost = [x for x in its if x.type == "anomaly" and x.kind == "tls_record_lost"]
    assert len(lost) == 1 and "a record cut where the connection ended" in lost[0].detail
    assert not [x for x in its if x.type == "anomaly" and x.kind in ("tls_decrypt_failed", "tls_encrypted")]
    with open(TLS / f"{name}.pcap", "rb") as f:
        end = next(ts for i, (ts, _) in enumerate(dpkt.pcap.Reader(f)) if i == victim)
    ref = items(TLS / f"{name}.pcap", TLS / f"{name}.keys")
    before = {(x.client_id, x.correlation_id) for x in ref if x.type == "exchange" and (x.response_ts or end) < end}
    ok = {(x.client_id, x.correlation_id) for x in its if x.type == "exchange" and x.status == "ok"}
    assert len(before) > 20 and before <= ok


@pytest.mark.broker
def test_live_tls_listeners_decrypted_with_the_clients_key_log(java_client, tmp_path):
    """The test bench live: Apache Kafka with its keytool keystore and forced TLS listeners, kafka-python
    writing its key log through SSLContext.keylog_filename while tcpdump captures; the capture
    decrypts into the records the client produced and consumed back, on TLS 1.3 and TLS 1.2."""
    import ssl

    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from tests.broker import Tcpdump
    from tests.kafka_jvm import KafkaBroker

    listeners = ("TLS13_AES128", "TLS12_CHACHA20")
    keys = tmp_path / "keys.log"
    with KafkaBroker(tls=True, log=tmp_path / "broker.log") as broker:
        ports = tuple(broker.tls_listeners[n][0] for n in listeners)
        dump = Tcpdump(tmp_path / "live.pcap", ports).start()
        sent = {}
        try:
            for name in listeners:
                ctx = ssl.create_default_context(cafile=str(broker.tls_pem))
                ctx.keylog_filename = str(keys)
                conf = dict(bootstrap_servers=broker.tls_address(name), security_protocol="SSL", ssl_context=ctx)
                topic = f"live-{name.lower()}"
                p = KafkaProducer(client_id=f"{topic}-p", **conf)
                sent[topic] = [(f"k{i}".encode(), f"{name} v{i}".encode()) for i in range(4)]
                for k, v in sent[topic]:
                    p.send(topic, key=k, value=v)
                p.flush(timeout=30)
                p.close()
                c = KafkaConsumer(client_id=f"{topic}-c", consumer_timeout_ms=10000, **conf)
                tp = TopicPartition(topic, 0)
                c.assign([tp])
                c.seek_to_beginning(tp)
                got = []
                for m in c:  # bounded by consumer_timeout_ms
                    got.append((m.key, m.value))
                    if len(got) == len(sent[topic]):
                        break
                c.close()
                assert got == sent[topic]
        finally:
            dump.stop()
    t = landed(tmp_path, tmp_path / "live.pcap", keys)
    assert len(t["anomalies"]) == 0
    for name in listeners:
        topic = f"live-{name.lower()}"
        rec = t["records"][t["records"].topic == topic]
        for direction in ("produce", "fetch"):
            mine = rec[rec.direction == direction].drop_duplicates("offset" if direction == "fetch" else "key")
            assert [(k, v) for k, v in zip(mine.key, mine.value, strict=True)] == sent[topic], (name, direction)
    conns = t["connections"]
    assert set(zip(conns.tls_version, conns.tls_cipher_suite, strict=True)) == {
        broker.tls_listeners[n][1:] for n in listeners
    }


def test_a_capture_begun_inside_tls_connections(tmp_path):
    """The capture starts in the middle of TLS connections (their handshakes, and for some the start
    of a record, not captured): each is one tls_encrypted anomaly saying so, no frame is read from
    their bytes, and the connections that begin later decrypt."""
    name = "tls-java-ak"
    with open(TLS / f"{name}.pcap", "rb") as f:
        n = sum(1 for _ in dpkt.pcap.Reader(f))
    start = n // 3
    mid = tmp_path / "mid.pcap"
    _rewrite(TLS / f"{name}.pcap", mid, lambda i, buf: buf if i >= start else None)
    its = items(mid, TLS / f"{name}.keys")
    anomalies = [x for x in its if x.type == "anomaly"]
    assert anomalies and all(a.kind == "tls_encrypted" for a in anomalies), {a.kind for a in anomalies}
    assert all("the handshake was not captured" in a.detail for a in anomalies)
    blind = {a.connection for a in anomalies}
    assert not [x for x in its if x.type == "exchange" and x.connection in blind]
    later = [x for x in its if x.type == "connection" and x.tls]
    assert len(later) + len(blind) == len({x.connection for x in its if x.type in ("connection", "anomaly")})
    assert len(later) >= 14 and all(x.tls["decrypted"] for x in later)
