"""The `kafkawire` command: one entry point, one subcommand per job (kafkawire.commands, kafkawire.top
and replay.command each add theirs).

The top of the house: it parses options and calls the public faces of the packages below it
(dissector, the tables and Spark engines, the report, replay); nothing below imports it."""

from __future__ import annotations

import argparse
import os
import re
import sys

from dissector.fs import RemoteError
from dissector.native import NativeCoreMissing
from kafkawire.commands import apis, dissect, land, report
from kafkawire.options import add_filters, add_tls, make_filter

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafkawire", description="Kafka network-traffic dissector and replay analyzer"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (apis, dissect, land, report):
        command.add_parser(sub)
    from replay import command as replay_command

    rpl = sub.add_parser(
        "replay",
        help="re-send captured requests to a broker and diff its answers",
        epilog="examples:\n  kafkawire replay capture.pcap --to 127.0.0.1:9092 --dry-run\n"
        "  kafkawire replay capture.pcap --to kafka4:9092 --max-speed --report diff.json\n"
        "  kafkawire replay old.pcap --to kafka4:9092 --allow-writes --api Produce,Fetch\n\n"
        "exit status: 0 done (differences are findings); 1 the target could not be asked "
        "for its versions; 2 wrong options",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay_command.add_arguments(rpl)
    for p in (parser, rpl):  # an unknown option is reported by the top parser, an ambiguous one by replay's
        scrub_secrets(p)
    add_tls(rpl)
    add_filters(rpl)
    rpl.set_defaults(func=replay_command.run, make_filter=make_filter)

    from kafkawire.top import options as top_options

    top = sub.add_parser(
        "top",
        help="a live terminal view of Kafka traffic: rates, latency, errors, in flight, rebalances",
        epilog="examples:\n  kafkawire top capture.pcap --speed 20\n"
        "  tcpdump -U -w - 'tcp port 9092' | kafkawire top -\n"
        "  kafkawire top capture.pcap --once --since-start > snapshot.txt\n\n"
        "keys: g grouping (api, client id, broker), s sort, t last interval / since start, f freeze, q quit",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top_options.add_arguments(top)
    add_tls(top)
    top.set_defaults(func=_top)
    return parser


_SECRET_JOINED = re.compile(r"(--sasl-pass[\w-]*=)\S+")
_SECRET_NEXT = re.compile(r"(--sasl-pass[\w-]*\s+)\S+")


def scrub_secrets(parser: argparse.ArgumentParser) -> None:
    """The parser's error messages (an unknown option, an ambiguous one) leave out the value after
    any --sasl-pass... option: it may be a password typed where an environment variable's name goes."""
    error = parser.error

    def scrubbed(message: str):
        message = _SECRET_JOINED.sub(r"\1<not shown>", message)
        if message.startswith("unrecognized arguments:"):  # the only message that lists the words after
            message = _SECRET_NEXT.sub(r"\1<not shown>", message)
        return error(message)

    parser.error = scrubbed


def _top(args: argparse.Namespace) -> int:
    # imported when `top` runs: its model and view are no part of the other commands' start-up
    from kafkawire.top.command import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    # numpy comes in with pyarrow's pandas shim and would start an OpenBLAS thread per core that
    # spins for work nothing here gives it, on the cores the engine's own threads need
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0
    except (NativeCoreMissing, RemoteError) as e:
        line = str(e)  # a Spark task's comes already as "kafkawire: ..."
        print(line if line.startswith("kafkawire: ") else f"kafkawire: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        # a table store's refusal (delta-rs: no bucket, no access, a table another tool changed): one line
        if type(e).__module__.partition(".")[0] != "deltalake":
            raise
        why = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        print(f"kafkawire: the tables could not be written or read: {why}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
