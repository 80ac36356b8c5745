"""The Spark engine: captures -> the landing tables on local[*] or a standalone cluster.

    from landing.spark import session, register, land_spark
    spark = session()                       # local[*], quiet, temp warehouse
    register(spark)
    spark.read.format("kafkawire").option("table", "errors").load("caps/").show()
    land_spark(["caps/"], "tables/", master="spark://127.0.0.1:7077")

`land_spark` (what `kafkawire land --engine spark` runs) is a two-stage DataFrame job:
1. one task per file, or per byte range of a large uncompressed pcap/pcapng
   (dissector.ranges): the native core reads it and puts each TCP 4-tuple's packets in a
   bucket (one per stage-2 task, default one per core) as Arrow packet batches, no Python
   object per packet; each ~1 MB batch leaves as one row (its Arrow IPC bytes), then a row of
   the range's end times to every bucket (mapInArrow);
2. the shuffle (repartition by bucket) brings a bucket's rows to one task, which puts them back
   in capture order itself (_InOrder: no sort, memory bounded) and hands the batches straight to
   a native lander that dissects them, continuing the connections the lake's previous landing
   left open (landing.carry), and writes its rows as Parquet files of its own (mapInArrow).
Then the driver resolves topic ids named on other connections (a post-pass over the few files
that hold placeholders), commits the run (landing.lake) and registers the kafka_* tables.
Connections cut by rotation or by a range edge are whole in stage 2, so the tables equal
those of the same packets landed from one file.  The JVM moves a row per chunk, not per
packet: bench/README.md has the layouts and designs measured.

The `kafkawire` data sources (register()): spark.read.format("kafkawire") reads captures straight
into a DataFrame of one table (landing.spark_source), spark.readStream.format("kafkawire") a
directory tcpdump rotates into (landing.spark_stream); the rows as Spark takes them are
landing.spark_rows'.

Every task runs on the native core.  On a cluster, ship() sends the driver's kafkawire, compiled
extension included, as an archive (SparkContext.addArchive) that each executor unpacks; a task uses
it only where its worker's Python has no kafkawire installed, checks that the core it loaded is the
driver's build, and fails in one line (NativeCoreMissing) otherwise.  Each task says which core it
ran, and from where, in its executor's log (`kafkawire: task <stage> <part> on the native core ...`).

Only the spark modules of landing import pyspark, and only inside functions: the library and the
local engine need no JVM.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import dissector.native
from landing.schemas import PARTITION, SCHEMAS, TABLES
from landing.spark_source import source_classes

__all__ = [
    "session",
    "register",
    "register_tables",
    "land_spark",
    "plan",
    "ship",
    "native_build",
    "ivy_cache",
    "NativeCoreMissing",
]

TARGET_BYTES = 64 << 20  # a range per ~64 MiB of an uncompressed capture


# ---------------------------------------------------------------- session


def session(master: str | None = None, app: str = "kafkawire", conf: dict | None = None, *, warm: bool = True):
    """A SparkSession with the house settings: this interpreter on the driver (and its local workers),
    warehouse and Derby files in a temp dir, WARN logs, few shuffle partitions, modest driver memory;
    `warm`: its Python workers booted before it is returned (_warm_up).

    A cluster's executors run the Python that spark.pyspark.python (conf) or PYSPARK_PYTHON names, else
    this one's path; their tasks run on the native core, installed there or shipped by ship()."""
    conf = conf or {}
    python = sys.executable
    if not _is_local(master):
        python = conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or python
    os.environ["PYSPARK_PYTHON"] = python
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    if master and master.startswith(("local", "spark://127.0.0.1", "spark://localhost")):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver's servers bind loopback only
    tmp = tempfile.mkdtemp(prefix="kafkawire-spark-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # the session's warehouse and local dirs
    b = SparkSession.builder.appName(app)
    if master:  # none: spark-submit's --master, else local[*]
        b = b.master(master)
    b = (
        b.config("spark.sql.warehouse.dir", os.path.join(tmp, "warehouse"))
        # C1 only and the serial collector: the JVM here moves bytes between Python workers, and C2's
        # compiler threads and parallel GC took ~2 s of CPU per job from those workers on a small machine
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={tmp} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.local.dir", tmp)
        # local mode's executor is the driver: 1 GB ran out of heap now and then in the tables'
        # writes (Spark's sort by date and Parquet writers, two tasks at once) at 363 MB of input
        .config("spark.driver.memory", "2g")
        .config("spark.executor.memory", "1g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        # the kafkawire source applies filters on `date` itself
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.pyspark.python", python)
        .config("spark.executorEnv.PYSPARK_PYTHON", python)
    )
    for k, v in {**_local_conf(master, conf, tmp), **_store_env(), **_delta_conf(conf), **conf}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not spark.sparkContext.master.startswith("local"):
        ship(spark)
    if warm:
        _warm_up(spark)
    return spark


# Delta Lake for Spark: the last delta-spark with jars on Maven Central, built for Spark 4.2. Its
# jars come through spark.jars.packages into an Ivy cache of kafkawire's (once per machine, ~20 s);
# the jars Spark ships already are excluded so that one copy of each is on the class path.
DELTA_PACKAGE = "io.delta:delta-spark_2.13:4.4.0"
# s3a:// (lakes in S3) for Spark 4.2's Hadoop 3.5: hadoop-aws and the two AWS SDK modules it loads,
# not the SDK's 686 MB bundle
S3A_PACKAGES = (
    "org.apache.hadoop:hadoop-aws:3.5.0",
    "software.amazon.awssdk:s3:2.35.4",
    "software.amazon.awssdk:s3-transfer-manager:2.35.4",
)
_SPARK_HAS = (
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.parquet:parquet-hadoop",
    "org.apache.parquet:parquet-column",
    "org.apache.parquet:parquet-common",
    "org.apache.parquet:parquet-encoding",
    "org.apache.parquet:parquet-format-structures",
    "org.apache.parquet:parquet-jackson",
    "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-databind",
    "com.fasterxml.jackson.core:jackson-annotations",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl",
    "org.slf4j:slf4j-api",
    "org.xerial.snappy:snappy-java",
    "com.github.luben:zstd-jni",
    "commons-logging:commons-logging",
    "org.roaringbitmap:RoaringBitmap",
    "org.roaringbitmap:shims",
    "io.airlift:aircompressor",
    "com.google.code.findbugs:jsr305",
    "commons-pool:commons-pool",
    "org.locationtech.jts:jts-core",
    "javax.annotation:javax.annotation-api",
    "org.scala-lang:scala-library",
    "software.amazon.awssdk:bundle",
    "io.netty:*",
    "org.apache.httpcomponents:httpclient",
    "org.apache.httpcomponents:httpcore",
    "commons-codec:commons-codec",
    "org.wildfly.openssl:wildfly-openssl",
)


def ivy_cache() -> str:
    home = os.environ.get("KAFKAWIRE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kafkawire")
    return os.path.join(home, "ivy")


def _delta_conf(conf: dict) -> dict:
    """Delta Lake (and s3a with the environment's endpoint and region) in the session, unless the
    caller's conf sets its own packages."""
    from dissector.fs import s3_env

    if "spark.jars.packages" in conf:
        return {}
    out = {
        "spark.jars.packages": ",".join((DELTA_PACKAGE, *S3A_PACKAGES)),
        "spark.jars.excludes": ",".join(_SPARK_HAS),
        "spark.jars.ivy": ivy_cache(),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Delta reads a table's log state in 50 tasks by default: most of the time of a small table's read
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        # the credentials of the environment (and the SDK's chain), as dissector.fs and delta-rs take them
        "spark.hadoop.fs.s3a.aws.credentials.provider": "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider",
    }
    endpoint, region = s3_env()
    if endpoint:
        out["spark.hadoop.fs.s3a.endpoint"] = endpoint
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https")).lower()
    if region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = region
    return out


# what the object-store clients (dissector.fs) read from the environment: a cluster's executors read
# remote captures as the driver does (Spark's redaction hides the secret and the token in its UI)
_STORE_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
)


def _store_env() -> dict:
    return {f"spark.executorEnv.{k}": os.environ[k] for k in _STORE_ENV if os.environ.get(k)}


def _warm_up(spark) -> None:
    """A tiny job of a land job's shape (tasks per core, Arrow rows out, a shuffle, Arrow rows in) that
    boots the Python workers (the daemon's imports, the native core loaded and checked) and warms
    Spark's paths to them: part of starting the session, which a session's first job paid otherwise
    (3.5-3.8 s here, docs/spark.md), as every later job does not."""
    n = max(1, spark.sparkContext.defaultParallelism)
    ship = _ship_of(spark.sparkContext)
    out = _remote(ship, "warm", "_warm_out")
    back = _remote(ship, "warm", "_warm_in")
    rows = spark.range(0, 16 * n, 1, n).mapInArrow(out, "part long, data binary")
    _collect(rows.repartition(n, "part").mapInArrow(back, "id long"))  # a worker's fault: one line


def _warm_out(batches):
    import pyarrow as pa

    for b in batches:
        data = pa.array([bytes(1024)] * b.num_rows, pa.binary())
        yield pa.RecordBatch.from_arrays([b.column(0), data], names=["part", "data"])


def _warm_in(batches):
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"id": [sum(b.num_rows for b in batches)]}, schema=pa.schema([("id", pa.int64())]))


