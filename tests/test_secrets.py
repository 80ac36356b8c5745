"""Secrets and payloads out of every output, on a real capture that carries each kind.

samples/secrets-ak.pcap (Apache Kafka 4.3.1, SASL_PLAINTEXT listener; the Java client
and hand-built SaslHandshake v0 logins, see samples/README.md) holds SASL PLAIN
passwords, SCRAM-SHA-256 client proofs and server signatures, OAUTHBEARER tokens (in
SaslAuthenticate and as raw v0 tokens), a delegation token's HMAC and id (Create,
Describe, Renew, Expire) and the salt and salted password of AlterUserScramCredentials.
samples/secrets-ak.json holds what the client knew (passwords, the token's HMAC and id,
the v0 bearer token); the rest is read from the capture here with its own parsing,
not protocol.secrets'.

Every output of the capture is grepped for each secret's bytes and their hex and
base64 forms: dissect text and jsonl (--raw --records),
land (local and Spark: every Parquet cell and the files' bytes), report (text, json,
--html) and replay (--dry-run, and --report against a live Apache Kafka).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dissector import dissect

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "secrets-ak.pcap"
WITNESS = json.loads((ROOT / "samples" / "secrets-ak.json").read_text())
PII = (b"pii-key-0", b"pii-value-1 jane.doe@example.com", b"pii-header-value-2")


def run(*args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "kafkawire", *map(str, args)], cwd=ROOT, capture_output=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r


def _secrets() -> dict[str, list[bytes]]:
    """kind -> the secret values on the wire, found with this test's own parsing."""
    found: dict[str, list[bytes]] = {}

    def add(kind, v):
        v = v.encode() if isinstance(v, str) else bytes(v)
        if v not in found.setdefault(kind, []):
            found[kind].append(v)

    def token(b: bytes):
        if b.count(b"\0") == 2:
            add("plain_password", b.split(b"\0")[2])
        elif b"tokenauth=true" in b:  # SCRAM client-first of a login with the delegation token
            add("token_id", re.search(rb",n=([^,]+)", b).group(1))
        elif m := re.search(rb",p=([^,]+)", b):
            add("scram_proof", m.group(1))
        elif m := re.match(rb"v=([^,]+)", b):
            add("scram_signature", m.group(1))
        elif m := re.search(rb"auth=Bearer ([^\x01]+)", b):
            add("bearer_token", m.group(1))

    for x in dissect([SAMPLE], show_secrets=True):
        if x.type != "exchange":
            continue
        for body, name in (
            (x.request, "AuthBytes"),
            (x.response, "AuthBytes"),
            (x.request, "token"),
            (x.response, "token"),
        ):
            if isinstance(body, dict) and body.get(name):
                token(bytes(body[name]))
        if x.api_name in ("CreateDelegationToken", "DescribeDelegationToken"):
            for t in [x.response] + list(x.response.get("Tokens") or []):
                if t.get("Hmac") is not None:
                    add("token_hmac", t["Hmac"])
                    add("token_id", t["TokenId"])
        if x.api_name in ("RenewDelegationToken", "ExpireDelegationToken"):
            add("token_hmac", x.request["Hmac"])
        if x.api_name == "AlterUserScramCredentials":
            for u in x.request["Upsertions"]:
                add("scram_salt", u["Salt"])
                add("scram_salted_password", u["SaltedPassword"])
    return found


SECRETS = _secrets()


def forms(secret: bytes) -> set[bytes]:
    """How a secret can show up in an output: as is, hex, base64 (standard, URL-safe, unpadded)."""
    out = {secret, secret.hex().encode(), secret.hex().upper().encode()}
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        b = enc(secret)
        out |= {b, b.rstrip(b"=")}
    return {f for f in out if len(f) >= 8}


def leaks(outputs: dict[str, bytes]) -> list[str]:
    return [
        f"{kind} {secret[:12]!r}... in {where}"
        for kind, values in SECRETS.items()
        for secret in values
        for where, data in outputs.items()
        if any(f in data for f in forms(secret))
    ]


