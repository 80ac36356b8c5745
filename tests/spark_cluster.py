"""A real Spark standalone cluster on 127.0.0.1 for tests and benchmarks: pyspark's own Master and
Workers (spark-class, as $SPARK_HOME/sbin/start-*.sh run them), stopped by PID.

    with Cluster(tmp, cores=1, workers=2) as c:   # c.url = spark://127.0.0.1:<port>
        run a driver with PYSPARK_PYTHON=deps_only_python(tmp / "py") ...
        c.task_lines()                         # the executors' "kafkawire: task ..." log lines

deps_only_python() makes the Python a worker of a fresh cluster has: kafkawire's dependencies but
not kafkawire (a venv that sees this environment's site-packages through a .pth file, which does not
run the .pth files there: the editable install's finder is one of them).

Cluster(own_dirs=True): each Worker as on a machine of its own, sharing no folder with the driver or
the other Worker: Worker i gets tmp/worker-i/ (its SPARK_WORKER_DIR work/, SPARK_LOCAL_DIRS local/,
TMPDIR tmp/), and with private=True (private_tmp_works()) it runs in a mount namespace of its own
(unshare) where that folder *is* /tmp and the paths in `hide` are empty tmpfs mounts: the real /tmp
(the driver's temp folders, pytest's) and those paths do not exist for its executors and their
Python workers. A Python for such workers: deps_only_python(tmp / "worker-i" / "py") for each i,
named /tmp/py/bin/python (WORKER_PYTHON) in the driver's spark.pyspark.python.
"""

from __future__ import annotations

import os
import site
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deps_only_python(where: Path) -> str:
    """A Python with this environment's packages but no kafkawire; its path."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    py = where / "bin" / "python"
    lib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    Path(lib, "kafkawire_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    probe = "import importlib.util as u, pandas, pyarrow, cramjam, orjson, crc32c; print(u.find_spec('dissector'))"
    r = subprocess.run([str(py), "-c", probe], cwd=where, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "None", (r.stdout, r.stderr)
    return str(py)


WORKER_PYTHON = "/tmp/py/bin/python"  # a private Worker's Python (its tmp/worker-i/py), as it sees it


def private_tmp_works() -> bool:
    """Whether this machine lets an unprivileged process make a user and mount namespace of its own
    and bind-mount a folder there (unshare -rm); what Cluster(private=True) needs."""
    probe = 'd=$(mktemp -d) || exit 1; mount --bind "$d" "$d" && mount -t tmpfs none "$d"; r=$?; rmdir "$d"; exit $r'
    try:
        r = subprocess.run(["unshare", "-rm", "sh", "-c", probe], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def spark_env(**extra) -> dict:
    """The environment for the cluster's daemons and its drivers: loopback only, no PYTHONPATH of ours."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "SPARK_HOME")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return {**env, **extra}


