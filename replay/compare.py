"""Compare replayed answers with the captured ones; pure functions, no I/O.

A difference is (exchange, field path, captured value, replayed value). Fields that legitimately vary
between two runs or two brokers are ignored (the lists below); `strict` keeps offsets and watermarks.
"""

from __future__ import annotations

import re
from collections import Counter

from protocol.secrets import redact_body, redact_value


# Vary from run to run or broker to broker whatever the broker's behaviour.
IGNORED = frozenset(
    {
        "ThrottleTimeMs",
        "Timestamp",
        "LogAppendTimeMs",
        "MaxTimestamp",
        "MemberId",
        "GroupInstanceId",
        "Leader",
        "SessionId",
        "MemberEpoch",
        "ClusterId",
        "NodeId",
        "Host",
        "Port",
        "Rack",
        "ControllerId",
        "LeaderId",
        "CoordinatorKey",
        "ProducerId",
        "ProducerEpoch",
        "GenerationId",
        "LeaderEpoch",
        "CurrentLeaderEpoch",
        "TopicId",
        "FinalizedFeaturesEpoch",
        "ClusterAuthorizedOperations",
        "TopicAuthorizedOperations",
        "Records",
        "Assignment",
        "Metadata",
        "ErrorMessage",
        "AuthBytes",
        "SessionLifetimeMs",
        "Brokers",
        "Coordinators",
        "Members",
        "ProtocolName",
        "CommittedLeaderEpoch",
        "ReplicaNodes",
        "IsrNodes",
        "OfflineReplicas",
        "EligibleLeaderReplicas",
        "LastKnownElr",
    }
)
# Depend on what the log held before the replay; compared with --strict.
OFFSETS = frozenset(
    {
        "Offset",
        "BaseOffset",
        "HighWatermark",
        "LastStableOffset",
        "LogStartOffset",
        "CommittedOffset",
        "OffsetDelta",
        "EndOffset",
    }
)
# List items are matched by these keys (first found) instead of by position.
ITEM_KEYS = ("Name", "Topic", "TopicName", "PartitionIndex", "Partition", "Index", "ApiKey", "GroupId", "Key")


def _ignored(name: str, strict: bool) -> bool:
    return name in IGNORED or (not strict and name in OFFSETS)


def _keyed(items: list):
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for k in ITEM_KEYS:
        if all(k in i for i in items):
            try:
                keyed = {i[k]: i for i in items}
            except TypeError:  # a list or dict where a name or index belongs (found by fuzzing)
                continue
            if len(keyed) == len(items):
                return k, keyed
    return None


def diff(captured, replayed, *, strict: bool = False, path: str = "") -> list[tuple[str, object, object]]:
    """(path, captured, replayed) for each difference between two decoded bodies."""
    if isinstance(captured, dict) and isinstance(replayed, dict):
        out = []
        for name in list(captured) + [n for n in replayed if n not in captured]:
            if _ignored(name, strict):
                continue
            p = f"{path}.{name}" if path else name
            if name not in captured or name not in replayed:
                out.append((p, captured.get(name, "<absent>"), replayed.get(name, "<absent>")))
            else:
                out += diff(captured[name], replayed[name], strict=strict, path=p)
        return out
    if isinstance(captured, list) and isinstance(replayed, list):
        kc, kr = _keyed(captured), _keyed(replayed)
        if kc and kr and kc[0] == kr[0]:
            out = []
            for key in list(kc[1]) + [k for k in kr[1] if k not in kc[1]]:
                p = f"{path}[{kc[0]}={key}]"
                if key not in kr[1] or key not in kc[1]:
                    out.append(
                        (p, "<present>" if key in kc[1] else "<absent>", "<present>" if key in kr[1] else "<absent>")
                    )
                else:
                    out += diff(kc[1][key], kr[1][key], strict=strict, path=p)
            return out
        if len(captured) != len(replayed):
            return [(f"{path}.length", len(captured), len(replayed))]
        out = []
        for i, (c, r) in enumerate(zip(captured, replayed, strict=True)):
            out += diff(c, r, strict=strict, path=f"{path}[{i}]")
        return out
    return [] if captured == replayed else [(path, captured, replayed)]


def _hide(path: str, value):
    """A difference's value with any secret in it blanked (the field it sits under decides), and
    record data (keys, values, headers: PII) reduced to its size: no report carries payloads."""
    return _no_records(redact_value(re.sub(r"\[.*?\]", "", path).rsplit(".", 1)[-1], value))


