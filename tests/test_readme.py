"""The README's two set-up commands, as a newcomer runs them: a fresh clone with nothing beside it
(no ../shared), a fresh virtual environment. Slow (a pip install and the whole test run): `.ci/run` runs it
after the README's test command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def commands() -> list[str]:
    """The indented command lines of the README's "Start here" section, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Start here", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]


def test_readme_commands_on_a_fresh_clone(tmp_path):
    install, tests = commands()
    assert install.startswith("pip install") and "kafkawire dissect samples/" in install
    assert tests == "python -m pytest -q"
    clone = tmp_path / "kafkawire"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    # no ../shared beside the clone: the suite must pass without the optional material too (the
    # default run, beside this checkout, has it when the machine does)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{tmp_path / 'venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(tmp_path / "venv" / "bin" / "python")
    r = subprocess.run(["bash", "-c", install], cwd=clone, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if re.match(r"\d{4}-\d\d-\d\d \d", line)]  # after pip's chatter
    assert len(lines) == 34 and sum(" Produce v9 " in line for line in lines) == 2
    assert any("errors=MEMBER_ID_REQUIRED" in line for line in lines)
    # pip built the native core (cargo is on this machine): what a newcomer runs is the fast path
    r = subprocess.run(
        ["python", "-c", "import dissector.native as n; n.core()"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run(["bash", "-c", tests], cwd=clone, env=env, capture_output=True, text=True, timeout=3000)
    tail = r.stdout.strip().splitlines()[-1]
    assert r.returncode == 0, r.stdout[-3000:]
    assert re.search(r"\d+ passed", tail) and not re.search(r"\d+ (failed|error)", tail)
