"""The analyses of report/analysis.py as one self-contained HTML page.

matplotlib draws every plot to SVG, which goes inline into the page: no
JavaScript, no fonts or scripts fetched from anywhere, and the page opens the
same in any browser or offline. (Plotly or Vega-Altair would mean inlining a few
MB of JavaScript for interactivity nobody needs in a report that is read.)
"""

from __future__ import annotations

import html
import io
import os
import time

import pandas as pd

from report import analysis

__all__ = ["render", "write"]

_TOP = 8  # series per plot: the busiest ones
_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.cards { display: flex; flex-wrap: wrap; gap: .8em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6em 1em; min-width: 9em; }
.card b { display: block; font-size: 1.5em; }
.plot svg { max-width: 100%; height: auto; }
.note { color: #666; font-size: .85em; }
"""


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _plt().close(fig)
    text = buf.getvalue()
    return f'<div class="plot">{text[text.index("<svg") :]}</div>'


def _table(df: pd.DataFrame, limit: int = 50) -> str:
    if df is None or df.empty:
        return '<p class="note">(none)</p>'
    shown = df.head(limit).copy()
    for c in shown.columns:
        if pd.api.types.is_float_dtype(shown[c]):
            whole = shown[c].dropna().map(float.is_integer).all() and c not in (
                "p50",
                "p90",
                "p99",
                "max",
                "latency_ms",
            )
            shown[c] = shown[c].map(lambda v, whole=whole: "" if pd.isna(v) else (f"{v:.0f}" if whole else f"{v:,.3f}"))
        elif pd.api.types.is_datetime64_any_dtype(shown[c]):
            shown[c] = shown[c].dt.strftime("%Y-%m-%d %H:%M:%S.%f")
    more = f'<p class="note">first {limit} of {len(df)} rows</p>' if len(df) > limit else ""
    return shown.to_html(index=False, escape=True, border=0) + more


def _busiest(df: pd.DataFrame, col: str, n: int = _TOP) -> list:
    return list(df[col].value_counts().head(n).index)


def _latency_plots(ex: pd.DataFrame, bucket: str) -> str:
    plt = _plt()
    import numpy as np

    ex = ex[ex["latency_ms"].notna() & (ex["latency_ms"] >= 0)]
    if ex.empty:
        return '<p class="note">(no answered exchanges)</p>'
    apis = _busiest(ex, "api_name")
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    floor = max(ex["latency_ms"][ex["latency_ms"] > 0].min() if (ex["latency_ms"] > 0).any() else 0.001, 0.001)
    bins = np.logspace(np.log10(floor), np.log10(max(ex["latency_ms"].max(), floor * 10)), 40)
    for api in apis:
        v = np.sort(ex.loc[ex["api_name"] == api, "latency_ms"].clip(lower=floor).to_numpy())
        a.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=f"{api} ({len(v)})")
        b.hist(v, bins=bins, histtype="step", label=api)
    a.set(xscale="log", xlabel="latency (ms, log)", ylabel="fraction of exchanges", title="latency CDF per API")
    b.set(xscale="log", yscale="log", xlabel="latency (ms, log)", ylabel="exchanges", title="latency histogram per API")
    a.legend(fontsize=7)
    out = _svg(fig)
    t = ex.copy()
    t["bucket"] = t["ts"].dt.floor(bucket)
    fig, ax = plt.subplots(figsize=(11, 3.5))
    for api in apis:
        s = t[t["api_name"] == api].groupby("bucket")["latency_ms"].quantile(0.99)
        ax.plot(s.index, s.values, marker=".", label=api)
    ax.set(yscale="log", ylabel=f"p99 latency per {bucket} (ms, log)", title="latency over time per API")
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    return out + _svg(fig)


def _error_plots(er: pd.DataFrame, bucket: str) -> str:
    if er.empty:
        return '<p class="note">(no error codes in any response)</p>'
    plt = _plt()
    t = er.copy()
    t["bucket"] = t["ts"].dt.floor(bucket)
    counts = t.groupby(["bucket", "name"]).size().unstack(fill_value=0)
    fig, ax = plt.subplots(figsize=(11, 3.5))
    bottom = None
    width = pd.Timedelta(bucket) * 0.8
    for name in counts.columns:
        ax.bar(counts.index, counts[name], width=width, bottom=bottom, label=name, align="edge")
        bottom = counts[name] if bottom is None else bottom + counts[name]
    ax.set(ylabel=f"errors per {bucket}", title="error codes over time")
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    return _svg(fig)


def _version_heatmap(vm: pd.DataFrame, bv: pd.DataFrame) -> str:
    if vm.empty:
        return '<p class="note">(no versioned requests)</p>'
    plt = _plt()
    import numpy as np

    clients = sorted(vm["client_id"].unique())[:40]
    apis = vm.drop_duplicates("api_key").sort_values("api_key")[["api_key", "api_name"]].head(40)
    grid = np.full((len(clients), len(apis)), np.nan)
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(apis) + 3), max(2.5, 0.35 * len(clients) + 1.5)))
    advertised = {int(k): int(v) for k, v in zip(bv["api_key"], bv["max_version"], strict=True)} if not bv.empty else {}
    for _, r in vm.iterrows():
        if r["client_id"] not in clients or r["api_key"] not in set(apis["api_key"]):
            continue
        i, j = clients.index(r["client_id"]), list(apis["api_key"]).index(r["api_key"])
        top = max(r["versions"])
        grid[i, j] = top
        mark = "*" if r["removed_in_kafka4"] else ""
        over = int(r["api_key"]) in advertised and top > advertised[int(r["api_key"])]
        ax.text(
            j,
            i,
            f"{','.join(str(v) for v in r['versions'])}{mark}",
            ha="center",
            va="center",
            fontsize=7,
            color="red" if mark or over or r["unsupported_version"] else "black",
        )
    ax.imshow(grid, cmap="Blues", aspect="auto", vmin=0, vmax=np.nanmax(grid) + 3 if np.isfinite(grid).any() else 1)
    ax.set_xticks(
        range(len(apis)),
        [f"{n} ({k})" for k, n in zip(apis["api_key"], apis["api_name"], strict=True)],
        rotation=60,
        ha="right",
        fontsize=7,
    )
    ax.set_yticks(range(len(clients)), [c or "(no client id)" for c in clients], fontsize=7)
    ax.grid(False)
    ax.set_title(
        "versions each client id sent (red: removed in Kafka 4 (*), above the broker's advertised max, "
        "or answered UNSUPPORTED_VERSION)",
        fontsize=8,
    )
    return _svg(fig)


def _throughput_plot(ex: pd.DataFrame, bucket: str) -> str:
    if ex.empty:
        return '<p class="note">(no exchanges)</p>'
    plt = _plt()
    t = ex.copy()
    t["bytes"] = t["request_size"].fillna(0) + t["response_size"].fillna(0)
    t["bucket"] = t["ts"].dt.floor(bucket)
    top = list(t.groupby("connection_id")["bytes"].sum().sort_values(ascending=False).head(_TOP).index)
    fig, ax = plt.subplots(figsize=(11, 3.5))
    for cid in top:
        s = t[t["connection_id"] == cid].groupby("bucket")["bytes"].sum()
        who = t.loc[t["connection_id"] == cid, "client_id"].dropna()
        ax.plot(s.index, s.values / 1e3, marker=".", label=f"conn {cid} {who.iloc[0] if len(who) else ''}")
    ax.set(ylabel=f"kB of Kafka frames per {bucket}", title="throughput per connection (busiest)")
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    return _svg(fig)


def _topic_plot(over: pd.DataFrame, bucket: str) -> str:
    """Bytes produced (solid) and fetched (dashed) per bucket, for the busiest topics."""
    if over.empty:
        return '<p class="note">(no record batches)</p>'
    plt = _plt()
    top = list(over.groupby("topic")["bytes"].sum().sort_values(ascending=False).head(_TOP).index)
    fig, ax = plt.subplots(figsize=(11, 3.5))
    for topic in top:
        for direction, style in (("produce", "-"), ("fetch", "--")):
            s = over[(over["topic"] == topic) & (over["direction"] == direction)].set_index("ts")["bytes"]
            if len(s):
                ax.plot(s.index, s.values / 1e3, style, marker=".", label=f"{topic} {direction}")
    ax.set(ylabel=f"kB of record batches per {bucket}", title="throughput per topic (busiest): produced, fetched")
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    return _svg(fig)


def _batching_plot(t) -> str:
    """Per producer (client id) and topic, the busiest by batches: how many records its batches
    hold (min to max, the middle half, the median) and how much they compress (uncompressed over
    compressed bytes, summed over its batches; 1.0 is none)."""
    b = t.get("batches", analysis.BATCH_COLS)
    b = b[b["direction"] == "produce"]
    if b.empty:
        return '<p class="note">(no produced record batches)</p>'
    plt = _plt()
    b = b.assign(who=b["client_id"].fillna("-") + " " + b["topic"].fillna("-"))
    top = list(b.groupby("who")["records"].size().sort_values(ascending=False, kind="stable").head(_TOP * 2).index)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.9 + 0.32 * len(top)), sharey=True)
    rows = range(1, len(top) + 1)
    q = b.groupby("who")["records"].quantile([0.0, 0.25, 0.5, 0.75, 1.0]).unstack()
    q = q.loc[top]
    left.hlines(rows, q[0.0], q[1.0], color="#999", linewidth=1)  # min to max
    left.hlines(rows, q[0.25], q[0.75], color="#4c72b0", linewidth=6)  # the middle half
    left.plot(q[0.5], rows, "o", color="#c44e52", markersize=4, label="median")
    left.set_yticks(list(rows), top)
    left.set(xlabel="records per batch", title="batching: records per produced batch (min, quartiles, max)")
    left.invert_yaxis()
    sums = b.groupby("who").agg(bytes=("bytes", "sum"), raw=("uncompressed_bytes", "sum"))
    codecs = b.groupby("who")["codec"].agg(lambda s: ",".join(sorted(set(s.dropna()))))
    ratio = [sums.loc[w, "raw"] / sums.loc[w, "bytes"] if sums.loc[w, "bytes"] else 0.0 for w in top]
    bars = right.barh(list(rows), ratio, height=0.6, color="#4c72b0")
    right.bar_label(bars, labels=[codecs[w] or "?" for w in top], padding=3, fontsize=7)
    right.axvline(1.0, color="#999", linewidth=0.8)
    right.set(xlabel="uncompressed / compressed bytes", title="compression ratio per producer and topic")
    right.set_xlim(0, max([1.0, *ratio]) * 1.25)
    return _svg(fig)


def _lag_plot(lag: pd.DataFrame) -> str:
    if lag.empty:
        return '<p class="note">(no Fetch answers with a high watermark)</p>'
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 3.5))
    keys = lag.groupby(["group_id", "topic", "partition"], dropna=False)["lag"].max().sort_values(ascending=False)
    for g, t, p in list(keys.index)[:_TOP]:
        s = lag[
            (lag["group_id"].fillna("") == (g if isinstance(g, str) else ""))
            & (lag["topic"] == t)
            & (lag["partition"] == p)
        ]
        ax.step(s["ts"], s["lag"], where="post", label=f"{g or '-'} {t}[{p}]")
    ax.set(ylabel="lag (records)", title="consumer lag: high watermark minus fetch offset")
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    return _svg(fig)


def _rebalance_plot(reb: pd.DataFrame) -> str:
    """A timeline per group: a bar from each rebalance's start to when it settled."""
    done = reb[reb["began"].notna()]
    if done.empty:
        return '<p class="note">(no consumer-group rebalances in the capture)</p>'
    plt = _plt()
    import matplotlib.dates as mdates

    groups = list(dict.fromkeys(done["group_id"]))[: _TOP * 2]
    fig, ax = plt.subplots(figsize=(11, 0.5 + 0.45 * len(groups)))
    for y, g in enumerate(groups):
        rows = done[done["group_id"] == g]
        start = mdates.date2num(rows["began"].dt.tz_convert(None))
        end = mdates.date2num(rows["settled"].fillna(rows["began"]).dt.tz_convert(None))
        width = [max(b - a, 1e-7) for a, b in zip(start, end, strict=True)]
        ax.broken_barh(list(zip(start, width, strict=True)), (y - 0.35, 0.7), color="tab:orange")
        for x, gen in zip(start, rows["generation"], strict=True):
            ax.annotate(str(gen), (x, y + 0.38), fontsize=7)
    ax.set_yticks(range(len(groups)), [str(g) for g in groups])
    ax.xaxis_date()
    ax.set(title="rebalances: each bar from its start to when the group settled (generation or epoch above)")
    fig.autofmt_xdate()
    return _svg(fig)


def render(source, *, title: str = "kafkawire report", bucket: str | None = None, top: int = 20) -> str:
    """The whole page as a string."""
    t = analysis.Tables.of(source)
    ex = t.get(
        "exchanges",
        ["ts", "latency_ms", "api_name", "client_id", "connection_id", "request_size", "response_size", "status"],
    )
    er = t.get("errors")
    an = t.get("anomalies")
    span = (ex["ts"].max() - ex["ts"].min()) if len(ex) else pd.Timedelta(0)
    if bucket is None:  # about a hundred buckets over the capture
        bucket = next((b for b in ("1s", "10s", "1min", "10min", "1h") if span / pd.Timedelta(b) <= 150), "1d")
    rep = analysis.report(t, bucket=bucket, top=top)
    lag = analysis.consumer_lag(t)
    statuses = ex["status"].value_counts().to_dict() if len(ex) else {}
    cards = [
        ("exchanges", f"{len(ex):,}"),
        ("connections", f"{ex['connection_id'].nunique():,}"),
        ("client ids", f"{ex['client_id'].nunique():,}"),
        ("error codes", f"{len(er):,}"),
        ("unanswered", f"{statuses.get('unanswered', 0):,}"),
        ("undecodable", f"{statuses.get('undecodable', 0):,}"),
        ("anomalies", f"{len(an):,}"),
        ("span", str(span).split(".")[0]),
    ]
    first = ex["ts"].min().strftime("%Y-%m-%d %H:%M:%S UTC") if len(ex) else "-"
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p class='note'>from {html.escape(str(t.out))}, first exchange {first}; "
        f"made {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}</p>",
        "<div class='cards'>" + "".join(f"<div class='card'><b>{v}</b>{k}</div>" for k, v in cards) + "</div>",
        "<h2 id='latency'>Latency</h2>",
        _latency_plots(ex, bucket),
        _table(rep["latency_by_api"]),
        "<h3>per client id</h3>",
        _table(rep["latency_by_client"]),
        "<h3>per broker</h3>",
        _table(rep["latency_by_broker"]),
        "<h3 id='slowest'>Slowest exchanges</h3>",
        _table(rep["slowest"]),
        "<h2 id='errors'>Error codes</h2>",
        _error_plots(er, bucket),
        "<h3>per API</h3>",
        _table(rep["errors_by_api"]),
        "<h3>per topic</h3>",
        _table(rep["errors_by_topic"]),
        "<h3>per client id</h3>",
        _table(rep["errors_by_client"]),
        "<h2 id='versions'>Client/broker versions</h2>",
        _version_heatmap(rep["version_matrix"], rep["broker_versions"]),
        _table(rep["version_matrix"], 200),
        "<h3>what each broker advertised (ApiVersions)</h3>",
        _table(rep["broker_versions"], 200),
        "<h3 id='kafka4'>Kafka 4 readiness</h3>",
        "<p class='note'>every client that sent an API version Kafka 4 removed (KIP-896): it breaks on a Kafka 4 "
        "cluster (<code>kafkawire report --kafka4</code> exits 1)</p>"
        if len(rep["kafka4_readiness"])
        else "<p class='note'>no client sent an API version Kafka 4 removed (KIP-896)</p>",
        _table(rep["kafka4_readiness"], 200),
        "<h2 id='throughput'>Throughput</h2>",
        _throughput_plot(ex, bucket),
        _topic_plot(analysis.throughput_over_time(t, bucket), bucket),
        "<h3>per topic (the top talkers)</h3>",
        _table(rep["throughput_by_topic"]),
        "<h3>per partition</h3>",
        _table(rep["throughput_by_partition"]),
        "<h3>per client id</h3>",
        _table(rep["throughput_by_client"]),
        "<h3 id='batching'>Batching and compression, per producer and topic</h3>",
        "<p class='note'>records and bytes per batch, codecs, and bytes on the wire against uncompressed "
        "(the ratio: uncompressed / compressed); the wire does not say the producer's batch.size or linger.ms</p>",
        _batching_plot(t),
        _table(rep["batching"], 200),
        "<h2 id='lag'>Consumer lag</h2>",
        _lag_plot(lag),
        _table(rep["consumer_lag"]),
        "<h2 id='groups'>Consumer groups</h2>",
        _rebalance_plot(rep["rebalances"]),
        "<h3>rebalances (generations and epochs)</h3>",
        _table(rep["rebalances"], 200),
        "<h3>the longest</h3>",
        _table(rep["longest_rebalances"]),
        "<h3>partitions that moved</h3>",
        _table(rep["partitions_moved"], 200),
        "<h2 id='produce-to-fetch'>Produce to fetch</h2>",
        _table(rep["produce_to_fetch"]),
        "<h2 id='tls'>TLS</h2>",
        "<p class='note'>TLS connections by version and cipher suite: decrypted with a key log, or left "
        "encrypted (their tls_encrypted anomalies; docs/tls.md)</p>",
        _table(rep["tls"]),
        "<h2 id='anomalies'>Anomalies</h2>",
        _table(an[["ts", "connection_id", "kind", "detail"]] if len(an) else an),
        "</body></html>",
    ]
    return "\n".join(parts)


def write(source, path: str | os.PathLike, **kw) -> None:
    text = render(source, **kw)
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