class Cluster:
    """Master and `workers` Workers (`cores` and `memory` each) on 127.0.0.1; ready when every Worker
    has registered."""

    def __init__(
        self,
        tmp: Path,
        cores: int = 2,
        memory: str = "1g",
        wait: float = 90,
        workers: int = 1,
        pin: bool = False,
        own_dirs: bool = False,
        private: bool = False,
        hide: tuple = (),
    ):
        """pin: Worker i (with the executors and Python workers it starts) runs on CPU i only (taskset),
        as on a machine of its own with one core; the Master and drivers are not pinned.
        own_dirs: each Worker's work, local and temp folders its own (tmp/worker-i/); private: and
        the rest of /tmp, and the paths in `hide`, out of its sight (see the module's docstring)."""
        import pyspark

        self.tmp = Path(tmp)
        self.home = Path(pyspark.__file__).parent
        self.work = self.tmp / "work"
        self.cores, self.memory, self.wait, self.workers, self.pin = cores, memory, wait, workers, pin
        self.own_dirs, self.private, self.hide = own_dirs or private, private, tuple(map(str, hide))
        # where each Worker's executors keep their folders (work/app-*/<executor>/), as seen from here
        self.work_dirs = [self.root(i) / "work" for i in range(workers)] if self.own_dirs else [self.work]
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Cluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        env = spark_env(
            SPARK_HOME=str(self.home),
            SPARK_WORKER_DIR=str(self.work),
            SPARK_LOG_DIR=str(self.tmp),
            # the daemons only route messages: C1 and the serial collector start them sooner
            SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        )
        web = ["--webui-port", str(free_port())]
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port), *web]
        self._run("master", master, env, "I have been elected leader")
        for i in range(self.workers):
            worker = ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1"]
            worker += ["--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port())]
            wenv, wrap = env, []
            if self.own_dirs:
                root = self.root(i)
                for d in ("work", "local", "tmp"):
                    (root / d).mkdir(parents=True, exist_ok=True)
                seen = Path("/tmp") if self.private else root  # the folder as the Worker sees it
                wenv = {**env, "SPARK_WORKER_DIR": str(seen / "work"), "SPARK_LOCAL_DIRS": str(seen / "local")}
                wenv["TMPDIR"] = str(seen / "tmp")
                if self.private:
                    wrap = self._private(root)
            ready = "Successfully registered with master"
            self._run(f"worker-{i}", worker, wenv, ready, cpu=i if self.pin else None, wrap=wrap)

    def root(self, i: int) -> Path:
        """Worker i's own folder (own_dirs), as seen from here."""
        return self.tmp / f"worker-{i}"

    def _private(self, root: Path) -> list:
        """The command prefix that runs a Worker in a user and mount namespace of its own, where
        `root` is /tmp and every path of `hide` an empty tmpfs (a real /tmp's contents, the
        driver's folders among them, are not there for it)."""
        script = 'mount --bind "$1" /tmp || exit 97; shift\n'
        script += 'while [ "$1" != -- ]; do mount -t tmpfs none "$1" || exit 98; shift; done; shift\nexec "$@"'
        hide = [h for h in self.hide if not (h == "/tmp" or h.startswith("/tmp/"))]  # /tmp is hidden already
        return ["unshare", "-rm", "sh", "-c", script, "sh", str(root), *hide, "--"]

    def pids(self) -> list[int]:
        """The daemons' process ids (Master first)."""
        return [p.pid for p in self.procs]

    def _run(self, name: str, args: list, env: dict, ready: str, cpu: int | None = None, wrap=()) -> None:
        log = self.tmp / f"{name}.log"
        pin = [] if cpu is None else ["taskset", "-c", str(cpu % (os.cpu_count() or 1))]
        cmd = [*pin, *wrap, str(self.home / "bin" / "spark-class"), *args]
        with open(log, "wb") as out:
            self.procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + self.wait
        while ready not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or self.procs[-1].poll() is not None:
                raise RuntimeError(f"spark {name} did not start: " + log.read_text(errors="replace")[-2000:])
            time.sleep(0.2)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.procs.clear()

    def apps(self) -> set[str]:
        return {p.name for w in self.work_dirs if w.is_dir() for p in w.glob("app-*")}

    def executor_dirs(self, apps=None) -> list[Path]:
        """The executors' folders (work/<app>/<executor id>/) of `apps`, else all, as seen from here."""
        wanted = self.apps() if apps is None else apps
        return [d for w in self.work_dirs for app in sorted(wanted) for d in sorted((w / app).glob("*")) if d.is_dir()]

    def task_lines(self, apps=None) -> list[str]:
        """The "kafkawire: task ..." lines of the executors' stderr logs (of `apps`, else all)."""
        out = []
        for d in self.executor_dirs(apps):
            err = d / "stderr"
            if err.is_file():
                out += [line for line in err.read_text(errors="replace").splitlines() if "kafkawire: task " in line]
        return out


def _drive(url: str, out: str, rotated: str, whole: str, source: str, *captures: str) -> int:
    """A driver (run as a script, outside the checkout; one application): `kafkawire land --engine spark`
    of `captures` into out/cli (the console script's main, in this process), land_spark of `rotated`
    into out/land and of the single file `whole` cut in ~4 KB byte ranges into out/split, then every
    table of `source` read by the `kafkawire` data source into
    out/<table>.pkl; out/run.json holds the exit status, counts, faults and land_spark's engine reports."""
    import json
    from importlib.metadata import entry_points

    from landing.schemas import TABLES
    from landing.spark import land_spark, register, session

    (cli,) = entry_points(group="console_scripts", name="kafkawire")
    status = cli.load()(["land", *captures, "--out", os.path.join(out, "cli"), "--engine", "spark", "--master", url])
    spark = session(url)  # the CLI's session
    try:
        engines: list = []
        counts, faults = land_spark([rotated], os.path.join(out, "land"), spark=spark, engines=engines, catalog=False)
        split = land_spark([whole], os.path.join(out, "split"), spark=spark, engines=engines, target_bytes=4096)
        faults += split[1]
        register(spark)
        for t in TABLES:
            spark.read.format("kafkawire").option("table", t).load(source).toPandas().to_pickle(Path(out, f"{t}.pkl"))
        run = {"status": status, "counts": counts, "faults": faults, "engines": engines}
        Path(out, "run.json").write_text(json.dumps(run))
    finally:
        spark.stop()
    return status


if __name__ == "__main__":
    sys.exit(_drive(*sys.argv[1:]))