_DAEMON = "landing.spark_daemon"


def _is_local(master: str | None) -> bool:
    if master is None:  # spark-submit's master: its --master, MASTER, spark-defaults.conf, else local[*]
        # PYSPARK_GATEWAY_PORT: this driver was started by spark-submit (pyspark.java_gateway reads it),
        # whose master only the JVM knows; PYSPARK_SUBMIT_ARGS: what pyspark passes to the one it starts
        if "PYSPARK_GATEWAY_PORT" in os.environ or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
            return False
        master = os.environ.get("MASTER") or _default_master() or "local[*]"
    return re.fullmatch(r"local(\[[^\]]*\])?", master.strip()) is not None


def _default_master() -> str | None:
    """spark.master in the spark-defaults.conf that spark-submit would read, if any."""
    import importlib.util

    home = os.environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")
        home = os.path.dirname(spec.origin) if spec and spec.origin else ""
    conf = Path(os.environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")) / "spark-defaults.conf"
    try:
        for line in conf.read_text().splitlines():
            key, _, value = line.strip().partition(" ")
            if key == "spark.master" or key.startswith("spark.master="):
                return value.strip() or key.partition("=")[2]
    except OSError:
        pass
    return None


def _local_conf(master: str | None, conf: dict, tmp: str) -> dict:
    """The Python workers' settings in local mode (a cluster keeps Spark's defaults)."""
    if not _is_local(master):
        return {}
    out = {}
    if len(tmp) < 60:  # the socket's path (tmp/.<uuid>.sock) must fit in sun_path's 108 bytes
        # the JVM talks to its Python workers over a Unix socket in the session's private dir instead
        # of loopback TCP, where every task stalled ~40 ms (small writes held for delayed ACKs: neither
        # end sets TCP_NODELAY); 50 -> 5 ms per trivial task
        out["spark.python.unix.domain.socket.enabled"] = "true"
        out["spark.python.unix.domain.socket.dir"] = tmp
    out.update(_daemon_conf(conf))
    return out


def _daemon_conf(conf: dict) -> dict:
    """spark.python.daemon.module = landing.spark_daemon (pyspark.daemon with the workers' imports
    done once) on Linux, if the workers' Python finds this very module.

    Spark runs `python -m <module>` from the JVM's working directory (this one) with PYTHONPATH =
    Spark's zips + spark.executorEnv.PYTHONPATH + ours: a Python started the same way tells where
    that import leads (~30 ms).  Another checkout first on that path, or no kafkawire: keep
    PySpark's daemon (a cluster's workers, which may get kafkawire from ship() only once a task
    runs, keep it too: session() asks only in local mode)."""
    if not sys.platform.startswith("linux") or "spark.python.daemon.module" in conf:
        return {}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (conf.get("spark.executorEnv.PYTHONPATH"), env.get("PYTHONPATH")) if p
    )
    # the package and the module both: an editable install's finder can supply the module under
    # another checkout's package of the same name
    probe = (
        "import importlib.util as u\n"
        f"for n in ('landing', {_DAEMON!r}):\n"
        "    s = u.find_spec(n)\n"
        "    print(s.origin if s and s.origin else '')"
    )
    try:
        r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    here = Path(__file__).resolve()
    found = r.stdout.split("\n")[:2]
    mine = [here.with_name("__init__.py"), here.with_name("spark_daemon.py")]
    if r.returncode or len(found) < 2 or any(not f or Path(f).resolve() != m for f, m in zip(found, mine, strict=True)):
        return {}
    return {"spark.python.daemon.module": _DAEMON}