def parquet_cells(folder: Path) -> bytes:
    """Every value of every Parquet table under `folder`, as text and raw bytes, plus the files' bytes."""
    parts = []
    for f in sorted(folder.rglob("*.parquet")):
        parts.append(f.read_bytes())
        for row in pq.read_table(f).to_pylist():
            parts.append(repr(row).encode())
            parts += _blobs(row)
    assert parts, f"no Parquet files under {folder}"
    return b"\n".join(parts)


def _blobs(v) -> list[bytes]:
    if isinstance(v, (bytes, str)):
        return [v if isinstance(v, bytes) else v.encode()]
    if isinstance(v, dict):
        return [b for x in v.values() for b in _blobs(x)]
    if isinstance(v, list):
        return [b for x in v for b in _blobs(x)]
    return []


def test_the_capture_carries_every_kind_of_secret():
    raw = SAMPLE.read_bytes()
    assert SAMPLE.stat().st_size < 1 << 20
    counts = {k: len(v) for k, v in SECRETS.items()}
    # PLAIN: bob over SaslAuthenticate, alice as a v0 raw token; SCRAM: two logins as bob, two with the
    # delegation token; bearer: the Java client's token (two connections, one token) and the v0 one
    assert counts == {
        "plain_password": 2,
        "scram_proof": 4,
        "scram_signature": 4,
        "bearer_token": 2,
        "token_hmac": 1,
        "token_id": 1,
        "scram_salt": 1,
        "scram_salted_password": 1,
    }
    assert set(SECRETS["plain_password"]) == {WITNESS["password"].encode(), WITNESS["password_v0"].encode()}
    assert SECRETS["token_hmac"] == [base64.b64decode(WITNESS["token_hmac"])]
    assert SECRETS["token_id"] == [WITNESS["token_id"].encode()]
    assert WITNESS["bearer_token_v0"].encode() in SECRETS["bearer_token"]
    for kind, values in SECRETS.items():  # real bytes of the capture, not an artefact of decoding
        for v in values:
            assert v in raw, kind


@pytest.mark.parametrize(
    "path",
    [SAMPLE, ROOT / "samples" / "midstream.pcap", *sorted((ROOT.parent / "shared" / "pcaps").glob("*.pcap*"))],
    ids=lambda p: p.name,
)
def test_the_cores_redaction_is_the_reference_redaction(path):
    """Every item the core redacts (native/core/src/redact.rs) is the item Python's reference
    redaction (tests/redact_reference.py, over protocol.secrets) makes of the unredacted one: the
    same bodies and raw frames, the secrets of the capture gone from both."""
    from tests.oracle.output import _Encoder
    from tests.redact_reference import redact

    line = _Encoder(records=False, raw=True, payloads=True).line
    shown = list(dissect(path, show_secrets=True))
    redacted = list(dissect(path))
    assert len(shown) == len(redacted)
    differ = 0
    for x, y in zip(shown, redacted, strict=True):
        before = line(x)
        want = line(redact(x))  # in place
        differ += want != before
        assert line(y) == want
    if path == SAMPLE:
        assert differ >= 17  # the sample's logins, tokens, credentials and delegation tokens


