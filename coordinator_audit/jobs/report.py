"""One self-contained HTML report of the audit's Delta tables (it opens offline: no network request).

    coordinator-audit report --tables out/delta --out report.html [--group GLOB]

The page opens on an index of the groups, least healthy first (by their worst day in
`group_health`: flapping score, then violations), searchable by name or glob and by status, and on
the violations of every group counted by day and kind (the latest listed). Opening a group (its
link, or the address `report.html#group=G`) draws its section: a timeline of its generations
(numbered) and of the ownership of each partition (one colour per member, labelled by client id
and short member id, the full id on hover; unowned stretches coloured by reason; violations
marked), the causes of its generations (the audit's inference and, with `--server-log`, the
broker's own), its rebalances, its days' health and its violations. Times are UTC ISO 8601.

When the tables hold a `whatif` table (`coordinator-audit whatif`), each group's section also sets
the actual row (what happened; its reproduction score and assumptions), the night's configuration
as its replay measured it (the `reproduction_*` columns) and each alternative's row, every cost
(`WHATIF_COSTS`) with its difference from what happened, alternatives flagged as not
trustworthy when the actual configuration's reproduction score is below 1.0; and the index gains a
what-if column naming each group's best saving alternative (`best_alternative`: no cost higher, one
lower). Without a `whatif` table the page is as above.

Size: plotly.js is inlined once (about 4.8 MB) and each group is held as compact data (its rows'
numbers and indexes into one table of repeated strings, times relative to the group's first
event), drawn by the page only when opened: the file grows by the groups' rows, not by figures.
`SIZE_BOUND_5000_GROUPS` states the bound tested at 5,000 groups. The tables are read with
`coordinator_audit.jobs.delta_read` and reduced across runs like `coordinator_audit.jobs.query` does.
"""

from __future__ import annotations

import argparse
import fnmatch
import html
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from plotly.offline import get_plotlyjs

from coordinator_audit.cli import EXIT_CODES, PROG
from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.jobs.query import (
    BROKER_CAUSES,
    QueryError,
    broker_account,
    broker_accounts,
    human_time,
    load_rows,
    member_labels,
)
from coordinator_audit.udfs.history import DEFAULT_HEALTH, HealthThresholds

__all__ = ["LATEST_VIOLATIONS", "SIZE_BOUND_5000_GROUPS", "UNOWNED_COLOURS", "WHATIF_COSTS", "best_alternative",
           "build_report", "main", "thresholds_of"]

UNOWNED_COLOURS: dict[str, str] = {
    "eager_join_phase": "#d62728",
    "owner_departed": "#ff7f0e",
    "cooperative_revocation": "#e377c2",
    "not_assigned": "#8c564b",
    "group_empty": "#7f7f7f",
}
"""Unowned stretches by reason (owners get the qualitative palette below, which avoids these)."""

LATEST_VIOLATIONS = 200
"""Violations listed one by one on the front page (the latest); the counts cover them all."""

SIZE_BOUND_5000_GROUPS = 12_000_000
"""Bytes: the report of 5,000 small groups (1-3 members, 1-3 partitions, a few generations each)
stays under this (plotly.js about 4.8 MB of it; tests/spark/test_spark_report_scale.py)."""

_OWNER_PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#bcbd22", "#393b79", "#637939", "#3182bd",
                  "#31a354", "#756bb1", "#6baed6", "#74c476", "#9e9ac8", "#0868ac", "#006d2c")

