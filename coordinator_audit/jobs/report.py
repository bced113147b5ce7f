"""One self-contained HTML report of the audit's Delta tables (no network needed to view it).

    coordinator-audit report --tables out/delta --out report.html [--group GLOB] [--max-groups N]

Contents: the health ranking (`group_health`, worst first; the first RANKING_ROWS group-days),
every violation of every group with its evidence, then per group (the worst `--max-groups`, or
those matching `--group`): a timeline of its generations and of the ownership of each partition
(one colour per member, unowned stretches coloured by reason, violations marked), a breakdown of
the primary causes of its generations, its rebalances, and its violations. Plots are Plotly figures; plotly.js is inlined once, so the file opens offline.
The tables are read with `coordinator_audit.jobs.delta_read` and reduced across runs like `coordinator_audit.jobs.query` does.
"""

from __future__ import annotations

import argparse
import fnmatch
import html
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from coordinator_audit.cli import EXIT_CODES, PROG
from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.jobs.query import QueryError, human_duration, human_time, load_rows
from coordinator_audit.udfs.history import FLAPPING_THRESHOLDS

__all__ = ["RANKING_ROWS", "UNOWNED_COLOURS", "build_report", "main"]

UNOWNED_COLOURS: dict[str, str] = {
    "eager_join_phase": "#d62728",
    "owner_departed": "#ff7f0e",
    "cooperative_revocation": "#e377c2",
    "not_assigned": "#8c564b",
    "group_empty": "#7f7f7f",
}
"""Unowned stretches by reason (owners get the qualitative palette below, which avoids these)."""

MAX_GROUPS = 50
"""Without a group filter, the least healthy groups that get a section of their own."""
RANKING_ROWS = 500
"""Group-days shown in the health ranking (the worst first); the table holds them all."""

_OWNER_PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#bcbd22", "#393b79", "#637939", "#3182bd",
                  "#31a354", "#756bb1", "#6baed6", "#74c476", "#9e9ac8", "#0868ac", "#006d2c")