def test_dissect_redacts_by_default_and_shows_with_show_secrets():
    outputs = {
        "text": run("dissect", SAMPLE).stdout,
        "jsonl": run("dissect", SAMPLE, "--format", "jsonl", "--raw", "--records").stdout,
    }
    assert leaks(outputs) == []
    jsonl = outputs["jsonl"]
    lines = [json.loads(x) for x in jsonl.splitlines()]
    # SaslAuthenticate: 2 PLAIN passwords, 4 proofs, 4 signatures, 2 bearer tokens, 2 token ids (the token
    # logins' user names); 2 v0 tokens; the token's HMAC and id in Create and Describe, its HMAC in Renew and
    # Expire; carol's salt and salted password
    assert len(lines) == 61 and jsonl.count(b"<redacted>") == 14 + 2 + 4 + 2 + 2
    alter = next(x for x in lines if x.get("api_name") == "AlterUserScramCredentials")
    assert alter["request"]["Upsertions"][0] | {"Iterations": 0} == {
        "Name": "carol",
        "Mechanism": 1,
        "Iterations": 0,
        "Salt": "<redacted>",
        "SaltedPassword": "<redacted>",
    }
    v0 = [x["request"]["token"] for x in lines if x.get("api_name") == "SaslToken"]
    assert v0 == ["\0alice\0<redacted>", "n,,\x01auth=Bearer <redacted>\x01\x01"]
    shown = {
        "jsonl --show-secrets": run("dissect", SAMPLE, "--format", "jsonl", "--raw", "--show-secrets").stdout,
        "jsonl --records --show-secrets": run(
            "dissect", SAMPLE, "--format", "jsonl", "--raw", "--records", "--show-secrets"
        ).stdout,
    }
    for where, data in shown.items():
        for kind, values in SECRETS.items():
            for v in values:
                assert v in data or v.hex().encode() in data, (kind, where)
    # the raw frames keep their length: the secrets are starred, not cut
    raw = {x["correlation_id"]: x["request_raw"] for x in lines if x.get("api_name") == "RenewDelegationToken"}
    full = {
        x["correlation_id"]: x["request_raw"]
        for x in map(json.loads, shown["jsonl --show-secrets"].splitlines())
        if x.get("api_name") == "RenewDelegationToken"
    }
    assert raw.keys() == full.keys() and all(len(raw[k]) == len(full[k]) for k in raw)


@pytest.fixture(scope="module")
def landed(tmp_path_factory) -> dict:
    """The outputs of the sample two tests grep, each command run once: `land --records` (its
    folder and Parquet cells), `report --html` of the capture and of those tables, `report --format json`."""
    d = tmp_path_factory.mktemp("secrets-landed")
    run("land", SAMPLE, "--out", d / "tables", "--records", "--quiet")
    run("report", SAMPLE, "--html", d / "capture.html", "--quiet")
    run("report", d / "tables", "--html", d / "tables.html", "--quiet")
    return {
        "tables": d / "tables",
        "cells": parquet_cells(d / "tables"),
        "capture.html": (d / "capture.html").read_bytes(),
        "tables.html": (d / "tables.html").read_bytes(),
        "report json": run("report", SAMPLE, "--format", "json").stdout,
    }


def test_land_local_report_and_html_keep_secrets_out(landed):
    cells = landed["cells"]
    assert b"AlterUserScramCredentials" in cells and b"<redacted>" in cells
    outputs = {
        "land (local)": cells,
        "report --html (capture)": landed["capture.html"],
        "report --html (tables)": landed["tables.html"],
        "report --format json": landed["report json"],
        "report (tables)": run("report", landed["tables"]).stdout,
    }
    assert b"<svg" in outputs["report --html (capture)"] and b"SaslAuthenticate" in outputs["report (tables)"]
    assert leaks(outputs) == []


@pytest.mark.slow  # two Spark landings and the data source: about 15 s
def test_land_spark_keeps_secrets_and_without_payloads_pii_out(spark, tmp_path):
    from landing.spark import land_spark, register

    counts, faults = land_spark([str(SAMPLE)], str(tmp_path / "tables"), records=True, spark=spark)
    assert counts["exchanges"] == 61 and not faults
    cells = parquet_cells(tmp_path / "tables")
    assert b"<redacted>" in cells
    register(spark)  # the data source too: spark.read.format("kafkawire")
    rows = spark.read.format("kafkawire").load(str(SAMPLE)).select("request_json", "response_json").collect()
    assert len(rows) == 61
    source = "\n".join(str(v) for r in rows for v in r).encode()
    assert leaks({"land (spark)": cells, "data source": source}) == []
    assert len(_pii({"land (spark)": cells})) == len(PII)
    land_spark([str(SAMPLE)], str(tmp_path / "bare"), records=True, payloads=False, spark=spark)
    records = (
        spark.read.format("kafkawire")
        .option("table", "records")
        .option("payloads", "false")
        .load(str(SAMPLE))
        .collect()
    )
    assert len(records) == 6 and {(r["key"], r["value"]) for r in records} == {(None, None)}
    assert (
        _pii(
            {
                "land (spark) --no-payloads": parquet_cells(tmp_path / "bare"),
                "data source payloads=false": repr(records).encode(),
            }
        )
        == []
    )