def ship(spark) -> None:
    """Give a cluster's executors this kafkawire, native core included, as an archive Spark unpacks.

    The archive (the packages' sources and the `dissector._native` extension, built here) is added with
    SparkContext.addArchive: every executor unpacks it into a directory of its working directory,
    where the extension loads as any installed one does (Python cannot load one from a zip, which is
    why addPyFile's zips ran the tasks on the Python pipeline).  Nothing goes on the workers' path by
    itself: each task's _booter() puts the directory there only if the worker's Python has no
    kafkawire of its own, so an installed kafkawire is used, never shadowed.  The directory is named
    after the build (`kafkawire-<build>.zip`), so a job finds the copy it shipped."""
    sc = spark.sparkContext
    if getattr(sc, "_kafkawire_ship", None) is not None:
        return
    build = native_build()
    name = f"kafkawire-{build}.zip"
    z = Path(tempfile.mkdtemp(prefix="kafkawire-ship-")) / name
    atexit.register(shutil.rmtree, z.parent, ignore_errors=True)
    ext = Path(_native_file()).resolve()
    root = Path(__file__).resolve().parents[1]
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        for pkg in _packages():
            for f in sorted((root / pkg).rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".json"):
                    zf.write(f, f.relative_to(root).as_posix())
        zf.write(ext, f"dissector/{ext.name}")
    sc.addArchive(str(z))
    sc._kafkawire_ship = (name, build)


def _packages() -> tuple:
    """The top-level packages a task imports: the dissector's, and this module's (whatever it is named)."""
    return tuple(dict.fromkeys(("protocol", "dissector", __name__.partition(".")[0])))


def _ship_of(sc) -> tuple:
    """(archive directory or None, native build) the tasks of sc's jobs expect."""
    shipped = getattr(sc, "_kafkawire_ship", None)
    return shipped if shipped is not None else (None, native_build())


# ---------------------------------------------------------------- the native core on the executors


class NativeCoreMissing(dissector.native.NativeCoreMissing):
    """A task's worker could not run the native core (its one line says why)."""


def _native_file() -> str:
    """The path of the native core's extension module here; NativeCoreMissing (one line) if it does not load."""
    import importlib

    try:
        return importlib.import_module("dissector._native").__file__
    except ImportError as e:
        raise NativeCoreMissing(
            f"kafkawire: the native core (dissector._native) does not load in {sys.executable} "
            f"(Python {sys.version.split()[0]}): {e}; build it with `pip install -e .` where cargo is installed"
        ) from None


_BUILDS: dict = {}


def native_build() -> str:
    """The native core's build id: the first 16 hex digits of its extension file's SHA-256."""
    import hashlib

    path = _native_file()
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _BUILDS:
        with open(path, "rb") as f:
            _BUILDS[key] = hashlib.sha256(f.read()).hexdigest()[:16]
    return _BUILDS[key]


def _booter(ship: tuple):
    """boot(stage) for tasks that may run where kafkawire is not installed: pickled by value
    (a nested function that reads no global of this module), it runs before any kafkawire import.

    If the worker's Python finds no `dissector` package, the job's archive (ship()) goes first on its
    path; then this module is imported, and for a task that dissects (stage given) _task_engine() checks
    the native core and reports it.  Returns (this module, that report or None)."""
    archive, build = ship
    module = __name__

    def boot(stage=None) -> tuple:
        import importlib
        import importlib.util
        import os
        import sys

        if archive is not None and importlib.util.find_spec("dissector") is None:
            from pyspark import SparkFiles

            home = os.path.abspath(os.path.join(SparkFiles.getRootDirectory(), archive))
            if not os.path.isdir(home):
                raise RuntimeError(f"kafkawire: this worker has no kafkawire installed and no {archive} unpacked")
            if home not in sys.path:
                sys.path.insert(0, home)
                importlib.invalidate_caches()
        mod = importlib.import_module(module)
        return mod, (mod._task_engine(stage, build, archive) if stage is not None else None)

    return boot


def _remote(ship: tuple, stage: str | None, name: str, *bound, engine: bool = False):
    """A task function for an RDD operation: fn(*args) = <this module>.<name>(*args, *bound) after
    boot(stage) (and engine=<its report> if `engine`); pickled by value like the booter, so it
    unpickles where kafkawire is not installed."""
    boot = _booter(ship)

    def run(*args):
        mod, report = boot(stage)
        kw = {"engine": report} if engine else {}
        return getattr(mod, name)(*args, *bound, **kw)

    return run


