"""The `kafkawire` command: one entry point, one subcommand per job."""
from __future__ import annotations

import argparse
import json
import sys


def _cmd_apis(args: argparse.Namespace) -> int:
    from protocol.registry import coverage

    rows = coverage()
    if args.json:
        json.dump(rows, sys.stdout)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kafkawire schema registry: {len(rows)} APIs")
    table.add_column("key", justify="right")
    table.add_column("name")
    table.add_column("versions")
    table.add_column("flexible")
    for row in rows:
        table.add_row(str(row["api_key"]), row["name"], _ranges(row["versions"]), _ranges(row["flexible_versions"]) or "-")
    Console().print(table)
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkawire", description="Kafka network-traffic dissector and replay analyzer")
    sub = parser.add_subparsers(dest="command", required=True)
    apis = sub.add_parser("apis", help="list the API keys and versions the schema registry decodes")
    apis.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    apis.set_defaults(func=_cmd_apis)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
