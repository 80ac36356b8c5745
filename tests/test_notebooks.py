"""The notebooks run top to bottom in a real Jupyter kernel (nbclient) on bundled samples,
and compute what they claim. A cell the test appends reports the notebook's results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
# the three samples both notebooks land (land_local and land_spark must agree)
COUNTS = {
    "exchanges": 141,
    "errors": 7,
    "records": 390,
    "batches": 40,
    "connections": 42,
    "anomalies": 0,
    "group_generations": 2,
    "group_assignments": 18,
}


def execute(name: str, report: str) -> tuple[dict, list]:
    """Run the notebook (cwd notebooks/), then `report`, code that prints one JSON object."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import json as _json\nprint(_json.dumps(" + report + ", default=str))"))
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    facts = json.loads(nb.cells[-1].outputs[-1]["text"])
    return facts, nb.cells[:-1]


def test_latency_and_errors_notebook():
    facts, _ = execute(
        "latency_and_errors.ipynb",
        "{'exchanges': len(exchanges), 'apis': sorted(latency.index), "
        "'produce': int(latency.loc['Produce', 'count']), 'removed': bool(versions.removed_in_kafka4.any()), "
        "'errors': sorted(set(errors.reset_index()['errors']))}",
    )
    assert facts["exchanges"] == 34 and facts["produce"] == 2
    assert {"Produce", "Fetch", "JoinGroup", "ApiVersions"} <= set(facts["apis"])
    assert facts["removed"] is False  # kafka-python 3 speaks only versions Kafka 4 still accepts
    assert "MEMBER_ID_REQUIRED" in facts["errors"]


def test_landed_tables_notebook():
    facts, cells = execute(
        "landed_tables.ipynb",
        "{'counts': counts, 'produce': latency[latency.api_name == 'Produce']['count'].sum(), "
        "'errors': dict(zip(errors.name, errors['count'])), "
        "'removed': sorted({(c, a) for c, a in zip(removed.client_id, removed.api_name)}), "
        "'p2f': len(p2f), 'lag': len(lag)}",
    )
    assert facts["counts"] == COUNTS
    assert facts["errors"] == {"UNKNOWN_PRODUCER_ID": 5, "MEMBER_ID_REQUIRED": 2}
    # the old-protocol client's versions are the ones Kafka 4 removed
    removed = set(map(tuple, facts["removed"]))
    assert {("old-kpy-0.8.2", "Produce"), ("old-ck-consumer-lz4", "Fetch")} <= removed
    assert not any(c.startswith(("kw-", "ck-")) for c, _ in removed)  # the modern clients
    assert facts["p2f"] == 150 and facts["lag"] == 46
    # it draws its plots (committed with their outputs so the notebook reads well on a code host)
    assert sum("image/png" in o.get("data", {}) for c in cells if c.cell_type == "code" for o in c.outputs) == 3


def test_notebooks_are_committed_with_their_outputs():
    for path in NOTEBOOKS.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(c.execution_count for c in code), f"{path.name}: run it and commit the outputs"
        assert sum(bool(c.outputs) for c in code) >= len(code) - 1, path.name


@pytest.mark.slow  # a Spark session and the whole notebook: about a minute
def test_spark_notebook():
    """Local Spark on loopback: land_spark's catalog tables and the kafkawire data source agree."""
    pytest.importorskip("pyspark")
    facts, cells = execute(
        "spark_analysis.ipynb",
        "{'counts': counts, 'faults': faults, 'tables': sorted(t.name for t in spark_tables), "
        "'direct': direct.to_dict('records'), 'latency': latency.to_dict('records'), "
        "'direct_errors': dict(zip(direct_errors['name'], direct_errors['count'])), "
        "'errors': errors.groupby('name')['count'].sum().to_dict(), "
        "'removed': sorted({(c, a) for c, a in zip(removed.client_id, removed.api_name)})}",
    )
    assert facts["counts"] == COUNTS
    assert facts["faults"] == []
    assert facts["tables"] == [
        "kafka_anomalies",
        "kafka_batches",
        "kafka_connections",
        "kafka_errors",
        "kafka_exchanges",
        "kafka_group_assignments",
        "kafka_group_generations",
        "kafka_records",
    ]
    # straight from the captures and from the catalog: the same exact percentiles
    assert facts["direct"] == facts["latency"]
    count = {r["api_name"]: r["count"] for r in facts["latency"]}
    assert count["Produce"] == 16 and count["Fetch"] == 12 and count["JoinGroup"] == 4
    assert facts["direct_errors"] == facts["errors"] == {"UNKNOWN_PRODUCER_ID": 5, "MEMBER_ID_REQUIRED": 2}
    removed = set(map(tuple, facts["removed"]))
    assert {("old-kpy-0.8.2", "Produce"), ("old-ck-consumer-lz4", "Fetch")} <= removed
    assert not any(c.startswith(("kw-", "ck-")) for c, _ in removed)
    assert sum("image/png" in o.get("data", {}) for c in cells if c.cell_type == "code" for o in c.outputs) == 3