def _no_records(value):
    if isinstance(value, dict):
        return {
            k: (
                f"<{len(v)} bytes of records>"
                if k in ("Records", "UnalignedRecords") and isinstance(v, (bytes, bytearray, memoryview))
                else _no_records(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_no_records(v) for v in value]
    return value


def _pct(xs: list, q: float):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def compare(conns: list, answers: list, *, strict: bool = False) -> dict:
    """The report: per-API counts and latencies, every difference, every rewrite and skip."""
    apis: dict[str, dict] = {}
    diffs, rewrites, skipped, failures = [], [], [], []
    lat_c: dict[str, list] = {}
    lat_r: dict[str, list] = {}

    def row(name):
        return apis.setdefault(
            name, {"sent": 0, "answered": 0, "same": 0, "different": 0, "skipped": 0, "rewritten": 0}
        )

    for c in conns:
        for s in c.steps:
            if s.action == "skip":
                row(s.exchange.api_name)["skipped"] += 1
                skipped.append(
                    {
                        "connection": c.connection,
                        "correlation_id": s.exchange.correlation_id,
                        "api": s.exchange.api_name,
                        "version": s.exchange.api_version,
                        "reason": s.reason,
                    }
                )
    for a in answers:
        e, s = a.step.exchange, a.step
        r = row(e.api_name)
        ident = {
            "connection": e.connection,
            "correlation_id": e.correlation_id,
            "api": e.api_name,
            "captured_version": e.api_version,
            "replayed_version": s.version,
        }
        changes, added = list(s.changes) + list(getattr(a, "changes", [])), list(getattr(a, "added", []))
        if changes or added:
            r["rewritten"] += 1
            rewrites.append(dict(ident, changes=changes, added=added))
        if getattr(a, "not_sent", ""):
            r["skipped"] += 1
            skipped.append(
                {
                    "connection": e.connection,
                    "correlation_id": e.correlation_id,
                    "api": e.api_name,
                    "version": e.api_version,
                    "reason": a.not_sent,
                }
            )
            continue
        if a.sent_at is not None:
            r["sent"] += 1
        if a.response is None:
            if s.expect_response:
                failures.append(dict(ident, error=a.error))
            continue
        r["answered"] += 1
        # the target's answer carries its own secrets (a token's HMAC, a SCRAM signature): blank them as
        # the dissector blanked the captured ones, so they compare equal and stay out of every report
        redact_body(e.api_key, "response", a.response)
        lat_r.setdefault(e.api_name, []).append(a.latency_ms)
        if e.latency_ms is not None:
            lat_c.setdefault(e.api_name, []).append(e.latency_ms)
        found = (
            diff(e.response or {}, a.response, strict=strict)
            if e.response is not None
            else [("", "<no captured answer>", "<answered>")]
        )
        r["different" if found else "same"] += 1
        diffs += [dict(ident, path=p, captured=_hide(p, cv), replayed=_hide(p, rv)) for p, cv, rv in found]
    for name, r in apis.items():
        r.update(
            captured_p50_ms=_pct(lat_c.get(name, []), 0.5),
            captured_p99_ms=_pct(lat_c.get(name, []), 0.99),
            replayed_p50_ms=_pct(lat_r.get(name, []), 0.5),
            replayed_p99_ms=_pct(lat_r.get(name, []), 0.99),
        )
    kinds = Counter(rewrite_kind(c) for w in rewrites for c in w["changes"])
    kinds.update(
        ("retried: " if " again" in x else "request added: ") + x.split(" ", 1)[0] for w in rewrites for x in w["added"]
    )
    return {
        "apis": dict(sorted(apis.items())),
        "differences": diffs,
        "rewrites": rewrites,
        "rewrite_counts": dict(sorted(kinds.items())),
        "skipped": skipped,
        "failures": failures,
    }


def rewrite_kind(change: str) -> str:
    """What kind of rewrite one change line is, for the summary's counts."""
    if re.match(r"v\d+->v\d+$", change):
        return "version"
    if change.startswith(("added ", "dropped ")):
        return "field " + change.split(" ", 1)[0] + " (version)"
    if change.startswith("captured SASL"):
        return "SASL login"
    if change.startswith(("waited", "not rewritten")):
        return change.split(" (", 1)[0].split(" for ", 1)[0]
    if ".Records: message set" in change:
        return "Records (message set -> batch)"
    if ".Records producer" in change:
        return "Records (producer id, epoch, sequence)"
    return re.sub(r"\[[^\]]*\]", "", change.split(" ", 1)[0]).rsplit(".", 1)[-1]


def text(report: dict, *, quiet: bool = False) -> list[str]:
    """The summary: the per-API table and the rewrite counts; unless `quiet`, every rewrite,
    difference and failure on a line of its own."""
    lines = [
        f"{'api':<24}{'sent':>6}{'answered':>9}{'same':>6}{'diff':>6}{'skipped':>8}{'rewritten':>10}"
        f"{'p50 cap/rep ms':>18}{'p99 cap/rep ms':>18}"
    ]
    for name, r in report["apis"].items():
        lines.append(
            f"{name:<24}{r['sent']:>6}{r['answered']:>9}{r['same']:>6}{r['different']:>6}"
            f"{r['skipped']:>8}{r.get('rewritten', 0):>10}"
            f"{str(r['captured_p50_ms']) + '/' + str(r['replayed_p50_ms']):>18}"
            f"{str(r['captured_p99_ms']) + '/' + str(r['replayed_p99_ms']):>18}"
        )
    if report.get("rewrite_counts"):
        lines.append("rewrites: " + ", ".join(f"{k} {n}" for k, n in report["rewrite_counts"].items()))
    if quiet:
        n = len(report["differences"]), len(report["failures"])
        lines.append(f"{n[0]} difference(s), {n[1]} unanswered (details in --report)")
        return lines
    for w in report["rewrites"]:
        lines.append(
            f"rewrite conn {w['connection']} corr {w['correlation_id']} {w['api']}: "
            + "; ".join(w["changes"] + [f"sent {x}" for x in w["added"]])
        )
    # The same difference in many exchanges (every connection's ApiVersions against another broker) is one
    # line with where it was seen; --report keeps each.
    seen: dict = {}
    for d in report["differences"]:
        key = (d["api"], d["path"], repr(d["captured"]), repr(d["replayed"]))
        seen.setdefault(key, []).append(f"conn {d['connection']} corr {d['correlation_id']}")
    for (api, path, c, r), where in seen.items():
        if len(where) == 1:
            lines.append(f"diff {where[0]} {api} {path}: {c} -> {r}")
        else:
            shown = ", ".join(where[:3]) + (", ..." if len(where) > 3 else "")
            lines.append(f"diff {api} {path}: {c} -> {r} (in {len(where)} exchanges: {shown})")
    for f in report["failures"]:
        lines.append(f"no answer conn {f['connection']} corr {f['correlation_id']} {f['api']}: {f['error']}")
    return lines
