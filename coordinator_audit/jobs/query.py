"""Answers to the questions operators ask, read from the audit's Delta tables (no Spark needed).

    coordinator-audit query --tables out/delta owner --group G --topic T --partition P --at TIME
    coordinator-audit query --tables out/delta timeline --group G [--since TIME] [--until TIME]
    coordinator-audit query --tables out/delta worst [--day YYYY-MM-DD] [--limit N]

The tables are read as stored with `coordinator_audit.jobs.delta_read` (filtered by group where one is given): each row
is stored once, however many nightly runs wrote the output (`coordinator_audit.jobs.derived_step`). Times print as UTC ISO-8601 with milliseconds, durations in seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from coordinator_audit.cli import EXIT_CODES, PROG
from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.jobs.config import parse_timestamp
from coordinator_audit.jobs.delta_read import read_arrow

__all__ = ["WORST_LIMIT", "QueryError", "human_duration", "human_time", "load_rows", "main", "owner_at", "timeline",
           "worst"]

WORST_LIMIT = 10
"""How many groups `worst` lists unless told."""


class QueryError(CoordinatorAuditError):
    """The question cannot be answered from the tables; the message says what is missing and where."""


def human_time(ms: int | None) -> str:
    if ms is None:
        return "now (still current)"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def human_duration(ms: int | None) -> str:
    if ms is None:
        return "ongoing"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.2f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def load_rows(tables: str, table: str, *, group: str | None = None) -> list[dict[str, Any]]:
    """Rows of one Delta table under the base path `tables` (only `group`'s when given)."""
    uri = f"{tables.rstrip('/')}/{table}"
    try:
        dt = DeltaTable(uri)
    except TableNotFoundError:
        raise QueryError(f"no Delta table {table!r} at {uri} (run `coordinator-audit run --output {tables}` first)") from None
    rows: list[dict[str, Any]] = read_arrow(uri, dt=dt, equals=None if group is None else ("group_id", group)
                                            ).to_pylist()  # pyarrow: untyped
    return rows


def _known_group(tables: str, group: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        raise QueryError(f"group {group!r}: not in {tables.rstrip('/')}/partition_ownership "
                         f"(no assignment of it was audited)")


def owner_at(tables: str, *, group: str, topic: str, partition: int, at: int) -> list[dict[str, Any]]:
    """The interval(s) of partition_ownership covering `at` (two when a violation gave a partition
    two owners); raises QueryError when the group or the partition is unknown."""
    rows = load_rows(tables, "partition_ownership", group=group)
    _known_group(tables, group, rows)
    mine = [r for r in rows if r["topic"] == topic and r["partition"] == partition]
    if not mine:
        known = sorted({f"{r['topic']}-{r['partition']}" for r in rows})
        raise QueryError(f"group {group!r}: partition {topic}-{partition} was never assigned; known: "
                         f"{', '.join(known[:20])}{' ...' if len(known) > 20 else ''}")
    return sorted((r for r in mine if r["valid_from"] <= at and (r["valid_to"] is None or at < r["valid_to"])),
                  key=lambda r: (r["owned"], r["member_id"] or ""))


def _bound(ms: int | None, evidence: str | None, exact: bool | None) -> str:
    if ms is None:
        return "now (still current)"
    return f"{human_time(ms)} ({evidence}{'' if exact else ', inferred'})"


def describe_interval(r: dict[str, Any]) -> str:
    head = (f"owned by {r['member_id']}" + (f" (instance {r['group_instance_id']})" if r["group_instance_id"] else "")
            + f", client {r['client_id']} at {r['client_host']}, generation {r['generation_id']}"
            if r["owned"] else f"UNOWNED ({r['unowned_reason']}, generation {r['generation_id']})")
    return (f"{head}\n    from {_bound(r['valid_from'], r['from_evidence'], r['from_exact'])}"
            f"\n    to   {_bound(r['valid_to'], r['to_evidence'], r['to_exact'])}"
            f"\n    for  {human_duration(r['duration_ms'])}")


def timeline(tables: str, *, group: str, since: int | None = None, until: int | None = None
             ) -> list[tuple[int, str]]:
    """(time, line) of the group's rebalances, unowned stretches and violations, in time order."""
    rebalances = load_rows(tables, "rebalances", group=group)
    ownership = load_rows(tables, "partition_ownership", group=group)
    if not rebalances and not ownership:
        raise QueryError(f"group {group!r}: not in {tables.rstrip('/')}/rebalances nor partition_ownership")
    violations = load_rows(tables, "violations", group=group)

    def inside(ms: int | None, end: int | None = None) -> bool:
        end = ms if end is None else end
        return ms is not None and (until is None or ms < until) and (since is None or end is None or end >= since)

    events: list[tuple[int, str]] = []
    for r in rebalances:
        t = r["started_at"] if r["started_at"] is not None else r["observed_at"]
        if not inside(t, r["observed_at"]):
            continue
        if r["outcome"] == "aborted":
            events.append((r["observed_at"], f"generation {r['generation_id']}: aborted join phase (no record; "
                                             f"revealed by generation {r['generation_id'] + 1})"))
            continue
        start = f"started {human_time(r['started_at'])} ({r['start_evidence']}{'' if r['start_exact'] else ', inferred'})"
        events.append((t, f"generation {r['generation_id']} {r['outcome']} ({r['rebalance_protocol'] or '?'}): "
                          f"{r['trigger'] or '?'}{' by ' + r['trigger_member_id'] if r['trigger_member_id'] else ''}; "
                          f"{start}, assignment {human_time(r['ended_at'])}, took {human_duration(r['duration_ms'])}; "
                          f"members {r['members_before'] if r['members_before'] is not None else '?'} -> "
                          f"{r['members_after']}, {r['partitions_moved']} partitions moved, {r['partitions_unowned']} "
                          f"unowned (sum {human_duration(r['unowned_ms_sum'])}, max "
                          f"{human_duration(r['unowned_ms_max'])})"))
    for o in ownership:
        if o["owned"] or o["unowned_reason"] in ("group_empty",) or not inside(o["valid_from"], o["valid_to"]):
            continue
        events.append((o["valid_from"], f"  {o['topic']}-{o['partition']} unowned ({o['unowned_reason']}) until "
                                        f"{human_time(o['valid_to'])}: {human_duration(o['duration_ms'])}"
                                        f"{'' if o['from_exact'] else ' (start inferred: ' + o['from_evidence'] + ')'}"))
    for v in violations:
        if inside(v["record_timestamp"]):
            events.append((v["record_timestamp"], f"VIOLATION {v['kind']} (generation {v['generation_id']}): "
                                                  f"{v['detail']} [{v['evidence']}]"))
    return sorted(events, key=lambda e: e[0])


def worst(tables: str, *, day: str | None = None, limit: int = WORST_LIMIT) -> tuple[str, list[dict[str, Any]]]:
    """(day, the day's group_health rows, worst first): by flapping score, then violations."""
    rows = load_rows(tables, "group_health")
    if not rows:
        raise QueryError(f"{tables.rstrip('/')}/group_health is empty")
    day = day or max(r["day"] for r in rows)
    today = [r for r in rows if r["day"] == day]
    if not today:
        days = sorted({r["day"] for r in rows})
        raise QueryError(f"no group_health rows for day {day}; days in the table: {days[0]} .. {days[-1]}")
    today.sort(key=lambda r: (-r["flapping_score"], -r["violations"], r["group_id"]))
    return day, today[:limit]


# ------------------------------------------------------------------------------------------------
# command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"{PROG} query", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES)
    p.add_argument("--tables", required=True, metavar="PATH", help="base path of the audit's Delta tables")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("owner", help="who owned a partition at a time (or why nobody did)")
    o.add_argument("--group", required=True)
    o.add_argument("--topic", required=True)
    o.add_argument("--partition", required=True, type=int)
    o.add_argument("--at", required=True, metavar="TIME", help="ISO-8601 (UTC unless an offset is given) or epoch ms")
    t = sub.add_parser("timeline", help="a group's rebalances, unowned stretches and violations in time order")
    t.add_argument("--group", required=True)
    t.add_argument("--since", metavar="TIME")
    t.add_argument("--until", metavar="TIME")
    w = sub.add_parser("worst", help="the day's least healthy groups (group_health, by flapping score)")
    w.add_argument("--day", metavar="YYYY-MM-DD", help="default: the latest day in the table")
    w.add_argument("--limit", type=int, default=WORST_LIMIT, help="default %(default)s")
    return p.parse_args(argv)


def _time(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    if text.strip().isdigit():
        return int(text)
    return int(parse_timestamp(text, key=flag).timestamp() * 1000)


def run(args: argparse.Namespace, out: TextIO) -> int:
    tables = args.tables
    if not Path(tables).exists() and "://" not in tables:
        raise QueryError(f"--tables {tables}: no such directory")
    if args.command == "owner":
        at = _time(args.at, "--at")
        assert at is not None
        found = owner_at(tables, group=args.group, topic=args.topic, partition=args.partition, at=at)
        print(f"{args.group} {args.topic}-{args.partition} at {human_time(at)}:", file=out)
        if not found:
            print("  not known: before the first assignment the tables hold, or after the group's history "
                  "ends", file=out)
            return 1
        for r in found:
            print("  " + describe_interval(r), file=out)
        return 0
    if args.command == "timeline":
        events = timeline(tables, group=args.group, since=_time(args.since, "--since"),
                          until=_time(args.until, "--until"))
        print(f"{args.group}: {len(events)} events", file=out)
        for t, line in events:
            print(f"{human_time(t)}  {line}", file=out)
        return 0
    day, rows = worst(tables, day=args.day, limit=args.limit)
    print(f"least healthy groups on {day} (flapping score: 1.0 = a threshold reached)", file=out)
    print(f"{'group':<40} {'score':>7} {'status':<9} {'rebal':>5} {'peak/h':>6} {'rebalancing':>11} "
          f"{'unowned p-s':>11} {'churn':>5} {'viol':>4}  last commit", file=out)
    for r in rows:
        print(f"{r['group_id']:<40} {r['flapping_score']:>7.2f} {r['status']:<9} {r['rebalances']:>5} "
              f"{r['peak_hour_rebalances']:>6} {human_duration(r['rebalancing_ms']):>11} "
              f"{r['unowned_partition_ms'] / 1000:>11.1f} {r['members_joined'] + r['members_left']:>5} "
              f"{r['violations']:>4}  {human_time(r['last_commit_at']) if r['last_commit_at'] else '-'}", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args, sys.stdout)
    except CoordinatorAuditError as exc:
        print(f"{PROG} query: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