def test_replay_dry_run_keeps_secrets_out():
    out = run("replay", SAMPLE, "--to", "127.0.0.1:9", "--dry-run").stdout
    assert b"DescribeDelegationToken" in out
    assert leaks({"replay --dry-run": out}) == []
    # requests whose secrets were starred are not re-sent, even with --allow-writes
    out = run("replay", SAMPLE, "--to", "127.0.0.1:9", "--dry-run", "--allow-writes").stdout.decode()
    skipped = re.findall(r"skip (\w+) v\d+ corr=\d+: \w+: carries secrets", out)
    assert sorted(skipped) == ["AlterUserScramCredentials", "ExpireDelegationToken", "RenewDelegationToken"]


@pytest.mark.broker
def test_replay_report_against_apache_kafka_keeps_secrets_out(apache_kafka, tmp_path):
    report = tmp_path / "report.json"
    r = run("replay", SAMPLE, "--to", apache_kafka.address, "--max-speed", "--timeout", "5", "--report", report)
    rep = json.loads(report.read_text())
    assert rep["apis"]["DescribeDelegationToken"]["sent"] == 2
    assert leaks({"replay stdout": r.stdout, "replay --report": report.read_bytes()}) == []


def test_replay_compare_blanks_the_targets_secrets():
    """A target that answers with its own HMAC, token id and SCRAM signature (as a SASL listener
    does): the report shows neither them nor a difference for them."""
    from replay import compare
    from replay.plan import Conn, Step
    from replay.sender import Answer

    hmac, token_id = SECRETS["token_hmac"][0], SECRETS["token_id"][0].decode()
    captured = {
        x.api_name: x
        for x in dissect([SAMPLE])
        if x.type == "exchange" and x.api_name in ("DescribeDelegationToken", "CreateDelegationToken")
    }
    desc = captured["DescribeDelegationToken"]
    token = {
        "PrincipalType": "User",
        "PrincipalName": "bob",
        "TokenRequesterPrincipalType": "User",
        "TokenRequesterPrincipalName": "bob",
        "IssueTimestamp": 1,
        "ExpiryTimestamp": 2,
        "MaxTimestamp": 3,
        "TokenId": token_id,
        "Hmac": hmac,
        "Renewers": [],
    }
    answers = [
        Answer(Step(desc, "send", 3), 0.0, 1.0, {"ErrorCode": 0, "Tokens": [token, dict(token)], "ThrottleTimeMs": 0}),
        Answer(
            Step(captured["CreateDelegationToken"], "send", 3),
            0.0,
            1.0,
            {
                "ErrorCode": 0,
                "PrincipalType": "User",
                "PrincipalName": "eve",
                "TokenId": token_id,
                "Hmac": hmac,
                "ThrottleTimeMs": 0,
            },
        ),
    ]
    rep = compare.compare([Conn(1, "c", "b", [a.step for a in answers])], answers)
    text = "\n".join(compare.text(rep)).encode()
    blob = json.dumps(rep, default=lambda o: o.hex() if isinstance(o, bytes) else str(o)).encode()
    assert leaks({"replay report": blob, "replay text": text}) == []
    paths = {d["path"] for d in rep["differences"]}
    assert "PrincipalName" in paths and not any("Hmac" in p or "TokenId" in p for p in paths)
    # a difference holding a whole token (here: one token more than captured) is blanked inside
    tokens = next(d for d in rep["differences"] if d["api"] == "DescribeDelegationToken")
    assert tokens["path"] == "Tokens.length" or "<redacted>" in json.dumps(tokens, default=str)


