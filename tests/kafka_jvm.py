"""Apache Kafka 4.x from its Maven Central jars: fetch, broker, Java client.

    python -m tests.kafka_jvm fetch        # jars into the cache (once), compile the workload, format storage
    python -m tests.kafka_jvm broker       # run a broker until Ctrl-C (prints its address)
    python -m tests.kafka_jvm broker --tls [--keylog F]   # with the TLS listeners (and SASL_SSL)

The jars live in $KAFKAWIRE_KAFKA_CACHE (default ~/.cache/kafkawire/kafka-4.3.1):
`libs/` filled by `mvn dependency:copy-dependencies` on tests/java/pom.xml, and
`classes/` with tests/java/KafkawireWorkload.java compiled by javac.

KafkaBroker runs one KRaft node in combined mode (broker and controller in one
JVM) on two free 127.0.0.1 ports, its log dir in a temp dir. Used by the
pytest fixture `apache_kafka` (conftest.py) and samples/make_captures.py.

KafkaCluster runs N such nodes (default 3), each broker and controller, as one
cluster with a static quorum (controller.quorum.voters) on 2N free ports:
internal topics with replication factor N (3 at most), one partition each, min
ISR 2, so the nodes replicate them to each other and the controllers fetch the
metadata log from their leader. Used by samples/make_captures.py (kraft3-ak).

    python -m tests.kafka_jvm cluster      # run a 3-node cluster until Ctrl-C

Every wait is bounded; processes are stopped by PID.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.broker import HOST, BrokerError, free_port, port_open, read_frame, terminate

# KAFKAWIRE_KAFKA_VERSION: another release's jars (each in a cache of its own); 3.9.x still
# accepts the API versions Kafka 4 removed, which old clients send (samples/make_captures.py)
KAFKA_VERSION = os.environ.get("KAFKAWIRE_KAFKA_VERSION", "4.3.1")
JAVA_DIR = Path(__file__).resolve().parent / "java"
POM = JAVA_DIR / "pom.xml"
WORKLOAD_SRC = JAVA_DIR / "KafkawireWorkload.java"
LOG4J = JAVA_DIR / "log4j2.properties"
HEAP = "-Xmx384m"


def cache_dir() -> Path:
    env = os.environ.get("KAFKAWIRE_KAFKA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kafkawire" / f"kafka-{KAFKA_VERSION}"


def libs_dir() -> Path:
    return cache_dir() / "libs"


def _complete_marker() -> Path:
    return libs_dir() / ".complete"


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def jars_present() -> bool:
    """The jars of the current pom are cached (a changed pom fetches again)."""
    try:
        return _complete_marker().read_text().strip() == _pom_digest()
    except OSError:
        return False


def classpath(*extra: Path) -> str:
    return os.pathsep.join([*(str(p) for p in extra), str(libs_dir() / "*")])


class FetchError(RuntimeError):
    pass


class _Lock:
    """An flock on the cache dir, so pytest and make_captures running at once
    do not fetch or compile into the same folder together."""

    def __enter__(self):
        cache_dir().mkdir(parents=True, exist_ok=True)
        self.f = open(cache_dir() / ".lock", "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _mvn_into(prefix: str, goal: list[str], want: str, what: str, timeout: float, quiet: bool = True) -> Path:
    """mvn -B GOAL -DoutputDirectory=<a new folder in the cache>: that folder, holding `want`; a
    FetchError (mvn missing, too slow, failing, or `want` not made) otherwise, the folder removed."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError(f"mvn not found: install maven (apt-get install maven) to fetch {what}")
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=cache_dir()))
    cmd = [mvn, "-B", *(["-q"] if quiet else []), *goal, f"-DoutputDirectory={tmp}"]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=quiet, timeout=timeout, cwd=tmp)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        raise FetchError(f"mvn did not finish within {timeout:.0f}s") from None
    if proc.returncode != 0 or not (tmp / want).is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        tail = ((proc.stdout or b"") + (proc.stderr or b"")).decode(errors="replace").strip().splitlines()[-15:]
        task = next(g for g in goal if g.startswith("dependency:"))
        raise FetchError(f"mvn {task} failed ({proc.returncode}):\n" + "\n".join(tail))
    return tmp


