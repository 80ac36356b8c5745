"""`kafkawire apis`: what the schema registry decodes (API keys and versions, nested payloads, the
internal topics' record types)."""

from __future__ import annotations

import argparse
import json
import sys

from dissector import native

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    apis = sub.add_parser(
        "apis",
        help="list the API keys and versions the schema registry decodes",
        epilog="examples:\n  kafkawire apis\n  kafkawire apis --json > apis.json\n  kafkawire apis --nested\n"
        "  kafkawire apis --internal",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    apis.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    apis.add_argument(
        "--nested",
        action="store_true",
        help="list the payloads decoded inside bytes fields (consumer protocol, Envelope)",
    )
    apis.add_argument(
        "--internal",
        action="store_true",
        help="list the record types of Kafka's internal topics (__cluster_metadata, __consumer_offsets, "
        "__transaction_state, __share_group_state)",
    )
    apis.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from protocol.registry import coverage, data_versions, removed_in_kafka4

    if args.nested:
        return _nested_apis(args, data_versions)
    if args.internal:
        return _internal_apis(args, data_versions)
    rows = coverage()
    if args.json:
        json.dump(rows, sys.stdout)
        sys.stdout.write("\n")
        return 0
    _table(
        f"kafkawire schema registry: {len(rows)} APIs",
        ["key", "name", "versions", "flexible", "removed in Kafka 4"],
        [
            [
                str(row["api_key"]),
                row["name"],
                _ranges(row["versions"]),
                _ranges(row["flexible_versions"]) or "-",
                _ranges([v for v in row["versions"] if removed_in_kafka4(row["api_key"], v)]) or "-",
            ]
            for row in rows
        ],
        right={0},
    )
    return 0


def _nested_apis(args: argparse.Namespace, data_versions) -> int:
    """`apis --nested`: the payloads decoded inside bytes fields, and their versions."""
    rows = []
    for kind, api, direction, field in native.nested_payloads():
        known = kind[0].isupper()  # a registry type, not "the request it carries"
        versions = data_versions(kind) if known else []
        rows.append({"type": kind, "versions": versions, "api": api, "direction": direction, "field": field})
    return _listing(
        args,
        rows,
        "payloads decoded inside bytes fields (docs/commands.md: Payloads inside payloads)",
        {
            "type": lambda r: r["type"],
            "versions": lambda r: _ranges(r["versions"]) or "-",
            "API": lambda r: r["api"],
            "direction": lambda r: r["direction"],
            "field": lambda r: r["field"],
        },
    )


def _internal_apis(args: argparse.Namespace, data_versions) -> int:
    """`apis --internal`: the internal topics' record types and their versions."""
    rows = [
        {
            "topic": topic,
            "type_id": type_id,
            "key": key,
            "key_versions": data_versions(key) if key else [],
            "value": value,
            "value_versions": data_versions(value),
        }
        for topic, type_id, key, value in native.internal_schemas()
    ]
    return _listing(
        args,
        rows,
        "internal topics' records (docs/commands.md: Internal topics)",
        {
            "topic": lambda r: r["topic"],
            "type": lambda r: str(r["type_id"]),
            "key": lambda r: r["key"] or "-",
            "value": lambda r: r["value"],
            "versions": lambda r: _ranges(r["value_versions"]),
        },
    )


def _listing(args: argparse.Namespace, rows: list[dict], title: str, columns: dict) -> int:
    """`apis`' listings: the rows as a JSON array with --json, else a table of `columns` (name -> cell)."""
    if args.json:
        json.dump(rows, sys.stdout)
        sys.stdout.write("\n")
        return 0
    _table(title, list(columns), [[cell(r) for cell in columns.values()] for r in rows])
    return 0


def _table(title: str, headers: list[str], rows: list[list[str]], right: frozenset | set = frozenset()) -> None:
    """A plain table on stdout: a title, a header row, the rows; columns as wide as their widest
    cell (nothing cut short), two spaces apart; `right`: the columns aligned right."""
    widths = [max(len(c) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        out = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(out).rstrip()

    sys.stdout.write("\n".join([title, line(headers), *(line(r) for r in rows)]) + "\n")


def _ranges(versions: list[int]) -> str:
    """[0,1,2,5] -> '0-2, 5': the compact form Kafka's own docs use."""
    out, start = [], None
    for i, v in enumerate(versions):
        if start is None:
            start = v
        if i + 1 == len(versions) or versions[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)