def _task_engine(stage: str, build: str, archive: str | None = None) -> tuple:
    """Check that this worker runs the driver's native core, say so on a cluster's task's stderr (the
    executor's log) and return (stage, part, "native", origin, build, extension path, host).

    NativeCoreMissing, in one line, if the core does not load or is another build than the driver's
    (an installed kafkawire that differs: install the driver's build there, or remove it so that the
    job's copy is used)."""
    import socket

    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else None
    path = _native_file()
    mine = native_build()
    origin = "shipped" if archive is not None and Path(path).parent.parent.name == archive else "installed"
    if mine != build:
        raise NativeCoreMissing(
            f"kafkawire: the worker's native core {path} ({origin}) is build {mine}, the driver's is {build}: "
            "install the driver's build on the workers, or uninstall kafkawire there so that the job ships it"
        )
    report = (stage, part, "native", origin, build, path, socket.gethostname())
    if archive is not None:  # a cluster's executor: its stderr is the executor's log (local mode: the console)
        # one write: the executor's own logger writes to the same file, and print() writes the
        # line and its newline apart, so a log line could land between them
        sys.stderr.write(f"kafkawire: task {stage} {part} on the native core {build} ({origin}: {path})\n")
        sys.stderr.flush()
    return report


# ---------------------------------------------------------------- plan


def plan(paths, target_bytes: int = TARGET_BYTES, map_files=None, spread_after: float = 1.0) -> list[tuple]:
    """(task number, Range, file rank) in capture order: files by their first packet time (as
    the native core merges them), ranges in file order. No range's frames are counted here (a
    compressed or remote file would have to be read through): stage 2 numbers them (_Numbering).

    Cutting a local file into ranges walks its record headers (0.12 s/GB here); a remote one's
    cut points take a ranged read each (dissector.resync). map_files(fn, files) may run that per
    file elsewhere (land_spark: a task per file) when the walks would take over `spread_after`
    seconds (below that the job costs more than it saves)."""
    from dissector.files import capture_files
    from dissector.native import start_ts

    files = capture_files(paths)
    files = [f for _, _, f in sorted((start_ts(f), i, f) for i, f in enumerate(files))] if len(files) > 1 else files
    items = [(rank, path, target_bytes) for rank, path in enumerate(files)]
    spread = map_files and len(files) > 1 and sum(_walk_seconds(f) for f in files) > spread_after
    splits = map_files(_split, items) if spread else [_split(i) for i in items]
    tasks = []
    for rank, ranges in sorted(splits, key=lambda s: s[0]):
        for r in ranges:
            tasks.append((len(tasks), r, rank))
    return tasks


def _walk_seconds(path: str) -> float:
    """About how long cutting a file into ranges takes here: its headers' walk (a compressed file is
    one range, a remote one's cuts a ranged read each: about nothing)."""
    from dissector import fs
    from dissector.files import compression

    if fs.is_uri(path):
        return 0.0
    with open(path, "rb") as f:
        packed = compression(f.read(6)) is not None
    return 0.0 if packed else os.path.getsize(path) * 0.12e-9


def _split(item) -> tuple:
    """(rank, [Range]) of one file."""
    from dissector.ranges import split_ranges

    rank, path, target_bytes = item
    return rank, split_ranges(path, target_bytes)


def _on_executors(sc):
    """map_files for plan(): a task per file, so the header walks run on every core at once."""

    def run(fn, items):
        return sc.parallelize(items, len(items)).map(_remote(_ship_of(sc), None, fn.__name__)).collect()

    return run


def _plain(task: tuple) -> tuple:
    """A plan() task as builtins only (the Range as a tuple of its fields): a task's input is unpickled
    before it runs, when its worker may not import kafkawire yet."""
    import dataclasses

    no, r, rank = task
    return no, tuple(getattr(r, f.name) for f in dataclasses.fields(r)), rank


def _task(plain: tuple) -> tuple:
    from dissector.ranges import Range

    no, r, rank = plain
    return no, Range(*r), rank


_CHUNK_ROWS = 16384  # a shuffle row holds at most this many packets of one bucket...
_CHUNK_BYTES = 1 << 20  # ...or about this many payload bytes carried along, so a task's buffers stay small

# Stage 1's rows: a chunk of one bucket's packets (an Arrow IPC message of a packet batch), or with
# chunk -1 a task's (last packet time, latest packet time, frames read) for every bucket.
_STAGE1 = "part int, task int, chunk long, chunks long, last double, top double, frames long, data binary"
_FRAME = re.compile(r"\bframe (\d+)")
_STAGE2 = "table string, date string, provisional boolean, marked boolean, data binary"


def _murmur3(v: int, seed: int = 42) -> int:
    """Spark's hash() of an int (Murmur3_x86_32.hashInt), which its hash partitioning takes modulo
    the partitions: _part_keys() inverts it so that bucket b goes to partition b."""
    m = 0xFFFFFFFF
    k = (v * 0xCC9E2D51) & m
    k = ((k << 15) | (k >> 17)) & m
    k = (k * 0x1B873593) & m
    h = seed ^ k
    h = ((h << 13) | (h >> 19)) & m
    h = (h * 5 + 0xE6546B64) & m
    h ^= 4
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def _part_keys(n: int) -> list[int]:
    """For each bucket b < n, the smallest int whose Spark hash lands in partition b of n."""
    keys: dict[int, int] = {}
    v = 0
    while len(keys) < n:
        keys.setdefault(_murmur3(v) % n, v)
        v += 1
    return [keys[b] for b in range(n)]