def fetch(timeout: float = 900.0, quiet: bool = True) -> Path:
    """Copy the broker, tools and client jars with their runtime dependencies
    into libs/ (mvn from Maven Central; ~55 MB). A no-op when already there."""
    with _Lock():
        if jars_present():
            return libs_dir()
        # Copy into a sibling folder and rename: an interrupted fetch never
        # looks complete.
        goal = [
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-Dkafka.version={KAFKA_VERSION}",
        ]
        tmp = _mvn_into("libs.", goal, f"kafka_2.13-{KAFKA_VERSION}.jar", "Apache Kafka's jars", timeout, quiet)
        shutil.rmtree(libs_dir(), ignore_errors=True)
        tmp.rename(libs_dir())
        _complete_marker().write_text(_pom_digest() + "\n")
        return libs_dir()


def workload_classes(timeout: float = 300.0) -> Path:
    """tests/java/KafkawireWorkload.java compiled against the cached jars
    (fetching them first if needed); recompiled when the source changes."""
    fetch()
    out = cache_dir() / "classes"
    digest = hashlib.sha256(WORKLOAD_SRC.read_bytes()).hexdigest()
    stamp = out / ".source-sha256"
    with _Lock():
        if stamp.is_file() and stamp.read_text().strip() == digest:
            return out
        javac = shutil.which("javac")
        if javac is None:
            raise FetchError("javac not found: install a JDK (apt-get install default-jdk-headless)")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        proc = subprocess.run(
            [javac, "-nowarn", "-encoding", "UTF-8", "-cp", classpath(), "-d", str(out), str(WORKLOAD_SRC)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise FetchError("javac failed:\n" + proc.stderr.decode(errors="replace")[-3000:])
        stamp.write_text(digest + "\n")
    return out


def java_command(
    main_class: str,
    *args: str,
    heap: str = HEAP,
    extra_cp: tuple[Path, ...] = (),
    jvm_args: tuple[str, ...] = (),
) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise FetchError("java not found: install a JDK (apt-get install default-jdk-headless)")
    # Serial GC and C1 only: the JVMs here are short-lived and share 2 cores,
    # so fewer GC and compiler threads start faster.
    return [
        java,
        heap,
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={LOG4J}",
        *jvm_args,
        "-cp",
        classpath(*extra_cp),
        main_class,
        *args,
    ]


def run_workload(*args: str, timeout: float = 120.0, log: Path | None = None, jvm_args: tuple[str, ...] = ()) -> str:
    """Run KafkawireWorkload with `args` (and `jvm_args` for its JVM, e.g.
    tls_keylog_args()); returns its stdout (one summary line per step), raises
    RuntimeError with its stderr when it fails."""
    classes = workload_classes()
    cmd = java_command("KafkawireWorkload", *args, heap="-Xmx256m", extra_cp=(classes,), jvm_args=jvm_args)
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"KafkawireWorkload {' '.join(args)} did not finish within {timeout:.0f}s") from e
    err = proc.stderr.decode(errors="replace")
    if log:
        log.write_text(err)
    if proc.returncode != 0:
        raise RuntimeError(f"KafkawireWorkload {' '.join(args)} exited {proc.returncode}:\n{err[-4000:]}")
    return proc.stdout.decode()


# The Java agent that writes a JVM's TLS secrets as an NSS key log (SSLKEYLOGFILE
# format: CLIENT_RANDOM for TLS 1.2, the *_TRAFFIC_SECRET_0 lines for TLS 1.3).
TLS_AGENT = ("name.neykov", "extract-tls-secrets", "4.0.0")


def tls_agent(timeout: float = 300.0) -> Path:
    """The extract-tls-secrets agent jar from Maven Central (`mvn dependency:copy`),
    cached in agents/ beside libs/."""
    group, artifact, version = TLS_AGENT
    jar = cache_dir() / "agents" / f"{artifact}-{version}.jar"
    with _Lock():
        if jar.is_file():
            return jar
        goal = ["dependency:copy", f"-Dartifact={group}:{artifact}:{version}"]
        tmp = _mvn_into("agents.", goal, jar.name, "the TLS key log agent", timeout)
        jar.parent.mkdir(exist_ok=True)
        (tmp / jar.name).rename(jar)
        shutil.rmtree(tmp, ignore_errors=True)
    return jar


def tls_keylog_args(keylog: Path) -> tuple[str, ...]:
    """JVM arguments that make every TLS connection of that JVM (client or
    server side) append its secrets to `keylog` (NSS key log format)."""
    return (f"-javaagent:{tls_agent()}={keylog}",)


# ------------------------------------------------------------------ broker


def _cluster_id() -> str:
    # What `kafka-storage random-uuid` prints: a v4 UUID, URL-safe base64.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.quorum.voters=1@{host}:{cport}
log.dirs={logdir}
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=true
# one node: every internal topic has one replica, and one partition so the
# first FindCoordinator does not wait for 50 partitions to load
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.enable=false
"""


def api_versions(address: str, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} the broker at host:port advertises (ApiVersions v3)."""
    import protocol

    host, port = address.rsplit(":", 1)
    req = protocol.encode_request(
        18,
        3,
        {"CorrelationId": 1, "ClientId": "kafkawire-probe"},
        {"ClientSoftwareName": "kafkawire", "ClientSoftwareVersion": "0"},
    )
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(protocol.with_size(req))
        resp = protocol.decode_response(read_frame(s, time.monotonic() + timeout), 18, 3)
    return {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in resp.body["ApiKeys"]}


def _metadata_brokers(address: str, timeout: float = 2.0) -> int:
    """How many brokers a Metadata v12 answer lists: 0 until the node has
    registered with its controller and can serve clients."""
    import protocol

    host, port = address.rsplit(":", 1)
    req = protocol.encode_request(
        3,
        12,
        {"CorrelationId": 2, "ClientId": "kafkawire-probe"},
        {"Topics": [], "AllowAutoTopicCreation": False, "IncludeTopicAuthorizedOperations": False},
    )
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(protocol.with_size(req))
        resp = protocol.decode_response(read_frame(s, time.monotonic() + timeout), 3, 12)
    return len(resp.body["Brokers"])


def storage_template(timeout: float = 120.0) -> Path:
    """A log dir formatted once by Kafka's StorageTool (`kafka-storage format`)
    and copied for each broker. With a static quorum (controller.quorum.voters)
    the formatted files hold the cluster id, node id and bootstrap metadata but
    no host or port, so one copy serves every broker; it saves a JVM start
    (~4 s) per broker."""
    fetch()
    # keyed by the properties, which say what gets formatted (node id, roles, quorum)
    tmpl = cache_dir() / f"storage-template-{hashlib.sha256(SERVER_PROPERTIES.encode()).hexdigest()[:12]}"
    with _Lock():
        if (tmpl / "meta.properties").is_file():
            return tmpl
        shutil.rmtree(tmpl, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix="format.", dir=cache_dir()))
        try:
            props = work / "server.properties"
            props.write_text(SERVER_PROPERTIES.format(host=HOST, port=9092, cport=9093, logdir=work / "data"))
            try:
                proc = subprocess.run(
                    java_command("kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(props)),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                raise BrokerError(f"kafka storage format did not finish within {timeout:.0f}s") from None
            if proc.returncode != 0 or not (work / "data" / "meta.properties").is_file():
                raise BrokerError(
                    f"kafka storage format failed ({proc.returncode}):\n"
                    + (proc.stdout + proc.stderr).decode(errors="replace")[-3000:]
                )
            (work / "data").rename(tmpl)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tmpl


# KafkaBroker(tls=True): one SSL listener per (TLS version, cipher suite), each
# forced by listener-prefixed configs; {listener name: (version, suite)}.
TLS_LISTENERS = {
    "TLS13_AES128": ("TLSv1.3", "TLS_AES_128_GCM_SHA256"),
    "TLS13_AES256": ("TLSv1.3", "TLS_AES_256_GCM_SHA384"),
    "TLS13_CHACHA20": ("TLSv1.3", "TLS_CHACHA20_POLY1305_SHA256"),
    "TLS12_AES128": ("TLSv1.2", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    "TLS12_AES256": ("TLSv1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    "TLS12_CHACHA20": ("TLSv1.2", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
}
# ... and with sasl_users too, a SASL_SSL listener: TLS 1.3, its suite left to the
# JVM's choice (None here; tls_listeners holds what a handshake negotiated).
SASL_SSL_LISTENER = ("SASL_SSL", "TLSv1.3")
KEYSTORE_PASSWORD = "kafkawire-tls"

# OpenSSL's names of the forced suites (what ssl.SSLSocket.cipher() says)
OPENSSL_SUITES = {
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}


def make_keystore(folder: Path, timeout: float = 60.0) -> tuple[Path, Path]:
    """A self-signed RSA 2048 certificate for CN=localhost (SAN dns:localhost,
    ip:127.0.0.1) made by the JDK's keytool: `broker.p12` (PKCS12, key and
    certificate, password KEYSTORE_PASSWORD) and `broker.pem` (the certificate,
    for clients to trust: Python's cafile, Java's ssl.truststore.type=PEM)."""
    keytool = shutil.which("keytool")
    if keytool is None:
        raise FetchError("keytool not found: install a JDK (apt-get install default-jdk-headless)")
    store, pem = folder / "broker.p12", folder / "broker.pem"
    common = ["-alias", "broker", "-keystore", str(store), "-storetype", "PKCS12", "-storepass", KEYSTORE_PASSWORD]
    for cmd in (
        [
            keytool,
            "-genkeypair",
            *common,
            "-keyalg",
            "RSA",
            "-keysize",
            "2048",
            "-validity",
            "3650",
            "-dname",
            "CN=localhost",
            "-ext",
            "SAN=dns:localhost,ip:127.0.0.1",
            "-keypass",
            KEYSTORE_PASSWORD,
        ],
        [keytool, "-exportcert", "-rfc", *common, "-file", str(pem)],
    ):
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        if proc.returncode != 0:
            raise BrokerError(f"keytool {cmd[1]} failed:\n" + (proc.stdout + proc.stderr).decode(errors="replace"))
    return store, pem


def tls_handshake(port: int, cafile: Path, timeout: float = 5.0) -> tuple[str, str]:
    """(TLS version, IANA suite name) a Python client negotiates with 127.0.0.1:port."""
    import ssl

    ctx = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection((HOST, port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname=HOST) as s:
            name, version, _bits = s.cipher()
    return version, OPENSSL_SUITES.get(name, name)


class KafkaBroker:
    """One Apache Kafka node (KRaft, broker+controller) on 127.0.0.1; use as a
    context manager. start() copies a freshly formatted log dir, spawns the JVM and
    returns once a Metadata request lists the broker, or raises BrokerError
    (with the tail of the broker's log) after `timeout` seconds.

    tls=True adds an SSL listener per entry of TLS_LISTENERS (plus SASL_SSL with
    sasl_users), with a self-signed keystore made by keytool in the broker's
    temp dir: `tls_listeners` is then {name: (port, version, suite)},
    `tls_pem` the certificate clients trust. jvm_args go to the broker's JVM
    (e.g. tls_keylog_args(path): its TLS secrets as a key log)."""

    def __init__(
        self,
        port: int | None = None,
        timeout: float = 90.0,
        log: Path | None = None,
        extra_properties: str = "",
        sasl_users: dict[str, str] | None = None,
        tls: bool = False,
        jvm_args: tuple[str, ...] = (),
    ):
        self.requested_port = port
        self.port = port or 0
        self.controller_port = 0
        # With sasl_users ({user: password}), a third listener SASL_PLAINTEXT on
        # sasl_port takes PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 logins from those users.
        self.sasl_users = sasl_users
        self.sasl_port = 0
        self.tls = tls
        self.tls_listeners: dict[str, tuple[int, str, str | None]] = {}
        self.tls_pem: Path | None = None
        self.tls_keystore: Path | None = None
        self.jvm_args = tuple(jvm_args)
        self.timeout = timeout
        self.log = log
        self.extra_properties = extra_properties
        self.proc: subprocess.Popen | None = None
        self.dir: Path | None = None
        self.startup_seconds: float | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def sasl_address(self) -> str:
        return f"{HOST}:{self.sasl_port}"

    def tls_address(self, name: str) -> str:
        return f"{HOST}:{self.tls_listeners[name][0]}"

    def _listener_properties(self) -> str:
        """listeners, advertised.listeners and the protocol map for the SASL and TLS
        listeners, and their SASL and SSL settings (appended: later keys win)."""
        names = [("PLAINTEXT", "PLAINTEXT", self.port)]
        if self.sasl_users:
            names.append(("SASL_PLAINTEXT", "SASL_PLAINTEXT", self.sasl_port))
        for name, (port, _version, _suite) in self.tls_listeners.items():
            names.append((name, "SASL_SSL" if name == SASL_SSL_LISTENER[0] else "SSL", port))
        listeners = ",".join(f"{n}://{HOST}:{p}" for n, _, p in names)
        text = (
            f"listeners={listeners},CONTROLLER://{HOST}:{self.controller_port}\n"
            f"advertised.listeners={listeners}\n"
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,"
            + ",".join(f"{n}:{proto}" for n, proto, _ in names)
            + "\n"
        )
        sasl_listeners = [n.lower() for n, proto, _ in names if proto.startswith("SASL_")]
        if sasl_listeners:
            users = " ".join(f'user_{u}="{pw}"' for u, pw in self.sasl_users.items())
            text += "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n"
            for n in sasl_listeners:
                text += (
                    f"listener.name.{n}.plain.sasl.jaas.config="
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};\n"
                    f"listener.name.{n}.scram-sha-256.sasl.jaas.config="
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
                    f"listener.name.{n}.scram-sha-512.sasl.jaas.config="
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
                )
        if self.tls_listeners:
            text += (
                f"ssl.keystore.location={self.tls_keystore}\n"
                "ssl.keystore.type=PKCS12\n"
                f"ssl.keystore.password={KEYSTORE_PASSWORD}\n"
                f"ssl.key.password={KEYSTORE_PASSWORD}\n"
                "ssl.client.auth=none\n"
            )
            for name, (_port, version, suite) in self.tls_listeners.items():
                text += f"listener.name.{name.lower()}.ssl.enabled.protocols={version}\n"
                if suite:
                    text += f"listener.name.{name.lower()}.ssl.cipher.suites={suite}\n"
        return text

    def _add_scram_users(self) -> None:
        """SCRAM credentials live in the cluster metadata: set them over the
        PLAINTEXT listener (AlterUserScramCredentials), then wait until one
        login works, so the first client in a capture does not race them."""
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        admin = AdminClient({"bootstrap.servers": self.address})
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one user once a request
            info = ScramCredentialInfo(mechanism, 4096)
            futures = admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(u, info, pw.encode()) for u, pw in self.sasl_users.items()]
            )
            for f in futures.values():
                f.result(timeout=30)
        user, pw = next(iter(self.sasl_users.items()))
        probe = AdminClient(
            {
                "bootstrap.servers": self.sasl_address,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": user,
                "sasl.password": pw,
            }
        )
        probe.list_topics(timeout=30)

    def _log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def _prepare(self) -> Path:
        logdir = self.dir / "data"
        props = self.dir / "server.properties"
        text = SERVER_PROPERTIES.format(host=HOST, port=self.port, cport=self.controller_port, logdir=logdir)
        if self.tls:
            self.tls_keystore, self.tls_pem = make_keystore(self.dir)
        if self.sasl_users or self.tls:
            # later keys win in a properties file
            text += self._listener_properties()
        props.write_text(text + self.extra_properties)
        shutil.copytree(storage_template(), logdir)
        return props

    def _check_tls(self) -> None:
        """Handshake with every TLS listener; each must negotiate its forced version and
        suite. The SASL_SSL listener's suite (the JVM's choice) is filled in."""
        for name, (port, version, suite) in list(self.tls_listeners.items()):
            got_version, got_suite = tls_handshake(port, self.tls_pem)
            if got_version != version or (suite and got_suite != suite):
                raise BrokerError(f"listener {name} negotiated {got_version} {got_suite}, not {version} {suite}")
            self.tls_listeners[name] = (port, version, got_suite)

    def start(self) -> str:
        storage_template()
        t0 = time.monotonic()
        attempts = 1 if self.requested_port else 3
        for _ in range(attempts):
            self.port = self.requested_port or free_port()
            if self.requested_port and port_open(self.port):
                raise BrokerError(f"port {self.port} is already in use")
            self.controller_port = free_port()
            if self.sasl_users:
                self.sasl_port = free_port()
            self.tls_listeners = {}
            if self.tls:
                taken = {self.port, self.controller_port, self.sasl_port}
                specs = dict(TLS_LISTENERS)
                if self.sasl_users:
                    specs[SASL_SSL_LISTENER[0]] = (SASL_SSL_LISTENER[1], None)
                for name, (version, suite) in specs.items():
                    port = free_port()
                    while port in taken:
                        port = free_port()
                    taken.add(port)
                    self.tls_listeners[name] = (port, version, suite)
            self.dir = Path(tempfile.mkdtemp(prefix="kafkawire-ak-"))
            self.log_path = self.log or self.dir / "broker.log"
            props = self._prepare()
            with open(self.log_path, "ab") as out:
                self.proc = subprocess.Popen(
                    java_command("kafka.Kafka", str(props), jvm_args=self.jvm_args),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    ready = _metadata_brokers(self.address) > 0
                except OSError:
                    ready = False
                if ready:
                    try:
                        if self.sasl_users:
                            self._add_scram_users()
                        if self.tls:
                            self._check_tls()
                    except Exception as e:  # noqa: BLE001 - any client fault: stop the JVM, say why
                        what = "SCRAM users could not be set up" if not self.tls else "SCRAM users or TLS listeners"
                        tail = self._log_tail()
                        self.stop()
                        raise BrokerError(f"{what}: {e}\n{tail}") from e
                    self.startup_seconds = time.monotonic() - t0
                    return self.address
                time.sleep(0.2)
            tail = self._log_tail()
            self.stop()
        raise BrokerError(f"Apache Kafka did not answer on {self.address} within {self.timeout}s:\n{tail}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            terminate(proc, timeout=15.0)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------- cluster

CLUSTER_PROPERTIES = """\
process.roles=broker,controller
node.id={node}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.quorum.voters={voters}
log.dirs={logdir}
num.partitions=1
default.replication.factor={rf}
min.insync.replicas={isr}
auto.create.topics.enable=true
# every internal topic on every node (up to 3), one partition each, so the
# nodes replicate it to each other and its first load is quick
offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=1
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={isr}
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={isr}
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
log.cleaner.enable=false
"""


def _cluster_text(node: int, ports: list[int], cports: list[int], logdir: Path) -> str:
    n = len(ports)
    voters = ",".join(f"{i + 1}@{HOST}:{cports[i]}" for i in range(n))
    rf = min(n, 3)
    return CLUSTER_PROPERTIES.format(
        node=node,
        host=HOST,
        port=ports[node - 1],
        cport=cports[node - 1],
        voters=voters,
        logdir=logdir,
        rf=rf,
        isr=min(rf, 2),
    )


def cluster_storage_templates(nodes: int = 3, timeout: float = 120.0) -> list[Path]:
    """One log dir per node (node-1 .. node-N), formatted by Kafka's StorageTool with one
    cluster id and each node's own node.id, cached under a name keyed by the properties and
    the node count, and copied for every cluster. As with storage_template(), a static quorum
    puts no host or port in the formatted files. The nodes are formatted at once (one JVM
    each, in parallel), and the folder appears only when all of them succeeded."""
    fetch()
    key = hashlib.sha256(f"{nodes}\n{CLUSTER_PROPERTIES}".encode()).hexdigest()[:12]
    tmpl = cache_dir() / f"cluster-template-{key}"
    dirs = [tmpl / f"node-{i}" for i in range(1, nodes + 1)]
    with _Lock():
        if all((d / "meta.properties").is_file() for d in dirs):
            return dirs
        shutil.rmtree(tmpl, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix="format.", dir=cache_dir()))
        procs = []
        try:
            cluster_id = _cluster_id()
            ports = [9092 + 2 * i for i in range(nodes)]
            cports = [p + 1 for p in ports]
            for node in range(1, nodes + 1):
                props = work / f"node-{node}.properties"
                props.write_text(_cluster_text(node, ports, cports, work / f"node-{node}"))
                out = open(work / f"node-{node}.out", "wb")
                procs.append(
                    (
                        node,
                        out,
                        subprocess.Popen(
                            java_command("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                        ),
                    )
                )
            deadline = time.monotonic() + timeout
            failed = []
            for node, out, proc in procs:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    terminate(proc)
                finally:
                    out.close()
                if proc.returncode != 0 or not (work / f"node-{node}" / "meta.properties").is_file():
                    text = (work / f"node-{node}.out").read_text(errors="replace")[-2000:]
                    failed.append(f"node {node} ({proc.returncode}):\n{text}")
            if failed:
                raise BrokerError("kafka storage format failed for " + "\n".join(failed))
            (work / "nodes").mkdir()
            for node in range(1, nodes + 1):
                (work / f"node-{node}").rename(work / "nodes" / f"node-{node}")
            (work / "nodes").rename(tmpl)
        finally:
            for _node, out, proc in procs:  # after a failure part-way
                if proc.poll() is None:
                    terminate(proc)
                out.close()
            shutil.rmtree(work, ignore_errors=True)
    return dirs


class KafkaCluster:
    """N Apache Kafka nodes (KRaft, each broker+controller, default 3) as one cluster on
    127.0.0.1, static quorum; use as a context manager. start() copies each node's formatted
    log dir, spawns the JVMs and returns once a Metadata request to every node lists all N
    brokers, or raises BrokerError (with the tail of every node's log) after `timeout`
    seconds. `log_dirs[i]` is node i+1's log dir, readable until stop()."""

    def __init__(self, nodes: int = 3, timeout: float = 150.0, extra_properties: str = ""):
        self.nodes = nodes
        self.timeout = timeout
        self.extra_properties = extra_properties
        self.ports: list[int] = []
        self.controller_ports: list[int] = []
        self.procs: list[subprocess.Popen] = []
        self.dir: Path | None = None
        self.startup_seconds: float | None = None

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self.nodes + 1))

    @property
    def addresses(self) -> list[str]:
        return [f"{HOST}:{p}" for p in self.ports]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses)

    # like KafkaBroker, for code that takes either
    @property
    def address(self) -> str:
        return self.bootstrap

    @property
    def log_dirs(self) -> list[Path]:
        return [self.dir / f"node-{i}" / "data" for i in self.node_ids] if self.dir else []

    @property
    def log_paths(self) -> list[Path]:
        return [self.dir / f"node-{i}" / "server.log" for i in self.node_ids] if self.dir else []

    def _log_tails(self, n: int = 20) -> str:
        out = []
        for node, path in zip(self.node_ids, self.log_paths, strict=True):
            try:
                tail = path.read_text(errors="replace").splitlines()[-n:]
            except OSError:
                tail = []
            out.append(f"--- node {node} ({path}):\n" + "\n".join(tail))
        return "\n".join(out)

    def _ready(self) -> bool:
        for address in self.addresses:
            try:
                if _metadata_brokers(address) < self.nodes:
                    return False
            except OSError:
                return False
        return True

    def start(self) -> str:
        templates = cluster_storage_templates(self.nodes)
        t0 = time.monotonic()
        tail = ""
        for _ in range(3):  # free ports are racy: a JVM that cannot bind exits, try fresh ones
            ports = set()
            while len(ports) < 2 * self.nodes:
                ports.add(free_port())
            ports = sorted(ports)
            self.ports, self.controller_ports = ports[: self.nodes], ports[self.nodes :]
            self.dir = Path(tempfile.mkdtemp(prefix="kafkawire-ak-cluster-"))
            for node, tmpl in zip(self.node_ids, templates, strict=True):
                home = self.dir / f"node-{node}"
                home.mkdir()
                shutil.copytree(tmpl, home / "data")
                props = home / "server.properties"
                text = _cluster_text(node, self.ports, self.controller_ports, home / "data")
                props.write_text(text + self.extra_properties)
                with open(home / "server.log", "ab") as out:
                    self.procs.append(
                        subprocess.Popen(
                            java_command("kafka.Kafka", str(props)),
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                        )
                    )
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                if any(p.poll() is not None for p in self.procs):
                    break
                if self._ready():
                    self.startup_seconds = time.monotonic() - t0
                    return self.bootstrap
                time.sleep(0.3)
            tail = self._log_tails()
            exited = [n for n, p in zip(self.node_ids, self.procs, strict=True) if p.poll() is not None]
            self.stop()
            if not exited:  # a timeout, not a lost port race: no point trying again
                break
        raise BrokerError(
            f"Apache Kafka cluster of {self.nodes} did not list {self.nodes} brokers on every node "
            f"within {self.timeout}s:\n{tail}"
        )

    def stop(self) -> None:
        procs, self.procs = self.procs, []
        # SIGTERM to all at once: a node stopping alone waits for the quorum the others make
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            terminate(proc, timeout=20.0)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> KafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="fetch the jars into the cache, compile the workload, format a storage template")
    b = sub.add_parser("broker", help="run a broker until interrupted")
    b.add_argument("--port", type=int)
    b.add_argument("--tls", action="store_true", help="add the TLS listeners (TLS_LISTENERS) and SASL_SSL")
    b.add_argument("--keylog", type=Path, help="with --tls: the broker JVM writes its TLS key log here")
    c = sub.add_parser("cluster", help="run a cluster of combined nodes until interrupted")
    c.add_argument("--nodes", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "fetch":
            t0 = time.monotonic()
            fetch()
            classes = workload_classes()
            storage_template()
            size = sum(p.stat().st_size for p in libs_dir().iterdir())
            print(
                f"{libs_dir()}: {len(list(libs_dir().glob('*.jar')))} jars, {size / 1e6:.0f} MB; "
                f"{classes}; {time.monotonic() - t0:.1f}s"
            )
            return 0
        if args.cmd == "cluster":
            with KafkaCluster(nodes=args.nodes) as cluster:
                print(
                    f"Apache Kafka {KAFKA_VERSION} cluster on {cluster.bootstrap} "
                    f"(controllers {','.join(map(str, cluster.controller_ports))}), "
                    f"up in {cluster.startup_seconds:.1f}s; logs under {cluster.dir}",
                    flush=True,
                )
                try:
                    while cluster.procs and all(p.poll() is None for p in cluster.procs):
                        time.sleep(1)
                except KeyboardInterrupt:
                    pass
            return 0
        with KafkaBroker(
            port=args.port,
            tls=args.tls,
            sasl_users={"alice": "alice-secret"} if args.tls else None,
            jvm_args=tls_keylog_args(args.keylog.resolve()) if args.keylog else (),
        ) as broker:
            print(
                f"Apache Kafka {KAFKA_VERSION} on {broker.address} (controller {broker.controller_port}), "
                f"up in {broker.startup_seconds:.1f}s; log {broker.log_path}",
                flush=True,
            )
            for name, (port, version, suite) in broker.tls_listeners.items():
                print(f"  {name}: {HOST}:{port} {version} {suite}", flush=True)
            if broker.tls_pem:
                print(f"  certificate: {broker.tls_pem} (SASL_SSL user alice, password alice-secret)", flush=True)
            try:
                while broker.proc and broker.proc.poll() is None:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
        return 0
    except (FetchError, BrokerError) as e:
        print(f"kafka_jvm: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
