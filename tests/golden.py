"""Golden outputs: what `kafkawire dissect` and `kafkawire land` give for every bundled sample.

tests/golden/ holds, per sample, `dissect` in text, jsonl, jsonl --raw --records and jsonl
--records --no-payloads, and the tables `land --records` writes (each table's rows, sorted, as
JSON), xz-compressed. They were first made by the Python pipeline before kafkawire moved to one
engine, where it and the native core agreed, so the move is held to the outputs users had.
An output that changes on purpose is made anew with `python -m tests.golden` (then review the diff).
"""

from __future__ import annotations

import io
import json
import lzma
import sys
import tempfile
from contextlib import redirect_stderr
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
DISSECT = {
    "text": ["--format", "text"],
    "jsonl": ["--format", "jsonl"],
    "raw": ["--format", "jsonl", "--raw", "--records"],
    "nopay": ["--format", "jsonl", "--records", "--no-payloads"],
}


def dissect(path: Path, mode: str) -> bytes:
    """`kafkawire dissect` of one sample, in this process (its stdout bytes)."""
    from kafkawire.cli import main

    buf = io.BytesIO()
    out = io.TextIOWrapper(buf, encoding="utf-8", newline="")
    old = sys.stdout
    sys.stdout = out
    try:
        with redirect_stderr(io.StringIO()):
            rc = main(["dissect", str(path), "--port", "29092", "--quiet", *DISSECT[mode]])
        out.flush()
    finally:
        sys.stdout = old
    assert rc == 0, (path.name, mode, rc)
    return buf.getvalue()


def tables(out: Path) -> dict:
    """Every landed table as {"columns": sorted names, "rows": each row's values as JSON, sorted}."""
    from landing.writer import dataset

    res = {}
    for t in sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")):
        tab = dataset(out, t).to_table()
        cols = sorted(tab.column_names)
        rows = sorted(json.dumps([repr(r[c]) for c in cols]) for r in tab.select(cols).to_pylist())
        res[t] = {"columns": cols, "rows": rows}
    return res


def land(path: Path, *, records: bool = True) -> dict:
    from kafkawire.cli import main

    with tempfile.TemporaryDirectory(prefix="kafkawire-golden-") as tmp:
        argv = ["land", str(path), "--port", "29092", "--out", tmp, "--quiet"] + (["--records"] if records else [])
        with redirect_stderr(io.StringIO()):
            assert main(argv) == 0, path.name
        return tables(Path(tmp))


def golden(name: str) -> bytes:
    return lzma.decompress((GOLDEN / f"{name}.xz").read_bytes())


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for path in SAMPLES:
        for mode in DISSECT:
            (GOLDEN / f"{path.stem}.{mode}.xz").write_bytes(lzma.compress(dissect(path, mode), preset=9))
        blob = json.dumps(land(path), indent=0, sort_keys=True).encode()
        (GOLDEN / f"{path.stem}.land.xz").write_bytes(lzma.compress(blob, preset=9))
        print(path.name)


if __name__ == "__main__":
    main()