def _scan_arrow(batches, tasks: list, n: int, keys: list):
    """Stage 1 (mapInArrow over one row per task): each task's range read by the native core into
    per-bucket packet batches, each leaving as one row holding the batch's Arrow IPC bytes, then a
    row to every bucket with the range's end times and how many chunks it sent there.  No Python
    object is made per packet, and Spark's JVM moves a row per chunk, not per packet.  A payload
    read from an uncompressed file does not travel: the row says where it is in the file, which
    stage 2 maps (the workers read the capture's path already), so the shuffle moves ~40 bytes
    a packet whatever its size (bench/README.md: the layouts measured)."""
    import tempfile

    import pyarrow as pa

    from dissector.fs import is_uri
    from dissector.ranges import scan

    schema = _stage1_schema()
    for ids in batches:
        for i in ids.column(0).to_pylist():
            no, r, rank = _task(tasks[i])
            sent = [0] * n
            # payloads stay where they are (stage 2 reads them from the range, a remote one
            # fetched again there) but for a remote file read whole, whose payloads travel
            refs = not is_uri(r.path) or r.start is not None
            with tempfile.TemporaryDirectory(prefix="kafkawire-range-", dir=_local_dir()) as own:
                # a remote range is read from a local copy
                read = _local_copy(r, Path(own) / "range") if is_uri(r.path) and r.start is not None else r
                # frames numbered from 0: stage 2 adds the frames of the ranges before (_Numbering)
                s = scan(read, rank, 0, buckets=n, chunk_rows=_CHUNK_ROWS, chunk_bytes=_CHUNK_BYTES, refs=refs)
                for b, chunk, batch in s:
                    sent[b] += 1
                    if read is not r:
                        batch = _named(batch, read.path, r.path)
                    row = {"part": [keys[b]], "task": [no], "chunk": [chunk], "data": [batch.serialize().to_pybytes()]}
                    row.update(chunks=[None], last=[None], top=[None], frames=[None])
                    yield pa.RecordBatch.from_pydict(row, schema=schema)
                last, top = s.ends
                frames = s.frames
            meta = {"part": keys, "task": [no] * n, "chunk": [-1] * n, "chunks": sent, "frames": [frames] * n}
            yield pa.RecordBatch.from_pydict(
                {**meta, "last": [last] * n, "top": [top] * n, "data": [None] * n}, schema=schema
            )


def _local_copy(r, local: Path):
    """A remote range's bytes fetched (ranged GETs, several at once) at their offsets into a local
    file, as a Range the core reads (and maps) as a local one."""
    import dataclasses

    from dissector.fs import fetch_range

    fetch_range(r.path, r.start, r.end, local)
    return dataclasses.replace(r, path=str(local))


def _local_dir() -> str | None:
    """The executor's scratch folder (Spark's local dirs), or the system's."""
    return (os.environ.get("SPARK_LOCAL_DIRS") or "").split(",")[0] or None


def _named(batch, read: str, path: str):
    """A packet batch read from a remote range's local copy, its anomalies naming the file by its URI."""
    import pyarrow.compute as pc

    detail = batch.column("detail")
    if detail.null_count == len(detail):
        return batch
    i = batch.schema.get_field_index("detail")
    return batch.set_column(i, "detail", pc.replace_substring(detail, read, path))


class _Numbering:
    """Frame numbers for stage 2: stage 1 numbers each range's frames from 0 (a remote range's
    count is known only once it is read), and a range's packets come to stage 2 after every range
    before it has ended (_InOrder), so its first number is the sum of their frames."""

    def __init__(self):
        self.frames: dict[int, int] = {}
        self.task, self.base = 0, 0

    def meta(self, task: int, frames: int) -> None:
        self.frames[task] = frames

    def fix(self, task: int, batch):
        import pyarrow as pa
        import pyarrow.compute as pc

        while self.task < task:
            self.base += self.frames[self.task]
            self.task += 1
        if not self.base:
            return batch
        i = batch.schema.get_field_index("index")
        batch = batch.set_column(i, "index", pc.add(batch.column(i), pa.scalar(self.base, pa.int64())))
        detail = batch.column("detail")
        if detail.null_count == len(detail):
            return batch
        base = self.base
        text = [
            None if d is None else _FRAME.sub(lambda m: f"frame {int(m.group(1)) + base}", d)
            for d in detail.to_pylist()
        ]
        return batch.set_column(batch.schema.get_field_index("detail"), "detail", pa.array(text, pa.string()))


def _stage2_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("table", pa.string()),
            ("date", pa.string()),
            ("provisional", pa.bool_()),
            ("marked", pa.bool_()),
            ("data", pa.binary()),
        ]
    )


def _stage1_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("part", pa.int32()),
            ("task", pa.int32()),
            ("chunk", pa.int64()),
            ("chunks", pa.int64()),
            ("last", pa.float64()),
            ("top", pa.float64()),
            ("frames", pa.int64()),
            ("data", pa.binary()),
        ]
    )


