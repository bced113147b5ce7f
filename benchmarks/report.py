"""The benchmark's report: the figures derived from the measurements, the targets (issues 9, 17 and
18) with the measured value and whether each is met, the printed table and `benchmark.json`.

`python -m benchmarks.report --table docs/benchmarks.md [bench/benchmark.json]` turns a
`benchmark.json` into one Markdown table of its figures (`markdown_table`), headed by the machine,
the command and the input it came from."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["STAGES", "TARGETS", "command_line", "figures", "main", "markdown_table", "print_report", "ratios",
           "targets", "write_report"]

TARGETS: dict[str, str] = {
    "audit_marginal_over_bare_scan_marginal": "<= 2.0 (slope 5M-40M records, best of two per point)",
    "offset_path_marginal_over_bare_scan_marginal": "<= 1.5 (slope 5M-40M records)",
    "audit_fixed_seconds": "<= 6 (warm audit, intercept of the same fit)",
    "peer_over_audit": ">= 3.0",
    "python_worker_peak_bounded": "Python worker peak RSS at the largest point <= 1.25 x the smallest",
    "replay_share": "< 0.20 of the warm audit",
    "delta_input_audit_marginal_over_bare_scan_marginal": "<= 2.0 (Delta input, over its bare scan)",
    "delta_input_audit_fixed_seconds": "<= 6 (Delta input, intercept)",
    "kafka_input_audit_marginal_over_bare_scan_marginal": "<= 2.0 (Kafka input, over its bare scan)",
    "kafka_input_audit_fixed_seconds": "<= 6 (Kafka input, intercept)",
    "offset_path_over_bare_scan": "<= 1.5 (at >= 20M records)",
    "audit_over_bare_scan": "<= 2.0 (at >= 20M records)",
    "single_group_peak_rss_mib": "< 1024 (5M commit records)",
    "scaling_linear": "audit's marginal cost per record, last segment <= 1.25 x first",
    "derived_tables_cost": "audit with derived tables <= 1.25 x without",
}
STAGES: dict[str, tuple[str, ...]] = {"offset_path": ("pass", "replay"), "audit": ("pass", "replay", "write")}
"""The stages whose slopes the figures give (`<kind>_<stage>_marginal_s_per_million` and over the
bare scan's): the offset path's single pass and its replay; the audit's single pass, its replay
stage (the groups' replay, the derived tables, the files its tasks write) and its tables' commit
(`benchmarks.measures.stage_seconds`). They show which part of a marginal ratio is whose."""
LINEARITY_TOLERANCE = 1.25
WORKER_MEMORY_GROWTH = 1.25
"""How much more the Python workers' peak may be at the largest scaling input than at the smallest
for their memory to count as bounded by the chunk size (`job.scan_chunk_rows`), not by the input."""


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fit(m: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    return (((m.get(section) or {}).get("fits") or {}).get(name)) or {}


def ratios(report: dict[str, Any]) -> dict[str, float | None]:
    """Single-input ratios of the main input's warm runs."""
    m, bare = report["measurements"], report.get("bare_scan_seconds")
    secs = {k: (m.get(k) or {}).get("seconds") for k in ("audit", "audit_first", "offset_path", "peer")}
    return {
        "audit_over_bare_scan": _ratio(secs["audit"], bare),
        "offset_path_over_bare_scan": _ratio(secs["offset_path"], bare),
        "peer_over_audit": _ratio(secs["peer"], secs["audit"]),
        "audit_first_over_bare_scan": _ratio(secs["audit_first"], bare),
        "peer_over_audit_first": _ratio(secs["peer"], secs["audit_first"]),
        "derived_over_base": _ratio((m.get("derived") or {}).get("best_with"),
                                    (m.get("derived") or {}).get("best_without")),
    }


def figures(report: dict[str, Any]) -> dict[str, Any]:
    """The fitted figures: marginal costs (least-squares slopes, seconds per million records) over
    the bare scan's on the same inputs, the audit's fixed cost (intercept), the Python workers'
    peak over the scaling inputs, the replay's share of the warm audit, and the same for the
    Delta input and the Kafka input (over a bare scan of that input, and over the Parquet bare scan);
    the `fixed_groups` series' slopes (`fixed_groups_*`: the cost per record with the output held
    fixed)."""
    m = report["measurements"]
    bare, offsets, audit, floor, arrow_floor = (_fit(m, "scaling", k) for k in (
        "bare_scan", "offset_path", "audit", "output_write", "output_write_arrow"))
    py_read, jvm_summary = (_fit(m, "scaling", k) for k in ("python_read", "jvm_commit_summary"))
    d_bare, d_audit = (_fit(m, "delta_input", k) for k in ("bare_scan", "audit"))
    k_bare, k_audit, k_read = (_fit(m, "kafka_input", k) for k in ("bare_scan", "audit", "python_read"))
    g_bare, g_offsets, g_audit, g_read = (_fit(m, "fixed_groups", k)
                                          for k in ("bare_scan", "offset_path", "audit", "python_read"))
    slope = "slope_s_per_million_records"
    peaks = [(p["records"], (p.get("audit") or {}).get("python_worker_peak_hwm_mib"))
             for p in (m.get("scaling") or {}).get("points", [])]
    peaks = [(n, v) for n, v in peaks if v]
    share = (m.get("replay_share") or {}).get("share")
    stages = {f"{kind}_{stage}": _fit(m, "scaling", f"{kind}_{stage}").get(slope) for kind, names in STAGES.items()
              for stage in names}
    return {
        "bare_scan_marginal_s_per_million": bare.get(slope),
        "offset_path_marginal_s_per_million": offsets.get(slope),
        "audit_marginal_s_per_million": audit.get(slope),
        "audit_marginal_over_bare_scan_marginal": _ratio(audit.get(slope), bare.get(slope)),
        "offset_path_marginal_over_bare_scan_marginal": _ratio(offsets.get(slope), bare.get(slope)),
        "audit_fixed_seconds": audit.get("intercept_s"),
        "output_write_marginal_s_per_million": floor.get(slope),
        "output_write_marginal_over_bare_scan_marginal": _ratio(floor.get(slope), bare.get(slope)),
        "output_write_arrow_marginal_s_per_million": arrow_floor.get(slope),
        "output_write_arrow_marginal_over_bare_scan_marginal": _ratio(arrow_floor.get(slope), bare.get(slope)),
        "offset_path_fixed_seconds": offsets.get("intercept_s"),
        "python_read_marginal_s_per_million": py_read.get(slope),
        "python_read_marginal_over_bare_scan_marginal": _ratio(py_read.get(slope), bare.get(slope)),
        "jvm_commit_summary_marginal_s_per_million": jvm_summary.get(slope),
        "jvm_commit_summary_marginal_over_bare_scan_marginal": _ratio(jvm_summary.get(slope), bare.get(slope)),
        **{f"{name}_marginal_s_per_million": v for name, v in stages.items()},
        **{f"{name}_marginal_over_bare_scan_marginal": _ratio(v, bare.get(slope)) for name, v in stages.items()},
        "peer_over_audit": report["ratios"]["peer_over_audit"],
        "python_worker_peak_rss_mib": max((v for _, v in peaks), default=None),
        "python_worker_peak_rss_growth": _ratio(peaks[-1][1], peaks[0][1]) if len(peaks) >= 2 else None,
        "replay_share": share,
        "delta_input_bare_scan_marginal_s_per_million": d_bare.get(slope),
        "delta_input_audit_marginal_s_per_million": d_audit.get(slope),
        "delta_input_audit_marginal_over_bare_scan_marginal": _ratio(d_audit.get(slope), d_bare.get(slope)),
        "delta_input_audit_marginal_over_parquet_bare_scan_marginal": _ratio(d_audit.get(slope), bare.get(slope)),
        "delta_input_audit_fixed_seconds": d_audit.get("intercept_s"),
        "kafka_input_bare_scan_marginal_s_per_million": k_bare.get(slope),
        "kafka_input_audit_marginal_s_per_million": k_audit.get(slope),
        "kafka_input_audit_marginal_over_bare_scan_marginal": _ratio(k_audit.get(slope), k_bare.get(slope)),
        "kafka_input_audit_marginal_over_parquet_bare_scan_marginal": _ratio(k_audit.get(slope), bare.get(slope)),
        "kafka_input_bare_scan_marginal_over_parquet_bare_scan_marginal": _ratio(k_bare.get(slope), bare.get(slope)),
        "kafka_input_python_read_marginal_over_bare_scan_marginal": _ratio(k_read.get(slope), k_bare.get(slope)),
        "kafka_input_audit_fixed_seconds": k_audit.get("intercept_s"),
        "fixed_groups_bare_scan_marginal_s_per_million": g_bare.get(slope),
        "fixed_groups_audit_marginal_s_per_million": g_audit.get(slope),
        "fixed_groups_audit_marginal_over_bare_scan_marginal": _ratio(g_audit.get(slope), g_bare.get(slope)),
        "fixed_groups_offset_path_marginal_over_bare_scan_marginal": _ratio(g_offsets.get(slope), g_bare.get(slope)),
        "fixed_groups_python_read_marginal_over_bare_scan_marginal": _ratio(g_read.get(slope), g_bare.get(slope)),
        "fixed_groups_audit_fixed_seconds": g_audit.get("intercept_s"),
    }


def targets(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target of `TARGETS` with its measured value and whether it is met (None: not measured)."""
    r, f, m = report["ratios"], report["figures"], report["measurements"]
    big = report["input"]["rows"] >= 20_000_000
    single = (m.get("memory") or {}).get("single_group") or {}
    audit_fit = _fit(m, "scaling", "audit")

    def check(name: str, value: Any, wanted: Any, note: str = "") -> dict[str, Any]:
        met = None if value is None else bool(wanted(value))
        return {"target": TARGETS[name], "value": value, "met": met, **({"note": note} if note else {})}

    size_note = "" if big else "input below 20M records: the target is stated at >= 20M"
    points = len((m.get("scaling") or {}).get("points", []))
    fit_note = "" if points >= 4 or not points else f"{points} scaling points: the target is stated on 5M-40M"
    floor = f.get("output_write_marginal_over_bare_scan_marginal")
    arrow_floor = f.get("output_write_arrow_marginal_over_bare_scan_marginal")
    floor_note = "; ".join(x for x in (fit_note, "" if floor is None else (
        f"floor of the native writer: Spark writing the audit's output rows alone costs {floor:.1f}x the bare "
        f"scan's marginal"), "" if arrow_floor is None else (
        f"floor of the embedded writer (the one measured): pyarrow writing them costs {arrow_floor:.1f}x")) if x)
    read_floors = [(what, f.get(key)) for what, key in (
        ("reading the single pass's columns with pyarrow in the Python workers, nothing else done",
         "python_read_marginal_over_bare_scan_marginal"),
        ("the JVM's plainest commit summary (group by key, count, min/max offset; no decoding, no order)",
         "jvm_commit_summary_marginal_over_bare_scan_marginal"))]
    read_note = "; ".join(f"floor: {what} costs {v:.1f}x the bare scan's marginal" for what, v in read_floors
                          if v is not None)
    floor_note = "; ".join(x for x in (floor_note, read_note) if x)
    offset_note = "; ".join(x for x in (fit_note, read_note) if x)
    per_record = [(name, f.get(f"fixed_groups_{name}_marginal_over_bare_scan_marginal")) for name in ("audit", "offset_path")]
    per_record_notes = {name: "" if v is None else (
        f"per record with the output held fixed (--groups groups at every point, `fixed_groups`): {v:.1f}x")
        for name, v in per_record}
    stage_notes = {kind: ", ".join(f"{stage} {v:.1f}x" for stage in names if (
        v := f.get(f"{kind}_{stage}_marginal_over_bare_scan_marginal")) is not None) for kind, names in STAGES.items()}
    stage_notes = {kind: f"by stage, over the bare scan's marginal: {x}" if x else "" for kind, x in stage_notes.items()}
    floor_note = "; ".join(x for x in (floor_note, per_record_notes["audit"], stage_notes["audit"]) if x)
    offset_note = "; ".join(x for x in (offset_note, per_record_notes["offset_path"], stage_notes["offset_path"]) if x)
    peak_note = (f"peak {f['python_worker_peak_rss_mib']:,.0f} MiB" if f["python_worker_peak_rss_mib"] else "")
    kafka_note = ("" if f.get("kafka_input_bare_scan_marginal_over_parquet_bare_scan_marginal") is None else
                  f"floor: Spark's Kafka source alone reads at "
                  f"{f['kafka_input_bare_scan_marginal_over_parquet_bare_scan_marginal']:.1f}x the Parquet bare scan's "
                  f"marginal")
    k_floor = f.get("kafka_input_python_read_marginal_over_bare_scan_marginal")
    if k_floor is not None:
        kafka_note = "; ".join(x for x in (f"floor: handing its records to the Python workers, nothing else "
                                           f"done, costs {k_floor:.1f}x its bare scan's marginal", kafka_note) if x)
    single_note = "" if single.get("commits", 5_000_000) >= 5_000_000 else "fewer than 5M commits: not the target's run"
    return {
        "audit_marginal_over_bare_scan_marginal": check(
            "audit_marginal_over_bare_scan_marginal", f["audit_marginal_over_bare_scan_marginal"],
            lambda v: v <= 2.0, floor_note),
        "offset_path_marginal_over_bare_scan_marginal": check(
            "offset_path_marginal_over_bare_scan_marginal", f["offset_path_marginal_over_bare_scan_marginal"],
            lambda v: v <= 1.5, offset_note),
        "audit_fixed_seconds": check("audit_fixed_seconds", f["audit_fixed_seconds"], lambda v: v <= 6.0, fit_note),
        "peer_over_audit": check("peer_over_audit", r["peer_over_audit"], lambda v: v >= 3.0),
        "python_worker_peak_bounded": check(
            "python_worker_peak_bounded", f["python_worker_peak_rss_growth"],
            lambda v: v <= WORKER_MEMORY_GROWTH, peak_note),
        "replay_share": check("replay_share", f["replay_share"], lambda v: v < 0.20),
        "delta_input_audit_marginal_over_bare_scan_marginal": check(
            "delta_input_audit_marginal_over_bare_scan_marginal",
            f["delta_input_audit_marginal_over_bare_scan_marginal"], lambda v: v <= 2.0),
        "delta_input_audit_fixed_seconds": check(
            "delta_input_audit_fixed_seconds", f["delta_input_audit_fixed_seconds"], lambda v: v <= 6.0),
        "kafka_input_audit_marginal_over_bare_scan_marginal": check(
            "kafka_input_audit_marginal_over_bare_scan_marginal",
            f["kafka_input_audit_marginal_over_bare_scan_marginal"], lambda v: v <= 2.0, kafka_note),
        "kafka_input_audit_fixed_seconds": check(
            "kafka_input_audit_fixed_seconds", f["kafka_input_audit_fixed_seconds"], lambda v: v <= 6.0, kafka_note),
        "offset_path_over_bare_scan": check(
            "offset_path_over_bare_scan", r["offset_path_over_bare_scan"], lambda v: v <= 1.5, size_note),
        "audit_over_bare_scan": check("audit_over_bare_scan", r["audit_over_bare_scan"], lambda v: v <= 2.0,
                                      size_note),
        "single_group_peak_rss_mib": check(
            "single_group_peak_rss_mib", single.get("peak_rss_mib"),
            lambda v: v < 1024 and single.get("commits", 0) >= 5_000_000, single_note),
        "scaling_linear": check("scaling_linear", audit_fit.get("marginal_ratio"),
                                lambda v: v <= LINEARITY_TOLERANCE),
        "derived_tables_cost": check("derived_tables_cost", r.get("derived_over_base"), lambda v: v <= 1.25),
    }


def write_report(report: dict[str, Any], out_dir: Path) -> Path:
    """Writes `<out_dir>/benchmark.json` and returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "benchmark.json"
    out_file.write_text(json.dumps(report, indent=1, default=str))
    return out_file


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _print_fits(title: str, section: dict[str, Any], kinds: tuple[str, ...], out: Any) -> None:
    pts = section.get("points", [])
    print(f"\n{title}: best of {section.get('runs_per_point', 2)} runs per point (seconds)", file=out)
    width = {k: max(14, len(k)) for k in kinds}
    print(f"{'records':>12} " + " ".join(f"{k:>{width[k]}}" for k in kinds), file=out)
    for p in pts:
        print(f"{p['records']:>12,} " + " ".join(f"{_fmt((p.get(k) or {}).get('seconds'), '.2f'):>{width[k]}}"
                                                  for k in kinds), file=out)
    fits = section.get("fits", {})
    for k in kinds:
        f = fits.get(k) or {}
        print(f"  {k:<18} slope {_fmt(f.get('slope_s_per_million_records'), '.3f')} s per M records, intercept "
              f"{_fmt(f.get('intercept_s'), '.2f')} s, r2 {_fmt(f.get('r2'), '.4f')}, marginal last/first segment "
              f"{_fmt(f.get('marginal_ratio'), '.2f')}", file=out)


def print_report(report: dict[str, Any], *, out: Any = None) -> None:
    out = out or sys.stdout
    m, rows = report["measurements"], report["input"]["rows"]
    base = report["bare_scan_seconds"]
    env = report["environment"]
    print(f"\ncoordinator-audit benchmark: {rows:,} records, {report['parameters']['groups']:,} groups "
          f"(seed {report['parameters']['seed']}), master {report['parameters']['master']}, "
          f"load average {env['loadavg_start']} -> {env['loadavg_end']}"
          + (f" (highest 1-min load seen {env['loadavg_max_1min']})" if env.get("loadavg_max_1min") else ""),
          file=out)
    print(f"{'measurement':<40} {'seconds':>9} {'records/s':>12} {'x bare scan':>12}", file=out)

    def line(name: str, secs: float | None, n: int | None = rows) -> None:
        rate = n / secs if secs and n else None
        print(f"{name:<40} {_fmt(secs, '9.2f'):>9} {_fmt(rate, '12,.0f'):>12} "
              f"{_fmt(_ratio(secs, base), '12.2f'):>12}", file=out)

    if m.get("bare_scan"):
        line("bare scan (first)", m["bare_scan"]["first"]["seconds"])
        line("bare scan (last)", (m["bare_scan"].get("last") or {}).get("seconds"))
    if m.get("offset_path"):
        o = m["offset_path"]
        line("offset path (both outputs)", o["seconds"])
        line("  the single pass (scan_log)", o.get("scan_seconds"))
        line("  offset_commits", o.get("offset_commits_seconds"))
        line("  offset_regression violations", o.get("offset_regression_seconds"))
    if m.get("audit_first"):
        line("audit, first job of the session", m["audit_first"]["seconds"])
        for st in m["audit_first"].get("stages") or []:
            print(f"    {st}", file=out)
    if m.get("audit"):
        line("audit (end to end, Delta written)", m["audit"]["seconds"])
        for s in m["audit"].get("stages") or []:
            print(f"    {s}", file=out)
    if m.get("derived"):
        d = m["derived"]
        print(f"audit with derived tables {', '.join(f'{x:.2f}' for x in d['with_seconds'])} s, without "
              f"{', '.join(f'{x:.2f}' for x in d['without_seconds'])} s (best of each: "
              f"{_fmt(d['best_with'], '.2f')} / {_fmt(d['best_without'], '.2f')} s)", file=out)
    if m.get("peer"):
        line("hand-written peer (Python UDF)", m["peer"]["seconds"])
    if m.get("replay_share"):
        rs = m["replay_share"]
        print(f"replay share of the warm audit: {_fmt(rs.get('share'), '.1%')} (feeding records through the groups' "
              f"audits: {_fmt(rs.get('replay_feed_seconds'), '.2f')} s of Python time in {_fmt(rs.get('audit_seconds'), '.2f')} s "
              f"x {rs.get('cores')} cores; merging the offset-commit stretches "
              f"{_fmt(rs.get('replay_merge_seconds'), '.2f')} s; the whole replay stage "
              f"{_fmt(rs.get('replay_stage_seconds'), '.2f')} s of wall time, {_fmt(rs.get('stage_share'), '.1%')})",
              file=out)
    if m.get("replay"):
        rp = m["replay"]
        print(f"replay, one core: {_fmt(rp['group_metadata_per_s'], ',.0f')} GroupMetadata records/s "
              f"({rp['group_metadata_records']:,} records, {rp['groups']:,} groups); "
              f"{_fmt(rp['commits_per_s'], ',.0f')} offset commits/s ({rp['commit_records']:,} commits)", file=out)
    if m.get("whatif"):
        w = m["whatif"]
        print(f"what-if sweep, one core: {w['groups']:,} simulated groups, audit {_fmt(w['audit_cpu_seconds'], '.2f')} "
              f"CPU s, sweep (fit + {w['configurations']} configurations) {_fmt(w['sweep_cpu_seconds'], '.1f')} CPU s: "
              f"{_fmt(w['sweep_over_audit'], ',.0f')}x; {w['reproduced_fully']} of {w['swept']} groups reproduced in "
              f"every generation; 5,000 such groups: sweep {_fmt(w['sweep_seconds_for_5000_groups'], ',.0f')} s",
              file=out)
        if w.get("sweep_pool_wall_seconds") is not None:
            print(f"what-if sweep, {w['workers']} workers: wall {_fmt(w['sweep_pool_wall_seconds'], '.1f')} s, "
                  f"{_fmt(w['sweep_pool_over_audit'], ',.0f')}x the audit on one core (CPU "
                  f"{_fmt(_ratio(w.get('sweep_pool_cpu_seconds'), w['sweep_cpu_seconds']), '.2f')}x one process's); "
                  f"5,000 such groups: {_fmt(w['sweep_pool_seconds_for_5000_groups'], ',.0f')} s", file=out)
        if w.get("product_groups"):
            print(f"what-if through the product, {w['product_groups']:,} groups ({w['product_records']:,} records): "
                  f"coordinator-audit run {_fmt(w['product_audit_wall_seconds'], '.1f')} s, whatif --sweep "
                  f"({w['product_workers']} workers) {_fmt(w['product_sweep_wall_seconds'], '.1f')} s: "
                  f"{_fmt(w['product_sweep_over_audit'], '.1f')}x", file=out)
    mem = m.get("memory") or {}
    if mem.get("audit"):
        a = mem["audit"]
        print(f"memory during the audit: Python worker peak {a['python_worker_peak_hwm_mib']:,.0f} MiB "
              f"(sampled RSS {a['python_worker_peak_rss_mib']:,.0f}, all workers together "
              f"{a['python_workers_sum_peak_rss_mib']:,.0f}); driver JVM {a['driver_jvm_hwm_mib']:,.0f} MiB, "
              f"driver Python {a['driver_python_peak_rss_mib']:,.0f} MiB", file=out)
    if mem.get("single_group"):
        sg = mem["single_group"]
        print(f"memory, one group with {sg['commits']:,} commits through GroupAuditor: peak RSS "
              f"{sg['peak_rss_mib']:,.0f} MiB (before the commits {sg['baseline_rss_mib']:,.0f} MiB), "
              f"{sg['commits_per_s']:,.0f} commits/s", file=out)
    if m.get("scaling"):
        stage_kinds = tuple(f"{kind}_{stage}" for kind, names in STAGES.items() for stage in names
                            if f"{kind}_{stage}" in m["scaling"].get("fits", {}))
        _print_fits("scaling (Parquet input)", m["scaling"], ("bare_scan", "offset_path", "audit", "output_write",
                                                             "output_write_arrow",
                                                             "python_read", "jvm_commit_summary", *stage_kinds), out)
        print("  output_write: Spark writing the rows the audit wrote (in memory) as Parquet: the floor of an "
              "audit written by Spark (the native writer)", file=out)
        print("  output_write_arrow: pyarrow writing the same rows, one thread per core: the floor of the embedded "
              "writer's audit (measured here)", file=out)
        print("  python_read: the single pass's columns read with pyarrow in the Python workers, nothing done: "
              "the floor of a pass in Python", file=out)
        print("  jvm_commit_summary: group the commit records by key, count, min/max offset, in Spark alone: "
              "the floor of a pass kept in the JVM", file=out)
        if stage_kinds:
            print("  offset_path_pass, offset_path_replay, audit_pass, audit_replay, audit_write: the stages of the "
                  "two (the single pass; the per-group replay, with the audit's derived tables and the files its "
                  "tasks write; the tables' commit), each the best of its point's runs", file=out)
        peaks = ", ".join(f"{p['records']:,}: {_fmt((p.get('audit') or {}).get('python_worker_peak_hwm_mib'), ',.0f')}"
                          for p in m["scaling"]["points"])
        print(f"  Python worker peak RSS (MiB) during the audit by input: {peaks}", file=out)
    if m.get("fixed_groups"):
        _print_fits(f"fixed groups (Parquet input, {report['parameters']['groups']:,} groups at every point: the same "
                    "output, only the commit rounds grow, so a slope is the cost per record)", m["fixed_groups"],
                    ("bare_scan", "offset_path", "audit", "python_read"), out)
        rows_by_point = ", ".join(f"{p['records']:,}: {_fmt((p.get('audit') or {}).get('output_rows'), ',')}"
                                  for p in m["fixed_groups"]["points"])
        print(f"  rows the audit wrote by input: {rows_by_point}", file=out)
    if m.get("delta_input"):
        _print_fits("Delta input (input.format = delta)", m["delta_input"], ("bare_scan", "audit"), out)
    if (m.get("kafka_input") or {}).get("error"):
        print(f"\nKafka input: not measured ({m['kafka_input']['error']})", file=out)
    elif m.get("kafka_input"):
        k = m["kafka_input"]
        _print_fits("Kafka input (--kafka-bootstrap, Spark's Kafka source)", k, ("bare_scan", "python_read", "audit"),
                    out)
        print("  python_read: the records through Spark's Kafka source to the Python workers, counted there: "
              "the floor of a pass in Python over this input", file=out)
        for p in k["points"]:
            load = p.get("load") or {}
            print(f"  {p['records']:,} records loaded into a Kafka {p.get('broker')} broker in "
                  f"{_fmt(load.get('seconds'), '.1f')} s" + (f" (FAILED: {load['error']})" if load.get("error") else ""),
                  file=out)
    print("\nfigures: " + ", ".join(f"{k} {_fmt(v, '.3f') if isinstance(v, float) else _fmt(v, '')}"
                                    for k, v in report["figures"].items()), file=out)
    print("ratios: " + ", ".join(f"{k} {_fmt(v, '.2f')}" for k, v in report["ratios"].items()), file=out)
    print(f"{'target':<48} {'wanted':<84} {'value':>10}  met", file=out)
    for name, t in report["targets"].items():
        v = t["value"]
        shown = _fmt(v, ",.0f" if abs(v) >= 1000 else ",.3f") if isinstance(v, float) else _fmt(v, ",")
        met = {True: "yes", False: "NO", None: "-"}[t["met"]]
        print(f"{name:<48} {t['target']:<84} {shown:>10}  {met}{'  (' + t['note'] + ')' if t.get('note') else ''}",
              file=out)


# ------------------------------------------------------------------------------------------------
# the Markdown table of a benchmark.json (docs/benchmarks.md)


def command_line(parameters: dict[str, Any]) -> str:
    """The `python -m benchmarks` command that reproduces `parameters` (a benchmark.json's): every
    option whose value differs from the command's default, paths and process options left out."""
    from benchmarks.harness import parse_args  # the command's own defaults

    given = json.loads(json.dumps(parameters, default=str))
    defaults = json.loads(json.dumps(vars(parse_args([])), default=str))
    # --scaling-base's default follows --records: compare it with the default of the same --records
    same_records = vars(parse_args(["--records", str(given.get("records", defaults["records"]))]))
    defaults["scaling_base"] = same_records["scaling_base"]
    words = ["python -m benchmarks"]
    for key, value in given.items():
        if key in ("cache_dir", "out", "work_dir", "keep_output", "in_process", "gen_workers") or key not in defaults:
            continue
        if value == defaults[key] or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{key.replace('_', '-')}")
        elif key == "skip":
            words.append(f"{flag} {','.join(value)}")
        elif key == "conf":
            words.extend(f"{flag} {item}" for item in value)
        elif isinstance(value, list):
            words.append(f"{flag} {','.join(str(v) for v in value)}")
        else:
            words.append(f"{flag} {value}")
    return " ".join(words)


def _cell(v: Any, spec: str = ",.3f") -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return format(v, ",.0f" if abs(v) >= 1000 else spec)
    return format(v, ",") if isinstance(v, int) else str(v)


def markdown_table(report: dict[str, Any], *, source: str = "benchmark.json") -> str:
    """One Markdown table of a benchmark report's figures: the wall times of the main input's runs
    (with records/s and the ratio to the bare scan), the fitted series (slope in seconds per million
    records, intercept), memory, and every target with a measured value (and its note). The
    header names the machine, the command and the input; a measurement the run skipped has no row."""
    m, env, params = report["measurements"], report.get("environment") or {}, report.get("parameters") or {}
    rows_in, bare = report["input"]["rows"], report.get("bare_scan_seconds")
    lines = ["# Benchmark figures", "",
             f"Generated by `python -m benchmarks.report --table` from `{source}`; regenerate after a run of "
             "`python -m benchmarks` (README, Benchmarks). Wall-clock seconds on a machine shared with other "
             "work: compare ratios within one run.", ""]
    machine = ", ".join(x for x in (
        f"{env['cpus']} CPUs" if env.get("cpus") else "", env.get("cpu_model", ""), env.get("platform", ""),
        f"Python {env['python']}" if env.get("python") else "", f"Spark {env['spark']}" if env.get("spark") else "",
        f"master {env.get('master') or params.get('master', '')}",
        f"1-min load average {env['loadavg_start'][0]} at the start, {env['loadavg_end'][0]} at the end"
        + (f", {env['loadavg_max_1min']} at most" if env.get("loadavg_max_1min") else "")
        if env.get("loadavg_start") and env.get("loadavg_end") else "") if x)
    config = (report["input"].get("config") or {})
    lines += [f"- machine: {machine}",
              f"- command: `{command_line(params)}`",
              f"- input: {rows_in:,} records of {config.get('groups', params.get('groups')):,} groups "
              f"({_cell(report['input'].get('bytes'))} bytes of Parquet, seed {config.get('seed', params.get('seed'))})"
              + (", scaling points " + ", ".join(f"{p['records']:,}" for p in m["scaling"]["points"])
                 if (m.get("scaling") or {}).get("points") else ""),
              "", "| figure | value | x bare scan | target | met |", "|---|---|---|---|---|"]

    def row(name: str, value: str, ratio: float | None = None, target: str = "", met: bool | None = None) -> None:
        lines.append(f"| {name} | {value} | {_cell(ratio, '.2f')} | {target} | {_cell(met)} |")

    def timed(name: str, secs: float | None) -> None:
        if secs:
            row(name, f"{secs:.2f} s ({rows_in / secs:,.0f} records/s)", _ratio(secs, bare))

    timed("bare scan (Parquet, the floor)", bare)
    timed("offset path alone", (m.get("offset_path") or {}).get("seconds"))
    timed("audit, first job of the session", (m.get("audit_first") or {}).get("seconds"))
    timed("audit, warm (every Delta table written)", (m.get("audit") or {}).get("seconds"))
    for stage, secs in ((m.get("audit") or {}).get("stage_seconds") or {}).items():
        if secs:
            row(f"warm audit: stage {stage}", f"{secs:.2f} s", _ratio(secs, bare))
    timed("hand-written peer (Python UDF + groupBy)", (m.get("peer") or {}).get("seconds"))
    derived = m.get("derived") or {}
    if derived.get("best_without"):
        row("warm audit without the derived tables", f"{derived['best_without']:.2f} s",
            _ratio(derived["best_without"], bare))
    audit_mem = (m.get("memory") or {}).get("audit") or {}
    if audit_mem.get("python_worker_peak_hwm_mib"):
        row("Python worker peak RSS during the audit", f"{audit_mem['python_worker_peak_hwm_mib']:,.0f} MiB")
    w = m.get("whatif") or {}
    if w:
        row(f"what-if, one core: audit of {w['groups']:,} simulated groups", f"{w['audit_cpu_seconds']:.3f} CPU s")
        row(f"what-if, one core: sweep of the same (fit + {w['configurations']} configurations)",
            f"{w['sweep_cpu_seconds']:.2f} CPU s ({_cell(w['sweep_over_audit'], ',.0f')}x the audit; "
            f"{w['reproduced_fully']} of {w['swept']} reproduced in every generation)")
    if w.get("product_groups"):
        row(f"what-if: `coordinator-audit run` on {w['product_groups']:,} simulated groups",
            f"{w['product_audit_wall_seconds']:.1f} s ({w['product_records']:,} records)")
        row(f"what-if: `coordinator-audit whatif --sweep` on the same ({w['product_workers']} workers)",
            f"{w['product_sweep_wall_seconds']:.1f} s ({w['product_sweep_over_audit']:.1f}x the run)")
    for section, title in (("scaling", "scaling"), ("fixed_groups", "fixed groups"), ("delta_input", "Delta input"),
                           ("kafka_input", "Kafka input")):
        for kind, fit in ((m.get(section) or {}).get("fits") or {}).items():
            if fit.get("slope_s_per_million_records") is not None:
                row(f"{title}: {kind}", f"{fit['slope_s_per_million_records']:.3f} s per M records, intercept "
                    f"{fit['intercept_s']:.2f} s")
    for name, t in (report.get("targets") or {}).items():
        if t.get("value") is not None:
            target = t["target"] + (f"; {t['note']}" if t.get("note") else "")
            row(name, _cell(t["value"]), target=target.replace("|", "/"), met=t["met"])
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report",
                                description="Writes one Markdown table of a benchmark.json's figures.")
    p.add_argument("report", nargs="?", type=Path, default=Path("bench") / "benchmark.json",
                   help="the benchmark.json to read (default bench/benchmark.json)")
    p.add_argument("--table", type=Path, required=True, help="the Markdown file to write, e.g. docs/benchmarks.md")
    args = p.parse_args(argv)
    if not args.report.is_file():
        print(f"benchmarks.report: {args.report}: no such file (run python -m benchmarks first)", file=sys.stderr)
        return 2
    rep = json.loads(args.report.read_text())
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(markdown_table(rep, source=args.report.name))
    print(f"{args.table}: {len(rep['measurements'])} measurements of {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
