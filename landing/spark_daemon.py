"""The Spark engine's Python daemon in local mode: pyspark.daemon, with the workers' imports done once.

PySpark starts `python -m <spark.python.daemon.module> pyspark.worker` once per job and forks every
Python worker from it (pyspark.daemon.manager).  landing.spark.session() names this module there in
local mode, when the workers' Python resolves it to the driver's own copy (landing.spark._daemon_conf).
Before handing over to pyspark.daemon.manager() it

1. imports pyspark (and py4j) from the installed packages, not from the pyspark.zip (and py4j zip)
   that Spark puts first on the workers' PYTHONPATH, when they are the same version: zipimport never
   caches bytecode, so every job compiled pyspark again (0.35 s of CPU before the first task);
2. imports what every task imports (pyspark.worker, the dissector, the landing modules, pyarrow,
   pandas, which pyarrow loads on its first array of Python objects), so each forked worker starts
   with them (~0.5 s of imports per worker otherwise) and its garbage collector skips them (gc.freeze);
3. wraps pyspark.daemon.worker so that a worker whose job ended under it ends without a traceback.

Fork safety: pyspark.daemon imports the worker module only after the fork because pandas and
pyarrow start threads on import, and a thread does not survive a fork (a lock it held stays held
in the child).  They are two: jemalloc's background purger (pyarrow bundles jemalloc, though
Arrow's default pool is mimalloc), configured off here, and OpenBLAS's pool (numpy), which follows
OMP_NUM_THREADS (Spark sets it to the task's cores: 1 in local mode) and is kept to one thread
when nothing sets it.  If the process runs any thread but its own once the imports are done, or
anything above fails, it runs PySpark's own daemon instead (exec python -m pyspark.daemon):
slower, never unsafe.
"""

from __future__ import annotations

import os
import sys

# what every task imports; the worker module (argv[1], as pyspark.daemon reads it) is added first
_PRELOAD = (
    "pyspark.daemon",
    "landing.spark",
    "landing.writer",
    "landing.carry",
    "landing.keys",
    "dissector.native",
    "dissector.ranges",
    "protocol.registry",
    "protocol.records",
    "protocol.errors",
    "pyarrow.parquet",
    "pandas",
)


def _same_file(zip_path: str, member: str, path: str) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(zip_path) as z, open(path, "rb") as f:
            return z.read(member) == f.read()
    except (OSError, KeyError, zipfile.BadZipFile):
        return False


def _installed_pyspark() -> None:
    """Drop pyspark.zip and py4j-*-src.zip from sys.path when the installed package of the same name
    has the same version.py: the two are then the same release, and the installed one has bytecode."""
    from importlib.machinery import PathFinder

    drop = []
    for entry in sys.path:
        name = os.path.basename(entry)
        pkg = (
            "pyspark"
            if name == "pyspark.zip"
            else "py4j"
            if name.startswith("py4j-") and name.endswith(".zip")
            else None
        )
        if pkg is None:
            continue
        spec = PathFinder.find_spec(pkg, [p for p in sys.path if not p.endswith(".zip")])
        if (
            spec is not None
            and spec.origin
            and _same_file(entry, f"{pkg}/version.py", os.path.join(os.path.dirname(spec.origin), "version.py"))
        ):
            drop.append(entry)
    sys.path[:] = [p for p in sys.path if p not in drop]


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _no_threads() -> dict:
    """Settings under which pyarrow and numpy load without starting a thread (read once, as they load)."""
    env = {
        "JE_ARROW_MALLOC_CONF": ",".join(
            filter(None, (os.environ.get("JE_ARROW_MALLOC_CONF"), "background_thread:false"))
        )
    }
    if "OPENBLAS_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        env["OPENBLAS_NUM_THREADS"] = "1"  # a pool of one is no thread; a set count is the user's (or Spark's)
    return env


def _preload(worker: str) -> None:
    import importlib

    quiet = _no_threads()
    saved = {k: os.environ.get(k) for k in quiet}
    os.environ.update(quiet)  # restored below: the workers' environment stays Spark's
    out = os.dup(1)  # stdout is the pipe the daemon reports its port on: nothing else may reach it
    os.dup2(2, 1)
    try:
        for name in (worker, *_PRELOAD):
            importlib.import_module(name)
    finally:
        sys.stdout.flush()
        os.dup2(out, 1)
        os.close(out)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _default_daemon(why: str) -> None:
    print(f"kafkawire: {why}; running pyspark.daemon", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])


def main() -> None:
    if not os.path.isdir("/proc/self/task"):  # no way to count threads before the fork
        _default_daemon("cannot check threads on this platform")
    worker = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark") else "pyspark.worker"
    try:
        _installed_pyspark()
        _preload(worker)
    except Exception as e:  # noqa: BLE001 - any failure: PySpark's own daemon, which imports nothing early
        _default_daemon(f"preloading failed ({type(e).__name__}: {e})")
    n = _threads()
    if n != 1:
        _default_daemon(f"{n - 1} threads started while preloading")
    import gc

    # the preloaded objects move to a permanent generation: the workers' collections neither scan
    # them nor write to their pages, which stay shared (-0.4 s of worker CPU per job in bench_spark)
    gc.freeze()
    import pyspark.daemon

    pyspark.daemon.worker = _quiet_when_gone(pyspark.daemon.worker)
    pyspark.daemon.manager()


def _quiet_when_gone(worker):
    """pyspark.daemon.worker, ending quietly when the JVM has closed the worker's socket.

    A job that ends while a worker still writes (a task's one-line fault ends the land; Ctrl-C) closes
    the socket under it, and PySpark's manager prints the worker's BrokenPipeError as a traceback on
    the daemon's stderr, which in local mode is the user's terminal. Nobody reads the socket any more:
    the worker ends as one that failed (code 1: the manager closes it and forks no reuse of it)."""

    def run(sock, authenticated):
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1

    return run


if __name__ == "__main__":
    main()
