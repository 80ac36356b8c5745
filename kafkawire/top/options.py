"""`kafkawire top`'s options: what the command line builds for every kafkawire command, kept apart from
the model and the view so that building it imports neither (the other commands start no slower)."""

from __future__ import annotations

import argparse

__all__ = ["GROUPINGS", "SORTS", "add_arguments"]

GROUPINGS = ("api", "client", "broker", "topic")
SORTS = ("rate", "p99", "max", "errors", "bytes")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source",
        nargs="?",
        metavar="CAPTURE|-",
        help="a capture file (or directory of rotated files) played at its own pace, or - for a pcap stream on stdin",
    )
    p.add_argument("-i", "--interface", metavar="IFACE", help="capture live on this interface")
    p.add_argument("-f", "--filter", metavar="BPF", help="with -i: the capture filter (default: the Kafka ports)")
    p.add_argument("--speed", type=float, default=1.0, metavar="N", help="play a file at N times its pace (default 1)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="redraw every S seconds (default 1)")
    p.add_argument("--group", choices=GROUPINGS, default="api", help="group by API, client id, broker or topic (key g)")
    p.add_argument("--sort", choices=SORTS, default="rate", help="sort column (key s)")
    p.add_argument(
        "--since-start", action="store_true", help="show the since-start figures first, not the interval's (key t)"
    )
    p.add_argument("--duration", type=float, metavar="S", help="exit after S seconds (wall time)")
    p.add_argument(
        "--once",
        action="store_true",
        help="play the file (as fast as --speed lets) and print one plain snapshot of where it ends",
    )
    p.add_argument("--port", type=int, action="append", default=[], help="another Kafka port besides 9092")
    p.add_argument(
        "--quiet", action="store_true", help="with -i, no line of the capture tool's packet counts at the end"
    )
    from kafkawire.options import add_prometheus

    add_prometheus(
        p,
        "requests, latency histograms, errors, bytes, in flight, rebalances; a file's "
        "figures stay served after its end, until --duration or Ctrl-C",
    )