_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 1.5em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.88em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; position: sticky; top: 0; } td.num { text-align: right; }
.t { white-space: nowrap; font-variant-numeric: tabular-nums; }
.flapping { background: #fbe0e0; } .unstable { background: #fff2d6; } .healthy { background: #e6f4e6; }
.note { color: #555; font-size: 0.9em; } .evidence { font-family: monospace; font-size: 0.85em; }
.scroll { max-height: 45vh; overflow: auto; border: 1px solid #eee; display: inline-block; }
.controls { margin: 0.5em 0; } .controls input { width: 22em; padding: 0.2em; }
abbr { text-decoration: none; border-bottom: 1px dotted #888; cursor: help; }
.bar { display: inline-block; height: 0.8em; background: #1f77b4; vertical-align: middle; margin-right: 0.4em; }
section.group { border-top: 3px solid #1f77b4; margin-top: 1.5em; }
.side { display: flex; gap: 3em; flex-wrap: wrap; }
table.whatif td.num { white-space: nowrap; } table.whatif td.settings { font-size: 0.85em; color: #555; }
td.better .diff { color: #2ca02c; } td.worse .diff { color: #d62728; } tr.actual { font-weight: 600; } tr.replayed { font-style: italic; color: #555; }
tr.untrusted, p.untrusted { background: #fff2d6; } .untrusted-flag { color: #d62728; font-size: 0.85em; }
.saves { background: #e6f4e6; padding: 0 0.3em; }
"""

_APP_JS = r"""
(function () {
  const D = JSON.parse(document.getElementById('report-data').textContent);
  const S = D.strings;
  const PALETTE = D.palette, UNOWNED = D.unowned_colours;
  const esc = v => String(v == null ? '' : v).replace(/[&<>"']/g,
    c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
  const iso = ms => ms == null ? 'still current' : new Date(ms).toISOString();
  const t = ms => `<span class="t">${esc(iso(ms))}</span>`;
  const pdate = ms => new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
  const dur = ms => ms == null ? 'ongoing' : ms < 1000 ? `${ms} ms` : ms < 120000 ? `${(ms / 1000).toFixed(2)} s`
    : ms < 7200000 ? `${(ms / 60000).toFixed(1)} min` : `${(ms / 3600000).toFixed(1)} h`;
  const s = i => i == null ? null : S[i];
  const globRe = p => new RegExp('^' + p.replace(/[.+^${}()|\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.') + '$');

  // ------------------------------------------------------------------ what-if
  const COSTS = [['rebalances', 'rebalances', 1], ['unowned_partition_ms', 'partition-s unowned', 1000],
    ['longest_unowned_ms', 'longest unowned, s', 1000], ['partitions_moved', 'partitions moved', 1],
    ['members_stopped', 'members stopped', 1]];
  const amount = (v, scale) => scale === 1 ? String(v) : (v / scale).toFixed(1);
  const signed = (v, scale) => (v >= 0 ? '+' : '') + amount(v, scale);
  const trusted = score => score >= 1.0;
  function whatifBadge(b) {
    if (b == null) return '<td class="whatif"></td>';
    const flag = trusted(b[1]) ? '' : ` <span class="untrusted-flag" title="the night's own configuration ` +
      `reproduces its history with score ${b[1].toFixed(2)}">(not trustworthy: score ${b[1].toFixed(2)})</span>`;
    if (b[0] == null) return `<td class="whatif"><span class="note">nothing saves</span>${flag}</td>`;
    const saved = COSTS.map(([, name, scale], i) => b[2][i] ? `${name} -${amount(b[2][i], scale)}` : null)
      .filter(x => x).join(', ');
    return `<td class="whatif"><span class="saves">${esc(s(b[0]))}: ${esc(saved)}</span>${flag}</td>`;
  }
  function whatif(G) {
    if (!D.whatif) return '';
    if (!G.w) return '<h3>What-if</h3><p class="note">No what-if for this group (<code>coordinator-audit whatif ' +
      `--tables ... --group ${esc(G.id)}</code>).</p>`;
    const [score, observed, reproduced, timeError, observedRebalances, assumptions, at, configs] = G.w;
    const ok = trusted(score);
    const head = `<p class="whatif-reproduction ${ok ? '' : 'untrusted'}">The night's own configuration ` +
      `reproduces ${reproduced} of ${observed} audited generations (score ${score.toFixed(2)}` +
      `${timeError == null ? '' : `, record times off by ${timeError} ms on average`}; ` +
      `${observedRebalances} rebalances observed)` + (ok ? '.' : ': <strong>the alternatives are not ' +
      'trustworthy</strong>, they are only as good as this reproduction.') + '</p>' +
      `<p class="note whatif-assumptions">Assumed: ${esc(s(assumptions))}. Computed ${t(at)}.</p>`;
    const base = configs[0];
    const rows = configs.map((c, k) => {
      const cells = COSTS.map(([key, , scale], i) => {
        const v = c[6 + i], d = v - base[6 + i];
        const cls = k === 0 || d === 0 ? '' : d < 0 ? ' better' : ' worse';
        const exact = scale === 1 ? '' : ` title="${v} ms${k ? ` (${d >= 0 ? '+' : ''}${d} ms)` : ''}"`;
        return `<td class="num${cls}" data-cost="${key}" data-value="${v}"${k ? ` data-diff="${d}"` : ''}${exact}>` +
          `${amount(v, scale)}${k ? ` <span class="diff">(${signed(d, scale)})</span>` : ''}</td>`;
      }).join('');
      const replayed = c[12] === 1;
      const trust = k === 0 ? `what happened; replayed, it reproduces ${reproduced} of ${observed} (score ` +
        `${score.toFixed(2)})` : replayed ? 'the same configuration, as the replay measures it'
        : ok ? 'trusted (score 1.00)' : `<strong>not trustworthy</strong> (score ${score.toFixed(2)})`;
      const kind = k === 0 ? 'actual' : replayed ? 'replayed' : ok ? 'alternative' : 'alternative untrusted';
      return `<tr class="${kind}" ` +
        `data-configuration="${esc(s(c[0]))}"><td>${esc(s(c[0]))}</td><td class="settings">${esc(s(c[1]))}, ` +
        `${c[2] ? 'static' : 'dynamic'}, session ${c[3] ?? base[3]} ms, max poll ${c[4] ?? base[4]} ms, ` +
        `initial delay ${c[5] ?? base[5]} ms</td>` +
        `${cells}<td class="num">${c[11] ?? '—'}</td><td>${trust}</td></tr>`;
    }).join('');
    return `<h3>What-if: the night under another configuration</h3>${head}<table class="whatif"><tr>` +
      '<th>configuration</th><th title="assignor, membership, session.timeout.ms, max.poll.interval.ms, ' +
      'group.initial.rebalance.delay.ms">in force</th>' +
      COSTS.map(([, name]) => `<th>${name}</th>`).join('') +
      '<th>static replacements</th><th>reproduction</th></tr>' + rows + '</table>' +
      (configs.some((c) => c[12] !== 1 && c !== base) ? '<p class="note">Each cost with its difference from ' +
        'what happened in brackets (green: less, red: more). The replayed row is the night\'s own configuration ' +
        'as the replay measures it: an alternative\'s difference beyond it is the configuration\'s, the rest ' +
        'the method\'s.</p>' : '<p class="note">No alternative asked.</p>');
  }

  // ------------------------------------------------------------------ index
  const tbody = document.querySelector('#index tbody');
  const search = document.getElementById('search'), status = document.getElementById('status');
  function renderIndex() {
    const q = search.value.trim(), st = status.value;
    const match = !q ? () => true : /[*?]/.test(q) ? (re => id => re.test(id))(globRe(q)) : id => id.includes(q);
    const rows = [];
    for (const r of D.index) {
      if ((st && s(r[1]) !== st) || !match(r[0])) continue;
      rows.push(`<tr class="${esc(s(r[1]))}"><td><a href="#group=${encodeURIComponent(r[0])}">${esc(r[0])}</a></td>` +
        `<td>${esc(s(r[1]))}</td><td class="num">${r[2].toFixed(2)}</td><td class="t">${esc(r[3])}</td>` +
        `<td class="num">${r[4]}</td><td class="num">${r[5]}</td><td class="num">${r[6]}</td>` +
        `<td class="num">${r[7]}</td><td class="t">${esc(r[8])}</td>${D.whatif ? whatifBadge(r[9]) : ''}</tr>`);
    }
    tbody.innerHTML = rows.join('');
    document.getElementById('count').textContent = `${rows.length} of ${D.index.length} groups`;
  }
  search.addEventListener('input', renderIndex);
  status.addEventListener('change', renderIndex);
  renderIndex();

  // ------------------------------------------------------------------ one group
  function member(G, i) { return G.m[i]; }
  function label(G, i) { return i == null || i < 0 ? '' : `<abbr title="${esc(G.m[i][0])}">${esc(G.m[i][1])}</abbr>`; }
  function timeline(div, G) {
    const rows = ['generations', ...G.p];
    const traces = [];
    const gens = G.g;
    const horizon = G.horizon;
    traces.push({
      type: 'bar', orientation: 'h', name: 'generation', showlegend: false, y: gens.map(() => 'generations'),
      base: gens.map(g => pdate(G.t0 + g[2])), x: gens.map(g => Math.max((g[3] == null ? horizon : g[3]) - g[2], 1)),
      text: gens.map(g => String(g[0])), textposition: 'inside', insidetextanchor: 'middle', textangle: 0,
      textfont: {color: '#111'}, marker: {color: '#c7c7c7', line: {color: 'white', width: 1}},
      hovertext: gens.map(g => `generation ${g[0]} ${esc(s(g[1]))}, ${g[4]} member${g[4] === 1 ? '' : 's'}<br>` +
        `${iso(G.t0 + g[2])} .. ${g[3] == null ? 'still current' : iso(G.t0 + g[3])}` +
        (g[5] != null ? `<br>broker: ${esc(s(g[5]))}` : '')), hoverinfo: 'text'});
    const series = new Map();
    for (const o of G.o) {
      const name = o[3] >= 0 ? G.m[o[3]][1] : 'unowned: ' + s(o[4]);
      if (!series.has(name)) series.set(name, {y: [], base: [], x: [], text: [], owner: o[3]});
      const a = series.get(name), end = o[2] == null ? horizon : o[2];
      a.y.push(G.p[o[0]]); a.base.push(pdate(G.t0 + o[1])); a.x.push(Math.max(end - o[1], 1));
      const who = o[3] >= 0 ? `${esc(G.m[o[3]][1])}<br>member ${esc(G.m[o[3]][0])}` +
        (G.m[o[3]][2] ? `<br>client ${esc(G.m[o[3]][2])} at ${esc(G.m[o[3]][3])}` : '') : esc(name);
      a.text.push(`${esc(G.p[o[0]])}: ${who}<br>generation ${o[5]}, ${dur(o[2] == null ? null : o[2] - o[1])}` +
        `<br>from ${iso(G.t0 + o[1])} (${esc(s(o[6]))}${o[7] ? '' : ', inferred'})` +
        `<br>to ${o[2] == null ? 'still current' : iso(G.t0 + o[2])} (${esc(s(o[8]) || 'current')}` +
        `${o[9] === 0 ? ', inferred' : ''})`);
    }
    let k = 0;
    for (const [name, a] of series) {
      const colour = a.owner >= 0 ? PALETTE[(k++) % PALETTE.length] : (UNOWNED[name.slice(9)] || '#d62728');
      traces.push({type: 'bar', orientation: 'h', name, y: a.y, base: a.base, x: a.x, hovertext: a.text,
        hoverinfo: 'text', marker: {color: colour, line: {color: 'white', width: 0.5}}});
    }
    if (G.v.length) {
      const rowSet = new Set(rows);
      traces.push({type: 'scatter', mode: 'markers', name: 'violation', x: G.v.map(v => pdate(G.t0 + v[0])),
        y: G.v.map(v => v[3] != null && rowSet.has(v[3]) ? v[3] : 'generations'),
        marker: {symbol: 'x', size: 14, color: 'black', line: {width: 2}},
        hovertext: G.v.map(v => `${esc(s(v[2]))}: ${esc(v[5])}`), hoverinfo: 'text'});
    }
    Plotly.newPlot(div, traces, {
      barmode: 'overlay', height: 150 + 24 * rows.length, margin: {l: 10, r: 10, t: 10, b: 50},
      xaxis: {type: 'date', hoverformat: '%Y-%m-%dT%H:%M:%S.%LZ',
              tickformatstops: [
                {dtickrange: [null, 1000], value: '%H:%M:%S.%L<br>%Y-%m-%d'},
                {dtickrange: [1000, 86400000], value: '%H:%M:%S<br>%Y-%m-%d'},
                {dtickrange: [86400000, null], value: '%Y-%m-%d'}]},
      yaxis: {categoryorder: 'array', categoryarray: rows.slice().reverse(), automargin: true},
      uniformtext: {mode: 'hide', minsize: 9},
      legend: {orientation: 'h', x: 0, xanchor: 'left', y: 1.0, yanchor: 'bottom'}, plot_bgcolor: 'white',
    }, {displaylogo: false, responsive: true});
  }
  function counts(title, pairs, gloss) {
    if (!pairs.length) return '';
    const most = Math.max(...pairs.map(p => p[1]));
    return `<div><h3>${title}</h3><table>` + pairs.map(([name, n]) =>
      `<tr><td>${gloss && gloss[name] ? `<abbr title="${esc(gloss[name])}">${esc(name)}</abbr>` : esc(name)}</td>` +
      `<td class="num"><span class="bar" style="width:${Math.round(80 * n / most)}px"></span>${n}</td></tr>`).join('') +
      '</table></div>';
  }
  function members(before, after, prev) {
    if (before != null) return `${before} &rarr; ${after}`;
    return `${after} <span class="note">(before: unknown, ${prev == null ? 'the first generation the tables hold'
      : 'count not recorded'})</span>`;
  }
  function rebalances(G) {
    if (!G.r.length) return '<p class="note">No rebalances.</p>';
    return '<table class="rebalances"><tr><th>generation</th><th>outcome</th><th>cause (audit)</th>' +
      "<th>cause (broker's log)</th><th>started</th><th>assignment</th><th>duration</th><th>members</th>" +
      '<th>moved</th><th>unowned: count, sum / max</th></tr>' + G.r.map(r =>
      `<tr><td class="num">${r[0]}</td><td>${esc(s(r[1]))}</td><td>${esc(s(r[3]) || 'unknown')}` +
      `${r[4] != null && r[4] >= 0 ? '<br>' + label(G, r[4]) : ''}</td>` +
      `<td>${r[16] == null ? '<span class="note">no server log</span>' : `<abbr title="${esc(D.broker_causes[s(r[16])] || '')}">` +
        `${esc(s(r[16]))}</abbr>` + (r[17] ? `<br><span class="note">${esc(r[17])}</span>` : '')}</td>` +
      `<td>${r[5] == null ? 'unknown' : t(G.t0 + r[5]) + `<br><span class="note">${esc(s(r[6]))}` +
        `${r[7] ? '' : ', inferred'}</span>`}</td><td>${r[8] == null ? 'none' : t(G.t0 + r[8])}</td>` +
      `<td class="num">${r[9] == null ? 'unknown' : dur(r[9])}</td><td class="num">${members(r[10], r[11], r[18])}</td>` +
      `<td class="num">${r[12]}</td><td class="num">${r[13]}: ${dur(r[14])} / ${dur(r[15])}</td></tr>`).join('') +
      '</table>';
  }
  function health(G) {
    return '<table class="health"><tr><th>day</th><th>status</th><th>flapping score</th><th>rebalances</th>' +
      '<th>peak / hour</th><th>time rebalancing</th><th>partition-s unowned</th><th>violations</th></tr>' +
      G.h.map(h => `<tr class="${esc(s(h[1]))}"><td class="t">${esc(h[0])}</td><td>${esc(s(h[1]))}</td>` +
        `<td class="num">${h[2].toFixed(2)}</td><td class="num">${h[3]}</td><td class="num">${h[4]}</td>` +
        `<td class="num">${dur(h[5])}</td><td class="num">${(h[6] / 1000).toFixed(1)}</td>` +
        `<td class="num">${h[7]}</td></tr>`).join('') + '</table>';
  }
  function violations(G) {
    if (!G.v.length) return '<p class="note">No violations.</p>';
    return '<table class="violations"><tr><th>when</th><th>generation</th><th>kind</th><th>partition</th>' +
      '<th>members</th><th>detail</th><th>evidence</th></tr>' + G.v.map(v =>
      `<tr><td>${t(G.t0 + v[0])}</td><td class="num">${v[1]}</td><td>${esc(s(v[2]))}</td><td>${esc(v[3] || '')}</td>` +
      `<td>${v[4].map(i => label(G, i)).join('<br>')}</td><td>${esc(v[5])}</td>` +
      `<td class="evidence">${esc(v[6])}</td></tr>`).join('') + '</table>';
  }
  function openGroup(id) {
    const view = document.getElementById('group-view');
    const G = D.groups[id];
    if (!G) { view.innerHTML = id ? `<p class="note">No group ${esc(id)} in this report.</p>` : ''; return; }
    G.id = id;
    const row = D.index.find(r => r[0] === id);
    view.innerHTML = `<section class="group" id="group-${esc(id)}"><h2>${esc(id)} ` +
      `<span class="note ${esc(s(row[1]))}">worst day ${esc(row[3])}: ${esc(s(row[1]))}, score ${row[2].toFixed(2)}</span></h2>` +
      `<h3>Generations (numbered) and partition ownership, UTC</h3>` +
      `<div class="timeline" id="timeline-${esc(id)}"></div>` +
      `<div class="side">${counts('Causes of its generations (audit, primary)', G.c, null)}` +
      `${counts("The broker's causes (server log)", G.bc, D.broker_causes)}</div>` +
      `<h3>Rebalances</h3>${rebalances(G)}<h3>Health by day</h3>${health(G)}<h3>Violations</h3>${violations(G)}` +
      `${whatif(G)}</section>`;
    if (G.o.length || G.g.length) timeline(document.getElementById(`timeline-${id}`), G);
    view.scrollIntoView();
  }
  function route() {
    const m = /^#group=(.*)$/.exec(location.hash);
    openGroup(m ? decodeURIComponent(m[1]) : null);
  }
  window.addEventListener('hashchange', route);
  route();
})();
"""


def _esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


class _Strings:
    """The report's table of repeated strings (states, reasons, evidence, causes): rows hold indexes."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, value: str | None) -> int | None:
        if value is None:
            return None
        i = self.index.get(value)
        if i is None:
            i = self.index[value] = len(self.index)
        return i

    def table(self) -> list[str]:
        return list(self.index)


def _latest_generations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A group's generations, one row per record (a row an earlier run left open is replaced by its closed one)."""
    return list({(r["generation_id"], r["source_partition"], r["source_offset"]): r for r in sorted(
        rows, key=lambda r: (r["ended_at"] is not None, r["run_id"]))}.values())


def _group_data(own: list[dict[str, Any]], gens: list[dict[str, Any]], reb: list[dict[str, Any]],
                viol: list[dict[str, Any]], causes: list[dict[str, Any]], days: list[dict[str, Any]],
                st: _Strings) -> dict[str, Any]:
    """One group's compact data for the page (`_APP_JS` reads it; times relative to `t0`)."""
    times = [t for o in own for t in (o["valid_from"], o["valid_to"]) if t is not None]
    times += [t for g in gens for t in (g["record_timestamp"], g["ended_at"]) if t is not None]
    times += [v["record_timestamp"] for v in viol] + [r["started_at"] for r in reb if r["started_at"] is not None]
    t0 = min(times, default=0)
    span = max(times, default=t0) - t0
    horizon = span + max(1, span // 25)  # what is still current is drawn a little past the last event

    def rel(ms: int | None) -> int | None:
        return None if ms is None else ms - t0

    seen: list[tuple[str, str | None, str | None]] = [(o["member_id"], o["client_id"], o["group_instance_id"])
                                                       for o in own if o["owned"] and o["member_id"]]
    seen += [(r["trigger_member_id"], None, None) for r in reb if r["trigger_member_id"]]
    seen += [(m, None, None) for v in viol for m in (v["member_ids"] or [])]
    labels = member_labels(seen)
    details = {o["member_id"]: (o["client_id"], o["client_host"]) for o in own if o["owned"] and o["member_id"]}
    mi = {m: i for i, m in enumerate(labels)}
    members = [[m, labels[m], *details.get(m, (None, None))] for m in labels]
    parts = sorted({(o["topic"], o["partition"]) for o in own})
    pi = {tp: i for i, tp in enumerate(parts)}
    accounts = broker_accounts(gens)
    generations = [[g["generation_id"], st(g["state"]), rel(g["record_timestamp"]), rel(g["ended_at"]),
                    g["member_count"], st(g.get("broker_cause"))]
                   for g in sorted(gens, key=lambda g: (g["record_timestamp"], g["source_offset"]))]
    ownership = [[pi[(o["topic"], o["partition"])], rel(o["valid_from"]), rel(o["valid_to"]),
                  mi[o["member_id"]] if o["owned"] and o["member_id"] else -1, st(o["unowned_reason"]),
                  o["generation_id"], st(o["from_evidence"]), int(bool(o["from_exact"])), st(o["to_evidence"]),
                  None if o["to_exact"] is None else int(o["to_exact"])]
                 for o in sorted(own, key=lambda o: (o["topic"], o["partition"], o["valid_from"]))]
    rebalances = []
    for r in sorted(reb, key=lambda r: (r["observed_at"], r["generation_id"])):
        account = broker_account(accounts, r)
        client = account.client_reason if account and account.client_reason not in (None, "", "not provided") else None
        rebalances.append([
            r["generation_id"], st(r["outcome"]), st(r["rebalance_protocol"]), st(r["trigger"]),
            mi.get(r["trigger_member_id"]) if r["trigger_member_id"] else None, rel(r["started_at"]),
            st(r["start_evidence"]), int(bool(r["start_exact"])), rel(r["ended_at"]), r["duration_ms"],
            r["members_before"], r["members_after"], r["partitions_moved"], r["partitions_unowned"],
            r["unowned_ms_sum"], r["unowned_ms_max"], st(account.cause) if account else None,
            _shortened(account.reason or "", labels) + (f" (client's reason: {client})" if client else "")
            if account else None,
            r["previous_generation_id"]])
    violations = [[rel(v["record_timestamp"]), v["generation_id"], st(v["kind"]),
                   f"{v['topic']}-{v['partition']}" if v["topic"] is not None else None,
                   [mi[m] for m in (v["member_ids"] or [])], v["detail"], v["evidence"]]
                  for v in sorted(viol, key=lambda v: (v["record_timestamp"], v["kind"]))]
    primary = Counter(c["cause"] for c in causes if c["is_primary"])
    broker = Counter(g["broker_cause"] for g in gens if g.get("broker_cause"))
    health = [[h["day"], st(h["status"]), h["flapping_score"], h["rebalances"], h["peak_hour_rebalances"],
               h["rebalancing_ms"], h["unowned_partition_ms"], h["violations"]]
              for h in sorted(days, key=lambda h: h["day"])]
    return {"t0": t0, "horizon": horizon, "m": members, "p": [f"{t}-{p}" for t, p in parts], "g": generations,
            "o": ownership, "r": rebalances, "v": violations,
            "c": sorted(primary.items(), key=lambda kv: (-kv[1], kv[0])),
            "bc": sorted(broker.items(), key=lambda kv: (-kv[1], kv[0])), "h": health}


def _shortened(text: str, labels: dict[str, str]) -> str:
    """`text` with the member ids it names replaced by their short labels."""
    for member_id, label in labels.items():
        if member_id in text:
            text = text.replace(member_id, label)
    return text


WHATIF_COSTS = ("rebalances", "unowned_partition_ms", "longest_unowned_ms", "partitions_moved", "members_stopped")
"""The costs the report sets an alternative configuration against the actual one by (the `whatif` table's
columns, in the order shown)."""


def _whatif_data(rows: list[dict[str, Any]], st: _Strings) -> list[Any] | None:
    """One group's `whatif` rows as compact data (`_APP_JS` reads it): the actual configuration's
    reproduction (score, generations observed and reproduced, mean time error, observed rebalances),
    its assumptions and when it was computed, then one row per configuration: what happened (the
    actual row) first, then the night's configuration as its replay measured it (the `reproduction_*`
    columns, last element 1), then each alternative. None when the group has no actual row (nothing
    to set the alternatives against)."""
    actual = next((r for r in rows if r["is_actual"]), None)
    if actual is None:
        return None
    alternatives = sorted((r for r in rows if not r["is_actual"]), key=lambda r: r["configuration"])
    timeouts = ("session_timeout_ms", "max_poll_interval_ms", "initial_rebalance_delay_ms")
    configs = [[st(r["configuration"]), st(r["assignor"]), int(r["static_membership"]),
                # an alternative's timeouts: null where they are the actual configuration's
                *(None if r is not actual and r[k] == actual[k] else r[k] for k in timeouts),
                *(r[k] for k in WHATIF_COSTS), r["static_replacements"], 0] for r in (actual, *alternatives)]
    replayed = [actual.get(f"reproduction_{k}") for k in WHATIF_COSTS]
    if all(v is not None for v in replayed):  # rows an older version wrote lack the replay's own costs
        configs.insert(1, [st("actual, replayed"), st(actual["assignor"]), int(actual["static_membership"]),
                           None, None, None, *replayed, actual.get("reproduction_static_replacements"), 1])
    error = actual["reproduction_time_error_ms"]
    return [actual["reproduction_score"], actual["generations_observed"], actual["generations_reproduced"],
            None if error is None else round(error), actual["observed_rebalances"], st(actual["assumptions"]),
            actual["computed_at"], configs]


def best_alternative(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The alternative that saves most against the actual configuration among those that cost no more in
    any of `WHATIF_COSTS` and less in at least one (most unowned partition-time saved, then rebalances,
    members stopped, partitions moved, longest stretch); None when no alternative saves."""
    actual = next((r for r in rows if r["is_actual"]), None)
    if actual is None:
        return None
    saving = [r for r in rows if not r["is_actual"] and all(r[k] <= actual[k] for k in WHATIF_COSTS)
              and any(r[k] < actual[k] for k in WHATIF_COSTS)]
    order = ("unowned_partition_ms", "rebalances", "members_stopped", "partitions_moved", "longest_unowned_ms")
    return min(saving, key=lambda r: (*(r[k] for k in order), r["configuration"]), default=None)


def _whatif_badge(rows: list[dict[str, Any]], st: _Strings) -> list[Any]:
    """The index's what-if cell of a group: [its best alternative's label (None: none saves), the actual
    configuration's reproduction score, what the best alternative saves, one entry per cost]."""
    best = best_alternative(rows)
    actual = next(r for r in rows if r["is_actual"])
    return [None if best is None else st(best["configuration"]), actual["reproduction_score"],
            [] if best is None else [actual[k] - best[k] for k in WHATIF_COSTS]]


def thresholds_of(runs: list[dict[str, Any]]) -> tuple[HealthThresholds, str]:
    """The health thresholds the latest run judged its days with (its `config_json`), and whence."""
    for run in sorted(runs, key=lambda r: r["started_at"] or 0, reverse=True):
        health = json.loads(run["config_json"] or "{}").get("health")
        if health:
            return HealthThresholds(**health), f"run {run['run_id']}"
    return DEFAULT_HEALTH, "the defaults (the runs record none)"


def _violation_summary(all_violations: list[dict[str, Any]]) -> str:
    if not all_violations:
        return "<p class='note'>No violations in any group.</p>"
    by = Counter((human_time(v["record_timestamp"])[:10], v["kind"]) for v in all_violations)
    days, kinds = sorted({d for d, _ in by}), sorted({k for _, k in by})
    head = "<tr><th>day</th>" + "".join(f"<th>{_esc(k)}</th>" for k in kinds) + "<th>total</th></tr>"
    body = "".join(f"<tr><td class='t'>{d}</td>" + "".join(f"<td class='num'>{by.get((d, k), 0)}</td>" for k in kinds)
                   + f"<td class='num'>{sum(by.get((d, k), 0) for k in kinds)}</td></tr>" for d in days)
    latest = sorted(all_violations, key=lambda v: (v["record_timestamp"], v["group_id"], v["kind"]))[-LATEST_VIOLATIONS:]
    rows = "".join(
        f"<tr><td><span class='t'>{_esc(human_time(v['record_timestamp']))}</span></td>"
        f"<td><a href='#group={_esc(_url(v['group_id']))}'>{_esc(v['group_id'])}</a></td>"
        f"<td class='num'>{v['generation_id']}</td><td>{_esc(v['kind'])}</td>"
        f"<td>{_esc(_partition(v))}</td><td>{_esc(v['detail'])}</td>"
        f"<td class='evidence'>{_esc(v['evidence'])}</td></tr>" for v in reversed(latest))
    more = (f"<p class='note'>The latest {len(latest)} of {len(all_violations):,}; "
            "<code>coordinator_audit.jobs.query violations</code> lists and filters them all.</p>"
            if len(latest) < len(all_violations) else "")
    return (f"<table id='violation-counts'>{head}{body}</table>{more}<div class='scroll'><table class='violations all'>"
            "<tr><th>when</th><th>group</th><th>generation</th><th>kind</th><th>partition</th><th>detail</th>"
            f"<th>evidence</th></tr>{rows}</table></div>")


def _partition(v: dict[str, Any]) -> str:
    return f"{v['topic']}-{v['partition']}" if v["topic"] is not None else ""


def _has_table(tables: str, table: str) -> bool:
    """Whether the base path holds the Delta table `table` (an optional one, like `whatif`)."""
    try:
        DeltaTable(f"{tables.rstrip('/')}/{table}")
    except TableNotFoundError:
        return False
    return True


def _url(group: str) -> str:
    return quote(group, safe="")


def build_report(tables: str, *, groups: Sequence[str] = ()) -> str:
    """The report's HTML (module docstring). Raises QueryError when the tables are missing or empty."""
    health = load_rows(tables, "group_health")
    if not health:
        raise QueryError(f"{tables.rstrip('/')}/group_health is empty: nothing to report")
    if groups:
        health = [h for h in health if any(fnmatch.fnmatchcase(h["group_id"], p) for p in groups)]
        if not health:
            raise QueryError(f"no group in {tables.rstrip('/')}/group_health matches {', '.join(groups)}")
    days_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for h in health:
        days_of[h["group_id"]].append(h)
    chosen = set(days_of)

    def by_group(table: str) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in load_rows(tables, table):
            if r["group_id"] in chosen:
                out[r["group_id"]].append(r)
        return out

    ownership, rebalances, violations = by_group("partition_ownership"), by_group("rebalances"), by_group("violations")
    causes, generations = by_group("rebalance_causes"), by_group("generations")
    whatif = by_group("whatif") if _has_table(tables, "whatif") else None
    thresholds, whence = thresholds_of(load_rows(tables, "runs"))

    st = _Strings()
    index: list[tuple[Any, ...]] = []
    data: dict[str, Any] = {}
    for g, days in days_of.items():
        worst = max(days, key=lambda h: (h["flapping_score"], h["violations"], h["day"]))
        index.append((g, st(worst["status"]), worst["flapping_score"], worst["day"], len(days),
                      sum(h["rebalances"] for h in days), max(h["peak_hour_rebalances"] for h in days),
                      sum(h["violations"] for h in days), max(h["day"] for h in days)))
        data[g] = _group_data(ownership.get(g, []), _latest_generations(generations.get(g, [])),
                              rebalances.get(g, []), violations.get(g, []), causes.get(g, []), days, st)
        if whatif is not None:
            compact = _whatif_data(whatif.get(g, []), st)
            if compact is not None:
                data[g]["w"] = compact
            index[-1] += (None if compact is None else _whatif_badge(whatif[g], st),)
    index.sort(key=lambda r: (-r[2], -r[7], r[0]))
    all_violations = [v for rows in violations.values() for v in rows]
    payload = {"strings": st.table(), "index": index, "groups": data, "palette": _OWNER_PALETTE,
               "unowned_colours": UNOWNED_COLOURS, "broker_causes": BROKER_CAUSES, "whatif": whatif is not None}
    # inside <script>: no "</" may close it early
    blob = json.dumps(payload, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    statuses = Counter(st.table()[r[1]] for r in index)
    parts = [
        "<h1>coordinator-audit report</h1>",
        f"<p class='note'>Tables: {_esc(tables)}; generated <span class='t'>"
        f"{human_time(int(datetime.now(UTC).timestamp() * 1000))}</span>; {len(index):,} groups "
        f"({', '.join(f'{statuses[k]:,} {k}' for k in ('flapping', 'unstable', 'healthy') if statuses[k])}). "
        "Times are UTC (ISO 8601).</p>",
        "<h2 id='groups'>Groups, least healthy first</h2>",
        "<p class='note'>Each group by its worst day. Flapping score: the largest of peak rebalances per hour / "
        f"{thresholds.peak_hour_rebalances:g}, share of the observed day spent rebalancing / "
        f"{thresholds.rebalancing_share:g}, share of partition-time unowned by rebalances / "
        f"{thresholds.unowned_share:g}; 1.0 or more is flapping, {thresholds.unstable_score:g} or more unstable "
        f"(thresholds of {_esc(whence)}). Open a group to draw it.</p>",
        "<div class='controls'><input id='search' type='search' placeholder='filter: part of a name, or a glob "
        "(payments-*)' aria-label='filter groups'> <select id='status' aria-label='status'>"
        "<option value=''>any status</option><option>flapping</option><option>unstable</option>"
        "<option>healthy</option></select> <span id='count' class='note'></span></div>",
        "<div class='scroll'><table id='index'><thead><tr><th>group</th><th>status</th><th>flapping score</th>"
        "<th>worst day</th><th>days</th><th>rebalances</th><th>peak / hour</th><th>violations</th>"
        "<th>last day</th>" + ("<th><abbr title='the alternative configuration (coordinator-audit whatif) that "
                               "saves most while costing no more in anything; marked when the night&#39;s own "
                               "configuration does not reproduce it exactly'>what-if</abbr></th>"
                               if whatif is not None else "") + "</tr></thead><tbody></tbody></table></div>",
        "<div id='group-view'></div>",
        f"<h2 id='violations'>Violations ({len(all_violations):,}, every group)</h2>",
        _violation_summary(all_violations),
        f"<script type='application/json' id='report-data'>{blob}</script>",
        f"<script>{get_plotlyjs()}</script>",
        f"<script>{_APP_JS}</script>",
    ]
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>coordinator-audit report</title>"
            f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"{PROG} report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES)
    p.add_argument("--tables", required=True, metavar="PATH", help="base path of the audit's Delta tables")
    p.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--group", action="append", default=[], metavar="GLOB", help="only these groups (repeatable)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if not Path(args.tables).exists() and "://" not in args.tables:
            raise QueryError(f"--tables {args.tables}: no such directory")
        page = build_report(args.tables, groups=args.group)
    except CoordinatorAuditError as exc:
        print(f"{PROG} report: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    print(f"report: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0