class _InOrder:
    """A bucket's chunks, as the shuffle delivers them (in no set order), given back in capture
    order as (task, chunk data): task by task, each task's chunks in order.  A chunk that comes early waits in memory,
    or once `limit` bytes wait, in a file in `spill` (a temporary directory made when needed), so
    a task's memory is bounded whatever the order; Spark's sort would hold the whole bucket."""

    def __init__(self, tasks: int, limit: int = 64 << 20):
        self.tasks, self.limit = tasks, limit
        self.counts: dict[int, int] = {}
        self.waiting: dict[tuple[int, int], object] = {}
        self.held = 0
        self.at = (0, 0)
        self.spill = None

    def meta(self, task: int, chunks: int):
        self.counts[task] = chunks
        yield from self._release()

    def add(self, task: int, chunk: int, data):
        if (task, chunk) == self.at:
            self._next()
            yield task, data
            yield from self._release()
            return
        if self.held + len(data) > self.limit:
            import tempfile

            # Spark gives its Python workers its local dirs (spark.local.dir), where its own spills go
            where = (os.environ.get("SPARK_LOCAL_DIRS") or "").split(",")[0] or None
            self.spill = self.spill or tempfile.TemporaryDirectory(prefix="kafkawire-chunks-", dir=where)
            path = os.path.join(self.spill.name, f"{task}-{chunk}")
            with open(path, "wb") as f:
                f.write(data)
            self.waiting[(task, chunk)] = path
        else:
            self.waiting[(task, chunk)] = data
            self.held += len(data)

    def finish(self):
        yield from self._release()
        if self.waiting or self.at[0] < self.tasks:
            raise RuntimeError(
                f"kafkawire: stage 2 lacks chunks of its bucket (at task {self.at}, {len(self.waiting)} waiting)"
            )
        if self.spill is not None:
            self.spill.cleanup()

    def _next(self):
        """Past the chunk just given, and past every task whose count says it sent nothing more."""
        t, c = self.at[0], self.at[1] + 1
        self.at = (t, c)
        self._skip()

    def _skip(self):
        t, c = self.at
        while t < self.tasks and self.counts.get(t) == c:
            t, c = t + 1, 0
        self.at = (t, c)

    def _release(self):
        # a task that sent nothing here (or all of whose chunks went) is passed once its count is known
        self._skip()
        while self.at in self.waiting:
            task = self.at[0]
            data = self.waiting.pop(self.at)
            if isinstance(data, str):  # spilled
                path = data
                with open(path, "rb") as f:
                    data = f.read()
                os.unlink(path)
            else:
                self.held -= len(data)
            self._next()
            yield task, data


def _end(metas) -> tuple:
    """The whole set's last packet time (last task with packets) and latest packet time."""
    last = top = None
    for _, task_last, t in sorted(metas, key=lambda m: m[0]):
        if task_last is not None:
            last = task_last
            top = t if top is None or t > top else top
    return (last or 0.0, top)


def _land_arrow(batches, tasks: list, ports, records: bool, payloads: bool, carry: tuple, tls_keylogs=(), engine=None):
    """Stage 2 (mapInArrow over a bucket's rows): the packet batches, put back in capture order
    (_InOrder), go straight to a native lander, which dissects the bucket's connections, continuing
    those the previous landing of the lake carried. Its rows go to Spark as Arrow, a row per batch
    (table, date, provisional, marked, the batch's Arrow IPC bytes): Spark's Delta writer writes
    and commits them (landing.spark_delta). Provisional rows are those only the end of the input
    makes (landing.carry); marked ones may name a topic by a placeholder another task names. A
    last row (table "") holds what the task made, as JSON, with the state it carries on (base64).

    tasks: stage 1's tasks (plan(), _plain), whose ranges the chunks' payloads are read from.
    carry: (the run's tag, each bucket's carried state from the previous landing or None);
    tls_keylogs: the key log texts the job decrypts with (they travel with the task, as its other
    arguments do)."""
    import json
    import tempfile

    import pyarrow as pa
    from pyspark import TaskContext

    from dissector import native
    from dissector.fs import is_uri
    from dissector.ranges import lander_input, packet_schema
    from landing.carry import drain_carried
    from landing.writer import Spill, TopicNames, native_columns

    part = TaskContext.get().partitionId()
    tag, states = carry
    out = _stage2_schema()
    schema = packet_schema()
    metas = []
    order = _InOrder(len(tasks))
    numbering = _Numbering()
    ranges = [_task(t)[1] for t in tasks]
    # stage 1 left these payloads in their files (_scan_arrow): a local file's, or a remote range's
    mapped = [not is_uri(r.path) or r.start is not None for r in ranges]

    def payloads_of(task: int, folder: str):
        """The range a chunk's payloads are read from: a remote one fetched (ranged GETs) into a
        local file in `folder` at the same offsets when its first chunk comes, and mapped as a
        local range."""
        if is_uri(ranges[task].path):
            ranges[task] = _local_copy(ranges[task], Path(folder) / f"range-{task}")
        return ranges[task]

    def packets():
        for rows in batches:
            cols = rows.select(["task", "chunk", "chunks", "last", "top", "frames"]).to_pydict()  # not the data
            data = rows.column("data")
            for i, (task, chunk) in enumerate(zip(cols["task"], cols["chunk"], strict=True)):
                if chunk < 0:
                    metas.append((task, cols["last"][i], cols["top"][i]))
                    numbering.meta(task, cols["frames"][i])
                    ready = order.meta(task, cols["chunks"][i])
                else:
                    ready = order.add(task, chunk, data[i].as_buffer())
                yield from ready
        yield from order.finish()

    def batches_in_order(folder: str):
        for task, d in packets():  # a chunk's Arrow IPC bytes (a pyarrow Buffer, or bytes read back from a spill)
            # with the range its payloads are read from (scan(refs=True))
            batch = numbering.fix(task, pa.ipc.read_record_batch(pa.py_buffer(d), schema))
            yield (batch, payloads_of(task, folder)) if mapped[task] else batch

    state = states[part] if states is not None else None
    with tempfile.TemporaryDirectory(prefix="kafkawire-task-", dir=_local_dir()) as own:
        spill = Spill(Path(own) / "rows.arrow")
        faults: list = []
        lander = native.lander(
            [],
            ports=ports,
            columns=native_columns(),
            packets=lander_input(batches_in_order(own)),
            end=lambda: _end(metas),
            carry=True,
            state=state,
            tls_keylogs=tls_keylogs,
        )
        try:
            d = drain_carried(
                lander, own, tag, records=records, payloads=payloads, faults=faults, part=f"-{part:05d}", sink=spill
            )
        except BaseException:
            spill.close()
            raise
        topics = TopicNames(lander)
        names = {str(k): v for k, v in topics.topic_names.items()}
        engine = engine or ("land", part, "native")
        provisional = {t: n - d.final.get(t, 0) for t, n in d.total.items()}
        state = base64.b64encode(d.state).decode()
        result = [d.total, names, sorted(topics.unresolved), faults, list(engine), provisional, state]
        for table, date, prov, marked, data in spill.read():
            yield pa.RecordBatch.from_pydict(
                {"table": [table], "date": [date], "provisional": [prov], "marked": [marked], "data": [data]},
                schema=out,
            )
    yield pa.RecordBatch.from_pydict(
        {
            "table": [""],
            "date": [None],
            "provisional": [False],
            "marked": [False],
            "data": [json.dumps(result).encode()],
        },
        schema=out,
    )