_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 1.5em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; }
.flapping { background: #fbe0e0; } .unstable { background: #fff2d6; } .healthy { background: #e6f4e6; }
.note { color: #555; font-size: 0.9em; } .evidence { font-family: monospace; font-size: 0.85em; }
"""


def _ms_to_dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _short(member_id: str | None, instance: str | None) -> str:
    if instance:
        return f"{instance} ({(member_id or '')[-8:]})"
    return member_id or "?"


def _esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _timeline_figure(group: str, ownership: list[dict[str, Any]], generations: list[dict[str, Any]],
                     violations: list[dict[str, Any]], horizon: int) -> Any:
    fig = go.Figure()
    owners = sorted({_short(o["member_id"], o["group_instance_id"]) for o in ownership if o["owned"]})
    colour = {m: _OWNER_PALETTE[i % len(_OWNER_PALETTE)] for i, m in enumerate(owners)}
    rows_y: dict[str, None] = {}
    series: dict[str, dict[str, list[Any]]] = defaultdict(lambda: {"y": [], "base": [], "x": [], "text": []})
    for g in sorted(generations, key=lambda g: g["record_timestamp"]):
        end = g["ended_at"] if g["ended_at"] is not None else horizon
        s = series["generation"]
        s["y"].append("generations")
        s["base"].append(_ms_to_dt(g["record_timestamp"]))
        s["x"].append(max(end - g["record_timestamp"], 1))
        s["text"].append(f"generation {g['generation_id']} {g['state']} ({g['member_count']} members)<br>"
                         f"{human_time(g['record_timestamp'])} .. {human_time(g['ended_at'])}")
    rows_y["generations"] = None
    for o in sorted(ownership, key=lambda o: (o["topic"], o["partition"], o["valid_from"])):
        label = f"{o['topic']}-{o['partition']}"
        rows_y[label] = None
        end = o["valid_to"] if o["valid_to"] is not None else horizon
        name = _short(o["member_id"], o["group_instance_id"]) if o["owned"] else f"unowned: {o['unowned_reason']}"
        s = series[name]
        s["y"].append(label)
        s["base"].append(_ms_to_dt(o["valid_from"]))
        s["x"].append(max(end - o["valid_from"], 1))
        bounds = (f"from {human_time(o['valid_from'])} ({o['from_evidence']}{'' if o['from_exact'] else ', inferred'})"
                  f"<br>to {human_time(o['valid_to'])} ({o['to_evidence'] or 'current'}"
                  f"{'' if o['to_exact'] in (True, None) else ', inferred'})")
        s["text"].append(f"{label}: {name}<br>generation {o['generation_id']}, {human_duration(o['duration_ms'])}"
                         f"<br>{bounds}")
    for name, s in series.items():
        if name == "generation":
            fill = "#c7c7c7"
        elif name.startswith("unowned: "):
            fill = UNOWNED_COLOURS.get(name.removeprefix("unowned: "), "#d62728")
        else:
            fill = colour[name]
        fig.add_trace(go.Bar(
            name=name, orientation="h", y=s["y"], x=s["x"], base=s["base"], hovertext=s["text"],
            hoverinfo="text", marker={"color": fill, "line": {"color": "white", "width": 0.5}},
            showlegend=name != "generation"))
    if violations:
        fig.add_trace(go.Scatter(
            name="violation", mode="markers",
            x=[_ms_to_dt(v["record_timestamp"]) for v in violations],
            y=[f"{v['topic']}-{v['partition']}" if v["topic"] is not None and f"{v['topic']}-{v['partition']}" in rows_y
               else "generations" for v in violations],
            marker={"symbol": "x", "size": 14, "color": "black", "line": {"width": 2}},
            hovertext=[f"{v['kind']}: {v['detail']}" for v in violations], hoverinfo="text"))
    fig.update_layout(
        barmode="overlay", height=160 + 26 * len(rows_y), margin={"l": 10, "r": 10, "t": 30, "b": 30},
        title={"text": f"{group}: generations and partition ownership", "font": {"size": 14}},
        xaxis={"type": "date", "title": "time (UTC)"},
        yaxis={"categoryorder": "array", "categoryarray": list(reversed(rows_y)), "automargin": True},
        legend={"orientation": "h", "y": -0.25}, template="plotly_white")
    return fig


def _causes_figure(group: str, causes: list[dict[str, Any]]) -> Any:
    counts = Counter(c["cause"] for c in causes if c["is_primary"])
    names = sorted(counts, key=lambda k: (-counts[k], k))
    fig = go.Figure(go.Bar(x=[counts[n] for n in names], y=names, orientation="h", marker={"color": "#1f77b4"}))
    fig.update_layout(height=120 + 24 * len(names), margin={"l": 10, "r": 10, "t": 30, "b": 30},
                      title={"text": f"{group}: primary causes of its generations", "font": {"size": 14}},
                      yaxis={"automargin": True, "autorange": "reversed"}, xaxis={"title": "generations", "dtick": 1},
                      template="plotly_white")
    return fig


def _health_table(health: list[dict[str, Any]]) -> str:
    head = ("<tr><th>group</th><th>day</th><th>status</th><th>flapping score</th><th>rebalances</th>"
            "<th>peak / hour</th><th>time rebalancing</th><th>partition-s unowned</th><th>members joined / left</th>"
            "<th>static / dynamic</th><th>violations</th><th>last commit</th></tr>")
    body = []
    for r in health:
        body.append(
            f"<tr class='{_esc(r['status'])}'><td><a href='#group-{_esc(r['group_id'])}'>{_esc(r['group_id'])}</a></td>"
            f"<td>{_esc(r['day'])}</td><td>{_esc(r['status'])}</td><td class='num'>{r['flapping_score']:.2f}</td>"
            f"<td class='num'>{r['rebalances']}</td><td class='num'>{r['peak_hour_rebalances']}</td>"
            f"<td class='num'>{human_duration(r['rebalancing_ms'])}</td>"
            f"<td class='num'>{r['unowned_partition_ms'] / 1000:,.1f}</td>"
            f"<td class='num'>{r['members_joined']} / {r['members_left']}</td>"
            f"<td class='num'>{r['static_members']} / {r['dynamic_members']}</td>"
            f"<td class='num'>{r['violations']}</td><td>{_esc(human_time(r['last_commit_at']) if r['last_commit_at'] else '-')}</td></tr>")
    return f"<table id='health'>{head}{''.join(body)}</table>"


def _rebalance_table(rebalances: list[dict[str, Any]]) -> str:
    head = ("<tr><th>generation</th><th>outcome</th><th>trigger</th><th>started</th><th>assignment</th>"
            "<th>duration</th><th>members</th><th>moved</th><th>unowned (sum / max)</th></tr>")
    body = []
    for r in sorted(rebalances, key=lambda r: (r["observed_at"], r["generation_id"])):
        start = ("-" if r["started_at"] is None else
                 f"{human_time(r['started_at'])}<br><span class='note'>{_esc(r['start_evidence'])}"
                 f"{'' if r['start_exact'] else ', inferred'}</span>")
        body.append(
            f"<tr><td class='num'>{r['generation_id']}</td><td>{_esc(r['outcome'])}</td>"
            f"<td>{_esc(r['trigger'])}<br><span class='note'>{_esc(r['trigger_member_id'])}</span></td>"
            f"<td>{start}</td><td>{_esc(human_time(r['ended_at']) if r['ended_at'] else '-')}</td>"
            f"<td class='num'>{_esc(human_duration(r['duration_ms']))}</td>"
            f"<td class='num'>{_esc(r['members_before'] if r['members_before'] is not None else '?')} &rarr; "
            f"{r['members_after']}</td><td class='num'>{r['partitions_moved']}</td>"
            f"<td class='num'>{r['partitions_unowned']}: {human_duration(r['unowned_ms_sum'])} / "
            f"{human_duration(r['unowned_ms_max'])}</td></tr>")
    return f"<table class='rebalances'>{head}{''.join(body)}</table>"


def _violation_table(violations: list[dict[str, Any]], *, with_group: bool = False) -> str:
    if not violations:
        return "<p class='note'>No violations.</p>"
    head = (f"<tr>{'<th>group</th>' if with_group else ''}<th>when</th><th>generation</th><th>kind</th>"
            "<th>partition</th><th>members</th><th>detail</th><th>evidence</th></tr>")
    body = [
        f"<tr>{'<td>' + _esc(v['group_id']) + '</td>' if with_group else ''}"
        f"<td>{_esc(human_time(v['record_timestamp']))}</td><td class='num'>{v['generation_id']}</td>"
        f"<td>{_esc(v['kind'])}</td><td>{_esc(v['topic'])}-{_esc(v['partition'])}</td>"
        f"<td>{'<br>'.join(_esc(m) for m in (v['member_ids'] or []))}</td><td>{_esc(v['detail'])}</td>"
        f"<td class='evidence'>{_esc(v['evidence'])}</td></tr>"
        for v in sorted(violations, key=lambda v: (v["record_timestamp"], v["group_id"], v["kind"]))]
    return f"<table class='violations{' all' if with_group else ''}'>{head}{''.join(body)}</table>"


def build_report(tables: str, *, groups: Sequence[str] = (), max_groups: int = MAX_GROUPS) -> str:
    """The report's HTML (module docstring). Raises QueryError when the tables are missing or empty."""
    health = load_rows(tables, "group_health")
    if not health:
        raise QueryError(f"{tables.rstrip('/')}/group_health is empty: nothing to report")
    health.sort(key=lambda r: (-r["flapping_score"], -r["violations"], r["group_id"], r["day"]))
    ranked = list(dict.fromkeys(r["group_id"] for r in health))
    chosen = [g for g in ranked if any(fnmatch.fnmatchcase(g, p) for p in groups)] if groups else ranked[:max_groups]
    if groups and not chosen:
        raise QueryError(f"no group in {tables.rstrip('/')}/group_health matches {', '.join(groups)}")

    def by_group(table: str) -> dict[str, list[dict[str, Any]]]:
        rows = load_rows(tables, table)
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if r["group_id"] in chosen:
                out[r["group_id"]].append(r)
        return out

    ownership, rebalances = by_group("partition_ownership"), by_group("rebalances")
    all_violations = load_rows(tables, "violations")
    violations, causes = by_group("violations"), by_group("rebalance_causes")
    generations = {g: list({(r["generation_id"], r["source_offset"]): r for r in sorted(
        rows, key=lambda r: (r["ended_at"] is not None, r["run_id"]))}.values())
        for g, rows in by_group("generations").items()}

    parts = [f"<h1>coordinator-audit report</h1><p class='note'>Tables: {_esc(tables)}; generated "
             f"{human_time(int(datetime.now(UTC).timestamp() * 1000))}. {len(ranked)} groups, "
             f"{len(chosen)} shown below.</p>",
             "<h2 id='ranking'>Health ranking</h2>",
             "<p class='note'>Flapping score: the largest of peak rebalances per hour / "
             f"{FLAPPING_THRESHOLDS['rebalances_per_hour']:g}, share of the observed day spent rebalancing / "
             f"{FLAPPING_THRESHOLDS['rebalancing_share']:g}, share of partition-time unowned by rebalances / "
             f"{FLAPPING_THRESHOLDS['unowned_share']:g}; 1.0 or more is flapping, 0.5 or more unstable.</p>",
             _health_table(health[:RANKING_ROWS]),
             (f"<p class='note'>{len(health) - RANKING_ROWS:,} more group-days in group_health.</p>"
              if len(health) > RANKING_ROWS else ""),
             f"<h2 id='violations'>Violations ({len(all_violations)}, every group)</h2>",
             _violation_table(all_violations, with_group=True)]
    first = True
    for g in chosen:
        own, gens = ownership.get(g, []), generations.get(g, [])
        ends = [t for o in own for t in (o["valid_from"], o["valid_to"]) if t is not None]
        ends += [t for r in gens for t in (r["record_timestamp"], r["ended_at"]) if t is not None]
        horizon = max(ends, default=0) + 1
        parts.append(f"<section class='group' id='group-{_esc(g)}'><h2>{_esc(g)}</h2>")
        if own or gens:
            fig = _timeline_figure(g, own, gens, violations.get(g, []), horizon)
            parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=first, div_id=f"timeline-{g}",
                                     config={"displaylogo": False, "responsive": True}))
            first = False
        if causes.get(g):
            parts.append(pio.to_html(_causes_figure(g, causes[g]), full_html=False, include_plotlyjs=first,
                                     div_id=f"causes-{g}", config={"displaylogo": False, "responsive": True}))
            first = False
        parts.append("<h3>Rebalances</h3>" + _rebalance_table(rebalances.get(g, [])))
        parts.append("<h3>Violations</h3>" + _violation_table(violations.get(g, [])))
        parts.append("</section>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>coordinator-audit report</title>"
            f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"{PROG} report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES)
    p.add_argument("--tables", required=True, metavar="PATH", help="base path of the audit's Delta tables")
    p.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--group", action="append", default=[], metavar="GLOB", help="only these groups (repeatable)")
    p.add_argument("--max-groups", type=int, default=MAX_GROUPS, metavar="N",
                   help="without --group: the N least healthy groups get a section (default %(default)s)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if not Path(args.tables).exists() and "://" not in args.tables:
            raise QueryError(f"--tables {args.tables}: no such directory")
        page = build_report(args.tables, groups=args.group, max_groups=args.max_groups)
    except CoordinatorAuditError as exc:
        print(f"{PROG} report: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    print(f"report: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0
