"""Prometheus metrics of the traffic `top` and a live `dissect` see (`--prometheus HOST:PORT`).

The exposition is prometheus_client's (its registry, its HTTP server on a thread of its own);
this module only says what is counted. Items come in as the dissector gives them (exchanges,
anomalies, connections); `refresh` sets the gauges from a `top` model or a live engine's
requests in flight.

Labels are bounded, so a fleet of clients cannot grow the series without end: the first
MAX_CLIENTS client ids and MAX_BROKERS brokers keep their own label, later ones share `_other`;
API and error names come from the protocol's own tables.
"""

from __future__ import annotations

from bisect import bisect_left

from protocol.errors import error_name

__all__ = ["Exporter", "parse_address", "LATENCY_BUCKETS", "MAX_CLIENTS", "MAX_BROKERS", "OTHER"]

# seconds, 1-2-5 from 0.1 ms to 50 s: a p99 read from them (histogram_quantile) is within a
# bucket of the exact one, and Kafka's latencies span these decades
LATENCY_BUCKETS = tuple(m * 10.0**e for e in range(-4, 2) for m in (1, 2, 5))
MAX_CLIENTS = 100
MAX_BROKERS = 64
MAX_GROUPS = 100
OTHER = "_other"


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT ([v6]:PORT) -> (host, port); ValueError with a one-line reason."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--prometheus {text!r}: give HOST:PORT (e.g. 127.0.0.1:9464)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


class _Bounded:
    """The first `limit` distinct values keep their own label, the rest share OTHER."""

    def __init__(self, limit: int):
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        value = value or "-"
        if value in self.seen:
            return value
        if len(self.seen) < self.limit:
            self.seen.add(value)
            return value
        return OTHER


class Exporter:
    """The metrics, in a registry of their own; serve() exposes them over HTTP.

    The figures are plain counters kept here and turned into metric families at each scrape (a
    prometheus_client collector): `top` counts 10k exchanges a second, and a labelled child's
    lookup and lock per counter would cost it a third of its CPU. No lock either: only this
    thread writes, and the scrape's thread copies each table in one step (a list of a dict's
    items is made under the GIL) and reads a histogram's count as the sum of its buckets."""

    def __init__(self, max_clients: int = MAX_CLIENTS, max_brokers: int = MAX_BROKERS):
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry()
        self.client = _Bounded(max_clients)
        self.broker = _Bounded(max_brokers)
        self.group = _Bounded(MAX_GROUPS)
        # (api, client id, broker) as labelled -> [requests, request bytes, response bytes,
        # latency sum (s), per-bucket counts...]
        self.series: dict[tuple[str, str, str], list] = {}
        self._raw: dict[tuple, list] = {}  # as the items name them -> their series (bounded)
        self.errors: dict[tuple[str, str], int] = {}
        self.unanswered: dict[str, int] = {}
        self.anomalies: dict[str, int] = {}
        self.connections = 0
        self.in_flight: dict[str, int] = {}
        self.rebalancing: dict[str, int] = {}
        self.registry.register(_Collector(self))

    def _series(self, api: str, client_id, broker) -> list:
        raw = (api, client_id, broker)
        s = self._raw.get(raw)
        if s is None:
            key = (api, self.client(client_id), self.broker(broker))
            s = self.series.get(key)
            if s is None:
                s = self.series[key] = [0, 0, 0, 0.0] + [0] * (len(LATENCY_BUCKETS) + 1)
            if len(self._raw) < 100_000:
                self._raw[raw] = s
        return s

    def observe(self, item) -> None:
        """One item of the dissector (an exchange counts whole: request, answer, latency, errors)."""
        kind = item.type
        if kind == "anomaly":
            self.anomalies[item.kind] = self.anomalies.get(item.kind, 0) + 1
            return
        if kind == "connection":
            self.connections += 1
            return
        api = item.api_name or f"api_{item.api_key}"
        s = self._series(api, item.client_id, item.broker)
        if item.ts is not None:  # an orphan answer has no request to count
            s[0] += 1
            s[1] += item.request_size or 0
        if item.response_size:
            s[2] += item.response_size
        latency = item.latency_ms
        if latency is not None:
            seconds = latency / 1000.0
            s[3] += seconds
            s[4 + bisect_left(LATENCY_BUCKETS, seconds)] += 1
        if item.status == "unanswered":
            self.unanswered[api] = self.unanswered.get(api, 0) + 1
        for code in item.error_codes or ():
            k = (api, error_name(code))
            self.errors[k] = self.errors.get(k, 0) + 1

    def refresh(self, in_flight: dict[str, int], rebalancing: dict[str, int]) -> None:
        """The gauges now: requests in flight per API, members rebalancing per group (a group
        that was, and is no more, reads 0)."""
        groups: dict[str, int] = {}
        for g, n in rebalancing.items():
            key = self.group(g)
            groups[key] = groups.get(key, 0) + n
        self.in_flight = {**dict.fromkeys(self.in_flight, 0), **in_flight}
        self.rebalancing = {**dict.fromkeys(self.rebalancing, 0), **groups}

    def serve(self, address: str):
        """Serve /metrics on HOST:PORT (a thread of prometheus_client's); OSError when it cannot bind."""
        from prometheus_client import start_http_server

        host, port = parse_address(address)
        return start_http_server(port, addr=host, registry=self.registry)