def land_spark(
    captures,
    out,
    *,
    master: str | None = None,
    ports=(),
    records: bool = False,
    payloads: bool = True,
    spark=None,
    target_bytes: int = TARGET_BYTES,
    partitions: int | None = None,
    catalog: bool = True,
    engines: list | None = None,
    mode: str = "error",
    skipped: list | None = None,
    tls_keylogs=(),
):
    """Land `captures` under `out` with Spark; returns (rows per table, file faults).

    mode, skipped: as landing.local.land_local's (the tasks write into the run's staging directory,
    the driver commits it: landing.lake). tls_keylogs: key log texts (dissector.tls.read_keylogs),
    sent to every task with the key logs the captures' pcapng Decryption Secrets Blocks hold.

    Every task runs on the native core (installed on its worker, or the one ship() sends; the driver's
    build), or fails: NativeCoreMissing, one line, says why.  engines: a list to which each stage-2 task's report is added
    (stage, part, engine, origin, build, extension path, host; _task_engine)."""
    from dissector.files import capture_files
    from landing.lake import Lake

    # before the session: a refused directory costs no JVM
    run = Lake(out, mode).begin(capture_files(captures))
    if skipped is not None:
        skipped.extend(run.skipped)
    try:
        from dissector.tls import capture_keylogs

        keylogs = [*tls_keylogs, *capture_keylogs(run.files)]
        job = (master, ports, records, payloads, spark, target_bytes, partitions, catalog, engines, keylogs)
        return _land_run(run, *job)
    except BaseException:
        run.abort()
        raise


