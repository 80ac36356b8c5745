"""The notebooks run top to bottom on a bundled sample and compute what they claim."""
from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_notebook(path: Path) -> dict:
    namespace: dict = {}
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)
    finally:
        os.chdir(cwd)
    return namespace


def test_latency_and_errors_notebook():
    ns = run_notebook(ROOT / "notebooks" / "latency_and_errors.ipynb")
    exchanges, latency, versions = ns["exchanges"], ns["latency"], ns["versions"]
    assert len(exchanges) == 34
    assert {"Produce", "Fetch", "JoinGroup", "ApiVersions"} <= set(latency.index)
    assert int(latency.loc["Produce", "count"]) == 2
    # kafka-python 3 speaks only versions Kafka 4 still accepts.
    assert not versions.removed_in_kafka4.any()
    assert set(ns["errors"].reset_index()["errors"]) >= {"MEMBER_ID_REQUIRED"}