class _Collector:
    """The exporter's figures as metric families, made at each scrape."""

    def __init__(self, exporter: Exporter):
        self.x = exporter

    def describe(self):
        return []  # made at each scrape: nothing to check at registration

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        x = self.x
        who = ["api", "client_id", "broker"]
        requests = CounterMetricFamily("kafkawire_requests", "Kafka requests seen", labels=who)
        sent = CounterMetricFamily("kafkawire_request_bytes", "request bytes (frames)", labels=who)
        got = CounterMetricFamily("kafkawire_response_bytes", "response bytes (frames)", labels=who)
        latency = HistogramMetricFamily(
            "kafkawire_request_latency_seconds", "request to response, as seen on the wire", labels=who
        )
        errors = CounterMetricFamily("kafkawire_errors", "error codes in responses", labels=["api", "error"])
        unanswered = CounterMetricFamily(
            "kafkawire_unanswered_requests", "requests whose connection closed unanswered", labels=["api"]
        )
        anomalies = CounterMetricFamily("kafkawire_anomalies", "anomalies, by kind", labels=["kind"])
        closed = CounterMetricFamily("kafkawire_connections_closed", "TCP connections ended")
        flight = GaugeMetricFamily("kafkawire_requests_in_flight", "requests awaiting their answer", labels=["api"])
        rebalancing = GaugeMetricFamily(
            "kafkawire_group_members_rebalancing",
            "consumer-group members rebalancing now (classic) or reconciling (KIP-848)",
            labels=["group"],
        )
        for key, s in list(x.series.items()):
            labels = list(key)
            requests.add_metric(labels, s[0])
            sent.add_metric(labels, s[1])
            got.add_metric(labels, s[2])
            counts = s[4:]  # one copy: the count is theirs
            if any(counts):
                cumulative, buckets = 0, []
                for bound, n in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
                    cumulative += n
                    buckets.append((_le(bound), cumulative))
                latency.add_metric(labels, buckets, s[3])
        for (api, name), n in list(x.errors.items()):
            errors.add_metric([api, name], n)
        for api, n in list(x.unanswered.items()):
            unanswered.add_metric([api], n)
        for kind, n in list(x.anomalies.items()):
            anomalies.add_metric([kind], n)
        closed.add_metric([], x.connections)
        for api, n in list(x.in_flight.items()):
            flight.add_metric([api], n)
        for group, n in list(x.rebalancing.items()):
            rebalancing.add_metric([group], n)
        return [requests, sent, got, latency, errors, unanswered, anomalies, closed, flight, rebalancing]


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
