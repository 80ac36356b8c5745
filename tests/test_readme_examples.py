"""The documentation's example output stays true: every ```console block of README.md and of
docs/*.md is re-run on the bundled samples and the lines it shows must be what kafkawire prints
now (`...` stands for lines left out; the lines between two `...` must be consecutive in the real
output). The pages run in order, README.md first and then docs/ by name, in one directory: the
README's `land` writes the tables the `report` examples read. The comparison with tshark
(docs/comparison.md, and the README's table) quotes coverage figures this file measures again;
docs/tables.md carries the tables' schemas as landing.schemas renders them."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PLACEHOLDER = "127.0.0.1:9092"  # the README's broker address; a live example gets a real one


class Where(str):
    """A command as written, remembering the page it is on."""

    def __new__(cls, cmd: str, page: str):
        s = super().__new__(cls, cmd)
        s.page = page
        return s


def pages() -> list[Path]:
    """README.md, then every page of docs/ by name: the order the examples run in."""
    return [README, *sorted(DOCS.glob("*.md"))]


def examples(page: Path | None = None) -> list[tuple[str, list[str]]]:
    """(command, shown output lines) for each ```console block of `page` (default: every page), in order;
    the command names its page (`PAGE: kafkawire ...`) in a failure's message."""
    out = []
    for p in [page] if page else pages():
        for b in re.findall(r"^```console\n(.*?)^```$", p.read_text(), flags=re.S | re.M):
            lines = b.rstrip("\n").split("\n")
            assert lines[0].startswith("$ kafkawire "), f"{p.name}: {lines[0]}"
            out.append((Where(lines[0][2:], p.name), [line.rstrip() for line in lines[1:]]))
    return out


def live(cmd: str) -> bool:
    """A replay that talks to a broker (a dry run opens no socket)."""
    return cmd.startswith("kafkawire replay") and "--dry-run" not in cmd


def run(cmd: str, cwd: Path, to: str | None = None) -> list[str]:
    argv = shlex.split(cmd)
    argv[0] = str(Path(sys.executable).with_name("kafkawire"))
    if to:
        argv = [to if a == PLACEHOLDER else a for a in argv]
    env = {**os.environ, "COLUMNS": "80"}  # `apis` draws its table as wide as the terminal
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-2000:]}"
    lines = [line.rstrip() for line in r.stdout.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def assert_shown(cmd: str, shown: list[str], got: list[str]) -> None:
    """`shown` with its `...` gaps is `got`: chunks in order, each contiguous, anchored at the
    start and end unless a `...` is there."""
    chunks, cur = [], []
    for line in shown:
        if line == "...":
            chunks.append(cur)
            cur = []
        else:
            cur.append(line)
    chunks.append(cur)
    pos = 0
    for i, chunk in enumerate(chunks):
        if not chunk:
            continue
        anchored = i == 0
        starts = [pos] if anchored else range(pos, len(got) - len(chunk) + 1)
        at = next((s for s in starts if got[s : s + len(chunk)] == chunk), None)
        if at is None:
            near = "\n".join(got[pos : pos + len(chunk) + 3])
            raise AssertionError(
                f"{getattr(cmd, 'page', 'README.md')} `{cmd}`: these lines are no longer printed:\n"
                + "\n".join(chunk)
                + f"\n--- it prints (from line {pos}):\n{near}"
            )
        pos = at + len(chunk)
    if chunks[-1]:
        where = getattr(cmd, "page", "README.md")
        assert pos == len(got), f"{where} `{cmd}`: prints {len(got) - pos} more lines than shown (end with `...`)"


@pytest.fixture
def workdir(tmp_path) -> Path:
    """Commands run as from the repo root (samples/...) but write their output (tables/) in a temp dir."""
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    return tmp_path


def test_readme_has_examples_of_every_command():
    assert {c.split()[1] for c, _ in examples(README)} == {"dissect", "apis", "land", "report", "replay"}
    assert any(live(c) for c, _ in examples()) and any("--dry-run" in c for c, _ in examples())


def test_docs_pages_are_linked_from_the_readme():
    readme = README.read_text()
    for page in sorted(DOCS.glob("*.md")):
        assert f"](docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 250


def test_tables_page_documents_every_column():
    from landing.schemas import markdown

    assert markdown() in (DOCS / "tables.md").read_text(), (
        "docs/tables.md's table schemas are stale: paste landing.schemas.markdown()"
    )


def test_readme_examples_print_what_is_shown(workdir):
    done = 0
    for cmd, shown in examples():  # in order: `land` writes the tables `report` reads
        if not live(cmd):
            assert_shown(cmd, shown, run(cmd, workdir))
            done += 1
    assert done >= 8


def _mask(lines: list[str]) -> list[str]:
    """Replayed latencies (after the `/`) change from run to run; the columns move with them."""
    return [" ".join(re.sub(r"/\d+(\.\d+)?", "/#", line).split()) for line in lines]


KAFKA_PLACEHOLDER = "127.0.0.1:9093"  # a live example against Apache Kafka rather than Tansu


@pytest.mark.broker
def test_readme_live_replay_example(broker, workdir, request):
    done = 0
    for cmd, shown in examples():
        if live(cmd):
            if KAFKA_PLACEHOLDER in cmd:
                kafka = request.getfixturevalue("apache_kafka").address
                cmd_run = cmd.replace(KAFKA_PLACEHOLDER, PLACEHOLDER)
                assert_shown(cmd, _mask(shown), _mask(run(cmd_run, workdir, to=kafka)))
            else:
                assert_shown(cmd, _mask(shown), _mask(run(cmd, workdir, to=broker)))
            done += 1
    assert done >= 2


def test_readme_comparison_quotes_measured_tshark_coverage():
    if shutil.which("tshark") is None:
        pytest.skip("no tshark")
    from tests import tshark_coverage

    text = " ".join((DOCS / "comparison.md").read_text().split())
    readme = " ".join(README.read_text().split())
    m = tshark_coverage.measure()
    assert f"all {m['pairs']} (api key, version) pairs" in readme and f"knows {m['tshark_known']} of the" in readme
    # every pair we encode from Kafka's specs decodes again in kafkawire; tshark's figures as quoted
    assert f"{m['pairs']} (api key, version) pairs of {m['apis']} APIs" in text
    assert f"tshark 4.0.17 knows {m['tshark_known']} of them ({m['tshark_known_apis']} APIs)" in text
    assert f"marks the other {m['tshark_unsupported']} unsupported or unknown" in text
    assert f"{m['tshark_malformed']} of the pairs it knows" in text
    s = tshark_coverage.samples(tshark_coverage.real_samples())
    assert s["kafkawire_undecodable"] == 0
    assert (
        f"{s['pairs']} distinct (api key, version) pairs in {s['requests']} requests; tshark leaves "
        f"{len(s['undecoded'])} pairs ({s['requests_undecoded']} requests) undecoded"
    ) in text


def test_every_spec_pair_decodes_in_kafkawire(tmp_path):
    """The synthetic capture the tshark figures come from decodes whole in kafkawire."""
    import dissector
    from tests import tshark_coverage

    pairs = tshark_coverage.build(tmp_path / "every.pcap")
    got = [x for x in dissector.dissect([str(tmp_path / "every.pcap")]) if x.type == "exchange"]
    assert len(got) == len(pairs) == 368
    assert {x.status for x in got} == {"ok"}
    assert sorted((x.api_key, x.api_version) for x in got) == sorted(pairs)