def _land_run(run, master, ports, records, payloads, spark, target_bytes, partitions, catalog, engines, keylogs):
    """land_spark's job: stage 1 scans the captures' ranges into connection buckets, stage 2
    dissects each bucket and hands its rows to Spark (persisted on the executors' disks), and
    Spark's Delta writer writes each table's files (landing.spark_delta); the run is committed as
    a local landing's is (landing.lake), each table's commit made by Spark."""
    from pyspark import StorageLevel

    from landing.carry import options_of
    from landing.keys import UNRESOLVED
    from landing.local import not_interrupted
    from landing.spark_delta import SparkDelta
    from landing.spark_rows import spark_schema

    spark = spark or session(master)
    lake = run.lake.uri
    if not run.files:
        run.abort()
        if catalog:
            register_tables(spark, lake)
        return {t: 0 for t in TABLES if records or t != "records"}, []
    sc = spark.sparkContext
    prev = _carried(run, options_of(ports, records, payloads))
    n = prev["buckets"] if prev else partitions or max(1, sc.defaultParallelism)
    tasks = plan(run.files, target_bytes, map_files=_on_executors(sc) if sc.defaultParallelism > 1 else None)
    ports = tuple(ports)
    state_dir = Path(run.state_dir, "spark")
    # the buckets' carried states travel with the tasks and come back in their results: the
    # workers need no folder of the driver's (the lake keeps them in its runs table)
    states = [(state_dir / f"bucket-{b}.bin").read_bytes() for b in range(n)] if prev else None

    ship = _ship_of(sc)
    keys = _part_keys(n)
    plain = [_plain(t) for t in tasks]
    scan = _remote(ship, "scan", "_scan_arrow", plain, n, keys)
    land = _remote(ship, "land", "_land_arrow", plain, ports, records, payloads, (run.id, states), keylogs, engine=True)
    stage1 = spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(scan, _STAGE1)
    # the shuffle moves a row per chunk; stage 2 puts a bucket's chunks back in capture order itself
    shuffled = stage1.repartition(n, "part")
    # a few ~1 MB chunks per Arrow batch into stage 2 and a few ~2 MB pieces of rows into each
    # table's write (Spark's default, 10,000 rows, would hand a task its whole bucket as one
    # batch); stage 2's rows cached a few to a batch, so that a table's write skips the other
    # tables' batches by their statistics
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": "4", "spark.sql.inMemoryColumnarStorage.batchSize": "4"}
    before = {k: spark.conf.get(k) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    rows = shuffled.mapInArrow(land, _STAGE2).persist(StorageLevel.DISK_ONLY)
    try:
        results = [json.loads(bytes(r.data)) for r in _collect(rows.where("table = ''").select("data"))]
        counts = {t: 0 for t in TABLES if records or t != "records"}
        names: dict[str, str] = {}
        faults: list[str] = []
        for total, nm, _, f, e, *_ in results:
            if engines is not None:
                engines.append(e)
            for t, k in total.items():
                counts[t] += k
            names.update(nm)
            faults.extend(f)
        not_interrupted(faults)
        _group_rows(rows, run)
        # placeholders named by another task's connections, or by an earlier run, named as the
        # rows go to Spark's writer; those nobody named yet stay pending (landing.lake)
        known = {**run.topic_names, **names}
        unresolved = {u for r in results for u in r[2]}
        fix = {u: known[u[len(UNRESOLVED) :]] for u in unresolved if u[len(UNRESOLVED) :] in known}
        left = unresolved - set(fix)
        delta = SparkDelta(spark, run.lake)
        added: dict[str, list[dict]] = {}
        provisional: list[str] = []
        for t in counts:
            if not counts[t]:
                continue
            final, prov = (
                rows.where(f"table = '{t}' AND provisional = {p}")
                .select("date", "marked", "data")
                .mapInArrow(_remote(ship, None, "_rows_arrow", t, fix), spark_schema(t))
                for p in ("false", "true")
            )
            # a write task per partition of the union: the provisional rows' files are those
            # of its second half (their part number), apart from the final rows'
            entries = delta.write(t, final.union(prov))
            ends = [e for e in entries if _write_task(e["path"]) >= n]
            expect = sum(r[5].get(t, 0) for r in results)
            if sum(_records(e) for e in ends) != expect:
                raise RuntimeError(f"kafkawire: Spark wrote {t}'s provisional rows apart from what stage 2 made")
            provisional += [f"{t}/{e['path']}" for e in ends]
            added[t] = entries
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
        rows.unpersist()

    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    for r in results:
        part = r[4][1]  # the task's report: (stage, part, ...)
        (state_dir / f"bucket-{part}.bin").write_bytes(base64.b64decode(r[6]))
    meta = {"buckets": n, "options": options_of(ports, records, payloads), "provisional": sorted(provisional)}
    (state_dir / "meta.json").write_text(json.dumps(meta))
    run.commit(
        counts,
        names=names,
        unresolved=left,
        paths=[f"{t}/{e['path']}" for t, es in added.items() for e in es] if left else [],
        remove=prev["provisional"] if prev else [],
        added=added,
        committer=delta.commit,
    )
    if catalog:
        register_tables(spark, lake, counts)
    return counts, faults


def _write_task(path: str) -> int:
    """The write task a file of Spark's writer came from (part-<task>-<uuid>...)."""
    return int(Path(path).name.split("-")[1])


def _records(entry: dict) -> int:
    return json.loads(entry["stats"])["numRecords"] if entry.get("stats") else 0


def _group_rows(rows, run) -> None:
    """The group APIs' exchange rows the tasks handed over, into the run's staging (landing.lake
    makes the group tables from every run's)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from landing.lake import GROUP_ROWS, group_schema

    schema = group_schema()
    held = rows.where(f"table = '{GROUP_ROWS}'").select("data").collect()
    batches = [pa.ipc.read_record_batch(pa.py_buffer(bytes(r.data)), schema) for r in held]
    if batches:
        run.groups.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_batches(batches, schema=schema), run.groups / "rows-spark.parquet")


def _rows_arrow(batches, table: str, fix: dict):
    """A table's rows out of stage 2's (mapInArrow): each batch's Arrow IPC bytes read back, its
    placeholders named (`fix`, only where the task marked some), its date put back, in the types
    Spark takes (landing.spark_rows)."""
    import pyarrow as pa

    from landing.names import resolve_table
    from landing.spark_rows import arrow_schema, to_arrow

    schema, target = SCHEMAS[table], arrow_schema(table)
    for b in batches:
        dates, marks, data = b.column("date").to_pylist(), b.column("marked").to_pylist(), b.column("data")
        for i, date in enumerate(dates):
            rows = pa.ipc.read_record_batch(data[i].as_buffer(), schema)
            if fix and marks[i]:
                rows = resolve_table(rows, fix)[0]
            rows = rows.append_column(PARTITION, pa.array([date] * rows.num_rows, pa.string()))
            yield to_arrow(rows, target)


def _carried(run, options: dict) -> dict | None:
    """What the lake's previous landing by Spark carried (its bucket count, options, provisional
    files), to continue its open connections; None to start afresh.  A state the local engine
    carried cannot be split by bucket: those connections are cut here (one line says so)."""
    from landing.carry import STATE, check_options, cut

    state = Path(run.state_dir)
    cut(state / STATE, "(local engine) ")
    meta = state / "spark" / "meta.json"
    if not meta.exists():
        return None
    prev = json.loads(meta.read_text())
    check_options(run.lake.given, prev["options"], options)
    return prev


def _collect(data) -> list:
    """data.collect() (an RDD or a DataFrame); a task's kafkawire failure (NativeCoreMissing, the
    booter's) as its one line."""
    try:
        return data.collect()
    except Exception as e:
        line = re.search(r"(?:NativeCoreMissing|RuntimeError): (kafkawire: [^\n]*)", str(e))
        if line is None:
            raise
        raise NativeCoreMissing(line.group(1)) from None


def register_tables(spark, out: str, tables=TABLES) -> None:
    """kafka_<table> in the session catalog: the lake's Delta tables (delta-spark reads them through
    their logs, so a table is always one committed version), made anew after each landing."""
    from landing.lake import Lake

    lake = Lake(out)
    for t in tables:
        if lake.delta(lake.table_uri(t)) is None:
            continue
        spark.sql(f"DROP TABLE IF EXISTS kafka_{t}")
        spark.sql(f"CREATE TABLE kafka_{t} USING delta LOCATION '{lake.spark_uri(t)}'")


# ---------------------------------------------------------------- data source


def register(spark) -> None:
    """Make `spark.read.format("kafkawire")` available in this session; its read tasks run on the
    native core (a cluster's executors get it as land_spark's do: ship())."""
    sc = spark.sparkContext
    if not sc.master.startswith("local"):
        ship(spark)
    ship_ = _ship_of(sc)
    spark.dataSource.register(source_classes(_booter(ship_), check=ship_[1] is not None))


def __getattr__(name):
    if name == "KafkawireDataSource":  # for spark.dataSource.register(KafkawireDataSource) by hand
        return source_classes(_booter((None, None)), check=False)
    raise AttributeError(name)
