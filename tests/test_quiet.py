"""--quiet on every subcommand: no progress bar and no summary line, while the data output and
the error lines stay as they are. The progress bar is drawn only when stderr is a terminal, so
stderr is a real pseudo-terminal here and stdout a pipe, as in `kafkawire dissect x.pcap > out`."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KPY = str(ROOT / "samples" / "kafka-python-basic.pcap")
OLD = str(ROOT / "samples" / "old-protocol.pcap")


def kafkawire(*argv, cwd=None) -> tuple[int, str, str]:
    """Run the command with stderr on a pty: (exit status, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="120", TERM="xterm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkawire", *map(str, argv)],
        cwd=cwd or ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    err = bytearray()
    out = bytearray()
    deadline = time.monotonic() + 300
    open_fds = {master, proc.stdout.fileno()}
    while open_fds and time.monotonic() < deadline:  # bounded: both ends drained or the deadline
        ready, _, _ = select.select(list(open_fds), [], [], 1.0)
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the pty's end reads EIO once the child has closed it
                chunk = b""
            if not chunk:
                open_fds.discard(fd)
            else:
                (err if fd == master else out).extend(chunk)
    os.close(master)
    rc = proc.wait(timeout=60)
    return rc, out.decode(), err.decode(errors="replace")


def test_dissect_quiet_drops_the_progress_bar_not_the_lines():
    rc, out, err = kafkawire("dissect", KPY)
    assert rc == 0 and "dissecting" in err and "packets" in err  # the bar, on the terminal
    rc_q, out_q, err_q = kafkawire("dissect", KPY, "--quiet")
    assert rc_q == 0 and err_q == ""
    assert out_q == out and len(out.splitlines()) == 34


def test_land_quiet_drops_bar_and_summary(tmp_path):
    rc, out, err = kafkawire("land", KPY, "--out", tmp_path / "a")
    assert rc == 0 and "landing" in err
    assert out == (
        f"landed in {tmp_path / 'a'}: 34 exchanges, 1 errors, 4 batches, 9 connections, 0 anomalies, "
        "1 group_generations, 2 group_assignments\n"
    )
    rc_q, out_q, err_q = kafkawire("land", KPY, "--out", tmp_path / "b", "--quiet")
    assert (rc_q, out_q, err_q) == (0, "", "")
    from landing import dataset

    assert dataset(tmp_path / "b", "exchanges").count_rows() == 34  # the tables are the data output


def test_report_quiet(tmp_path):
    rc, out, err = kafkawire("report", KPY, "--format", "json")
    assert rc == 0 and "landing" in err  # captures are landed first, with a bar
    rc_q, out_q, err_q = kafkawire("report", KPY, "--format", "json", "--quiet")
    assert rc_q == 0 and err_q == "" and out_q == out and '"MEMBER_ID_REQUIRED"' in out
    html = tmp_path / "r.html"
    rc_h, out_h, err_h = kafkawire("report", KPY, "--html", html, "--quiet")
    assert (rc_h, out_h, err_h) == (0, "", "") and "<svg" in html.read_text()


def test_replay_accepts_quiet():
    rc, out, err = kafkawire("replay", OLD, "--to", "127.0.0.1:9", "--dry-run")
    rc_q, out_q, err_q = kafkawire("replay", OLD, "--to", "127.0.0.1:9", "--dry-run", "--quiet")
    assert rc == rc_q == 0 and err_q == "" and out_q == out and out.startswith("22 connection(s)\n")


@pytest.mark.parametrize("cmd", [["dissect"], ["land", "--out", "x"], ["report"]])
def test_quiet_keeps_error_lines(cmd, tmp_path):
    missing = tmp_path / "missing.pcap"
    argv = [cmd[0], missing, *cmd[1:], "--quiet"]
    rc, out, err = kafkawire(*argv, cwd=tmp_path)
    assert rc == 2 and out == ""
    assert err.strip() == f"kafkawire: cannot read {missing}: No such file or directory"


def test_every_subcommand_help_has_examples_and_quiet(capsys):
    from kafkawire.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        text = p.format_help()
        assert "examples:\n  kafkawire " + name in text, name
        if name != "apis":
            assert "--quiet" in text, name
