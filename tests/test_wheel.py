"""`pip wheel .` builds a binary wheel that installs and runs where there is no Rust toolchain:
the wheel is built from a copy of the working tree (as a clone has it: tracked and new files,
nothing ignored such as build/ or a built extension), installed into a fresh virtual
environment with no cargo or rustc on PATH, and run. Slow (it builds the crate): `.ci/run`
runs it after the default test run.

The crate builds into $CARGO_TARGET_DIR when set, else native/target (the cache an editable
install fills), so only kafkawire's own crate is compiled again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "kafka-python-basic.pcap"
pytestmark = pytest.mark.slow


def source_copy(dest: Path) -> Path:
    """The working tree's files a clone would have (tracked or new, not ignored), copied to dest."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        src = ROOT / name
        if src.is_file():  # a tracked file deleted in the working tree is not there
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def without_toolchain(path: str) -> str:
    """PATH without the folders that hold cargo or rustc (rustup's ~/.cargo/bin, a distribution's /usr/bin)."""
    keep = []
    for d in path.split(os.pathsep):
        if d and not any(os.path.exists(os.path.join(d, tool)) for tool in ("cargo", "rustc")):
            keep.append(d)
    return os.pathsep.join(keep)


# dissector._native's names in a wheel (built without the `test-hooks` feature)
SHIPPED = {
    *("Engine", "EngineConfig", "Limits", "Protocol", "Items", "RangeScan"),
    *("ArrowColumn", "Taken", "Pending", "RowsState"),  # what the lander's methods return
    *("check_columns", "split_ranges", "count_frames", "bucket_of", "first_ts", "leading_secrets"),
    *("KeyLog", "internal_row", "internal_schemas", "internal_topics", "nested_payloads"),
    "metadata_topic_names",
}


def test_wheel_installs_and_runs_without_a_toolchain(tmp_path):
    if shutil.which("cargo") is None:
        pytest.skip("building the wheel needs cargo (rustup)")
    src = source_copy(tmp_path / "src")
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.setdefault("CARGO_TARGET_DIR", str(ROOT / "native" / "target"))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-w", str(dist)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = dist.glob("kafkawire-*.whl")
    assert "-none-any" not in wheel.name  # a binary wheel: the native core is in it

    # a fresh venv on a PATH without the toolchain: pip has nothing to build with
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "CARGO", "RUSTC")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{without_toolchain(env.get('PATH', ''))}"
    assert shutil.which("cargo", path=env["PATH"]) is None and shutil.which("rustc", path=env["PATH"]) is None
    py = str(venv / "bin" / "python")
    r = subprocess.run(
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stderr[-3000:]

    # run from an empty folder, so that nothing is imported from the source tree
    run = tmp_path / "run"
    run.mkdir()

    def sh(*argv: str) -> str:
        r = subprocess.run(argv, cwd=run, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout

    where = sh(py, "-c", "import dissector._native as n; print(n.__file__)").strip()
    assert Path(where).is_relative_to(venv), where
    assert where.endswith(".so")
    # a wheel's boundary is what shipped code calls: the test and bench hooks stay out
    exported = sh(py, "-c", "import dissector._native as n; print(' '.join(x for x in dir(n) if x[:2] != '__'))")
    assert set(exported.split()) == SHIPPED, exported

    lines = sh(str(venv / "bin" / "kafkawire"), "dissect", str(SAMPLE)).splitlines()
    assert len(lines) == 34 and sum(" Produce v9 " in line for line in lines) == 2
    assert any("errors=MEMBER_ID_REQUIRED" in line for line in lines)
    assert any("CreateTopics v7" in line and "topics=kpy-plain,kpy-gzip" in line for line in lines)

    out = sh(
        str(venv / "bin" / "kafkawire"), "dissect", "--format", "jsonl", "--records", "--api", "Produce", str(SAMPLE)
    )
    produces = [orjson.loads(line) for line in out.splitlines()]
    assert [(p["api_version"], p["client_id"]) for p in produces] == [(9, "kw-producer-none"), (9, "kw-producer-gzip")]
    (topic,) = produces[0]["request"]["TopicData"]
    (batch,) = topic["PartitionData"][0]["Records"]["batches"]
    assert topic["Name"] == "kpy-plain" and batch["codec"] == "none" and batch["record_count"] == 30
    first = batch["records"][0]
    assert first["key"] == "key-0" and first["value"].startswith("message 000000 kafkawire-sample-")
    assert first["headers"] == [["trace", "t0"], ["source", "kafkawire"]]