# -- --no-payloads: record keys, values and header values out of every output ------------------


def _pii(outputs: dict[str, bytes]) -> list[str]:
    return [
        f"{v!r} in {where}"
        for v in PII
        for where, data in outputs.items()
        if any(f in data for f in (v, v.hex().encode(), base64.b64encode(v)))
    ]


def test_no_payloads_everywhere(tmp_path, landed):
    full = {"dissect jsonl --records": run("dissect", SAMPLE, "--format", "jsonl", "--records").stdout}
    full["land --records"] = landed["cells"]
    assert len(_pii(full)) == 2 * len(PII)  # each is there without the option (produced and fetched)

    args = ("dissect", SAMPLE, "--format", "jsonl", "--records", "--no-payloads")
    out = {
        "dissect jsonl --records --raw --no-payloads": run(*args, "--raw").stdout,
        "dissect text": run("dissect", SAMPLE).stdout,
    }
    run("land", SAMPLE, "--out", tmp_path / "bare", "--records", "--no-payloads", "--quiet")
    out["land --records --no-payloads"] = parquet_cells(tmp_path / "bare")
    out["report --html"] = landed["capture.html"]
    out["report json"] = landed["report json"]
    # report never shows payloads, even of tables landed with them
    out["report --html (tables with payloads)"] = landed["tables.html"]
    out["report json (tables with payloads)"] = run("report", landed["tables"], "--format", "json").stdout
    out["replay --dry-run"] = run("replay", SAMPLE, "--to", "127.0.0.1:9", "--dry-run").stdout
    assert _pii(out) == []
    records = [
        r
        for x in map(json.loads, out["dissect jsonl --records --raw --no-payloads"].splitlines())
        if x.get("api_name") == "Produce"
        for t in x["request"]["TopicData"]
        for p in t["PartitionData"]
        for b in p["Records"]["batches"]
        for r in b["records"]
    ]
    assert [(r["key"], r["value"], r["key_size"], r["value_size"], r["headers"]) for r in records] == [
        (None, None, 9, 32, [["pii-header", None]]) for _ in range(3)
    ]


def test_replay_report_differences_carry_no_record_data():
    """A difference over a whole subtree (a field only one side has) would hold its records."""
    from replay import compare
    from replay.plan import Conn, Step
    from replay.sender import Answer

    fetch = next(
        x
        for x in dissect([SAMPLE])
        if x.type == "exchange"
        and x.api_name == "Fetch"
        and x.response["Responses"]
        and x.response["Responses"][0]["Partitions"][0]["Records"]
    )
    assert PII[1] in bytes(fetch.response["Responses"][0]["Partitions"][0]["Records"])
    answer = Answer(
        Step(fetch, "send", fetch.api_version), 0.0, 1.0, {"ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0}
    )
    rep = compare.compare([Conn(1, "c", "b", [answer.step])], [answer])
    blob = json.dumps(rep, default=lambda o: o.hex() if isinstance(o, (bytes, memoryview)) else str(o)).encode()
    assert rep["differences"] and _pii({"replay report": blob}) == []
    assert b"bytes of records>" in blob


def test_orphan_answers_with_secrets_are_blanked():
    """A capture that began mid-login or mid-admin-call: the answers whose requests are missing
    (their API unknown) still lose their SCRAM signature or token HMAC."""
    from tests.oracle.exchanges import Exchanges
    from tests.redact_reference import redact
    from tests.oracle.tcp import Close, Data, Open
    import protocol

    client, server = ("10.0.0.1", 40000), ("10.0.0.2", 9092)
    hmac = SECRETS["token_hmac"][0]
    signature = b"v=" + SECRETS["scram_signature"][0]
    frames = [
        protocol.encode_response(
            36,
            2,
            {"CorrelationId": 7},
            {"ErrorCode": 0, "ErrorMessage": None, "AuthBytes": signature, "SessionLifetimeMs": 0},
        ),
        protocol.encode_response(
            41,
            3,
            {"CorrelationId": 8},
            {
                "ErrorCode": 0,
                "ThrottleTimeMs": 0,
                "Tokens": [
                    {
                        "PrincipalType": "User",
                        "PrincipalName": "bob",
                        "TokenRequesterPrincipalType": "User",
                        "TokenRequesterPrincipalName": "bob",
                        "IssueTimestamp": 1,
                        "ExpiryTimestamp": 2,
                        "MaxTimestamp": 3,
                        "TokenId": "tok",
                        "Hmac": hmac,
                        "Renewers": [],
                    }
                ],
            },
        ),
        protocol.encode_response(3, 12, {"CorrelationId": 9}, {"Brokers": [], "Topics": []}),
    ]
    ex = Exchanges()
    out = ex.feed(Open(0, None, None, 1.0, False))
    for i, f in enumerate(frames):
        out += ex.feed(Data(0, server, client, 1.1 + i, protocol.with_size(f)))
    out += ex.feed(Close(0, 5.0, "fin")) + ex.finish(6.0)
    orphans = [redact(x) for x in out if x.type == "exchange"]
    assert [x.status for x in orphans] == ["orphan_response"] * 3
    assert len(orphans[0].response_raw) == len(frames[0]) and orphans[2].response_raw == frames[2]
    blob = b"".join(bytes(x.response_raw) + bytes(x.response["_raw_body"]) for x in orphans)
    assert leaks({"orphans": blob}) == []
    assert SECRETS["scram_signature"][0] not in blob and b"v=****" in blob


def test_no_payloads_drops_an_orphan_answers_body(tmp_path):
    """midstream.pcap begins with the answer to a Fetch sent before the capture: an orphan whose
    undecoded body holds 10 records."""
    mid = ROOT / "samples" / "midstream.pcap"
    value = b"kafkawire-sample"

    def found(data: bytes) -> bool:
        return value in data or value.hex().encode() in data

    assert found(run("dissect", mid, "--format", "jsonl").stdout)
    run("land", mid, "--out", tmp_path / "full", "--quiet")
    assert found(parquet_cells(tmp_path / "full"))
    out = run("dissect", mid, "--format", "jsonl", "--raw", "--no-payloads").stdout
    orphan = next(x for x in map(json.loads, out.splitlines()) if x.get("status") == "orphan_response")
    assert orphan["response"]["_raw_body"]["dropped"] == "--no-payloads"
    run("land", mid, "--out", tmp_path / "bare", "--records", "--no-payloads", "--quiet")
    assert not found(out) and not found(parquet_cells(tmp_path / "bare"))


# -- key logs: their secrets out of every command, on success and on each failure --------------------

TLS = ROOT / "samples" / "tls"
KEYLOG_PCAP = TLS / "tls-kafka-python-ak.pcap"
KEYLOG = TLS / "tls-kafka-python-ak.keys"


def _keylog_secrets(text: bytes) -> list[bytes]:
    """The secrets of an NSS key log (third column), and their upper-case hex."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and not line.startswith(b"#"):
            out += [parts[2].lower(), parts[2].upper()]
    return out


def _keylog_commands(tmp: Path, keys: Path) -> dict[str, list]:
    """Every command that takes --tls-keylog, run on the TLS sample with `keys` (land --follow on a
    folder holding a copy of it)."""
    k = ["--tls-keylog", keys]
    caps = tmp / "caps"
    caps.mkdir(parents=True, exist_ok=True)
    shutil.copy(KEYLOG_PCAP, caps)
    follow = ["land", "--follow", caps, "--out", tmp / "followed", "--until-idle", "0", "--poll", "0.1", "--quiet"]
    return {
        "dissect": ["dissect", KEYLOG_PCAP, *k],
        "dissect jsonl": ["dissect", KEYLOG_PCAP, "--format", "jsonl", "--raw", *k],
        "land": ["land", KEYLOG_PCAP, "--out", tmp / "tables", "--quiet", *k],
        "report": ["report", KEYLOG_PCAP, "--format", "json", *k],
        "replay --dry-run": ["replay", KEYLOG_PCAP, "--to", "127.0.0.1:9", "--dry-run", *k],
        "top --once": ["top", KEYLOG_PCAP, "--once", "--speed", "1000", *k],
        "land --follow": [*follow, *k],
    }


def _keylog_leaks(outputs: dict[str, bytes], secrets: list[bytes]) -> list[str]:
    return [name for name, data in outputs.items() for s in secrets if s in data]


def test_every_command_with_a_key_log_decrypts_and_keeps_its_secrets_out(tmp_path):
    secrets = _keylog_secrets(KEYLOG.read_bytes())
    assert len(secrets) >= 20
    outputs = {}
    for name, argv in _keylog_commands(tmp_path, KEYLOG).items():
        r = run(*argv)
        outputs[f"{name} stdout"], outputs[f"{name} stderr"] = r.stdout, r.stderr
    # decrypted: the Kafka inside is there (the SASL login and a Produce)
    assert b"Produce" in outputs["dissect stdout"] and b"SaslAuthenticate" in outputs["top --once stdout"]
    assert b"tls_encrypted" not in outputs["dissect jsonl stdout"]
    outputs["land (files)"] = b"".join(p.read_bytes() for p in (tmp_path / "tables").rglob("*") if p.is_file())
    outputs["land --follow (files)"] = b"".join(
        p.read_bytes() for p in (tmp_path / "followed").rglob("*") if p.is_file()
    )
    # followed with the key log: the connections were decrypted, as in the one-off landing
    from landing.writer import dataset

    apis = {r["api_name"] for r in dataset(tmp_path / "followed", "exchanges").to_table(["api_name"]).to_pylist()}
    assert {"SaslAuthenticate", "Produce", "Fetch"} <= apis, apis
    assert _keylog_leaks(outputs, secrets) == []


def _bad_keylogs(tmp: Path) -> dict[str, tuple[Path, list[bytes]]]:
    """name -> (a key log that cannot be used, the bytes in it no message may echo)."""
    real = KEYLOG.read_bytes()
    mangled = real.replace(b" ", b":")  # no line in the NSS shape
    (tmp / "mangled.keys").write_bytes(mangled)
    (tmp / "binary.keys").write_bytes(KEYLOG_PCAP.read_bytes()[:4096])
    (tmp / "dir.keys").mkdir()
    return {
        "missing": (tmp / "missing.keys", []),
        "directory": (tmp / "dir.keys", []),
        "no key log lines": (tmp / "mangled.keys", [mangled.splitlines()[1]]),
        "binary": (tmp / "binary.keys", []),
    }


def test_every_command_refuses_a_bad_key_log_in_one_line_without_its_contents(tmp_path):
    for why, (keys, secrets) in _bad_keylogs(tmp_path).items():
        secrets = secrets + _keylog_secrets(KEYLOG.read_bytes())
        for name, argv in _keylog_commands(tmp_path / why.replace(" ", "-"), keys).items():
            r = run(*argv, check=False)
            err = r.stderr.decode(errors="replace").strip()
            assert r.returncode != 0, (why, name)
            assert len(err.splitlines()) == 1 and "Traceback" not in err, (why, name, err)
            assert str(keys.name) in err, (why, name, err)
            assert _keylog_leaks({f"{name} ({why})": r.stdout + r.stderr}, secrets) == [], err


def test_a_capture_failure_with_a_key_log_keeps_its_contents_out(tmp_path):
    secrets = _keylog_secrets(KEYLOG.read_bytes())
    for name, argv in _keylog_commands(tmp_path, KEYLOG).items():
        if "--follow" in argv:
            continue  # a folder, not a capture file: its refusal does not name a capture
        argv = [tmp_path / "missing.pcap" if a == KEYLOG_PCAP else a for a in argv]
        r = run(*argv, check=False)
        assert r.returncode != 0 and b"missing.pcap" in r.stderr, (name, r.stderr)
        assert _keylog_leaks({name: r.stdout + r.stderr}, secrets) == []
