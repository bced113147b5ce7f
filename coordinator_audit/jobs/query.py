"""Answers to the questions operators ask, read from the audit's Delta tables (no Spark needed).

    coordinator-audit query --tables out/delta owner --group G --topic T --partition P --at TIME
    coordinator-audit query --tables out/delta timeline --group G [--since TIME] [--until TIME]
    coordinator-audit query --tables out/delta worst [--day YYYY-MM-DD] [--limit N]
    coordinator-audit query --tables out/delta violations [--group GLOB] [--kind KIND]
                            [--day YYYY-MM-DD | --since TIME --until TIME] [--limit N]

The tables are read as stored with `coordinator_audit.jobs.delta_read` (filtered by group where one is given): each row
is stored once, however many nightly runs wrote the output (`coordinator_audit.jobs.derived_step`). Times print as
UTC ISO 8601 with milliseconds, durations in seconds. With the broker's log (`--server-log` of the audit), the
timeline also gives the broker's own reason for each rebalance (`generations.broker_cause`, `broker_reason`).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from coordinator_audit.cli import EXIT_CODES, PROG
from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.jobs.config import parse_timestamp
from coordinator_audit.jobs.delta_read import read_arrow

__all__ = ["BROKER_CAUSES", "VIOLATIONS_LIMIT", "WORST_LIMIT", "BrokerAccount", "QueryError", "ViolationAnswer",
           "broker_account",
           "broker_accounts", "human_duration", "human_time", "load_rows", "main", "member_labels", "members_change",
           "owner_at", "timeline", "violations", "worst"]

WORST_LIMIT = 10
"""How many groups `worst` lists unless told."""
VIOLATIONS_LIMIT = 50
"""How many violations `violations` lists one by one unless told (the counts cover them all)."""

BROKER_CAUSES: dict[str, str] = {
    "member_joined": "a member joined",
    "static_member_joined": "a static member joined",
    "member_session_expired": "a member's session expired: it crashed or stalled",
    "member_left": "a member left cleanly (LeaveGroup)",
    "member_poll_timeout": "a member exceeded max.poll.interval.ms",
    "member_sync_expired": "a member never sent its SyncGroup",
    "member_rejoined": "a member rejoined",
    "static_member_rejoined": "a static member rejoined",
    "cooperative_follow_up": "the follow-up round after revocations",
    "group_loaded_over_capacity": "the group was loaded over its size limit",
    "other": "another reason",
}
"""What each `generations.broker_cause` (the broker's logged reason, classified) means."""

_UUID_TAIL = re.compile(r"^(?P<client>.+)-(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")


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


def member_labels(members: Iterable[tuple[str, str | None, str | None]]) -> dict[str, str]:
    """Short labels of a group's members, given as (member_id, client_id, group_instance_id): the
    instance id (static members) or the client id, then `#` and the first hex digits of the id's
    generated part, as many as keep the group's labels distinct (``consumer-1 #3f9a``). A member id
    the client did not generate as `<client.id>-<UUID>` is its own label."""
    parsed: dict[str, tuple[str, str]] = {}
    for member_id, client_id, instance in members:
        if member_id in parsed:
            continue
        m = _UUID_TAIL.match(member_id)
        if m is None:
            parsed[member_id] = (instance or member_id, "")
        else:
            parsed[member_id] = (instance or client_id or m["client"], m["uuid"].replace("-", ""))
    labels: dict[str, str] = {}
    for width in (4, 8, 32):
        labels = {mid: f"{head} #{tail[:width]}" if tail else head for mid, (head, tail) in parsed.items()}
        if len(set(labels.values())) == len(labels):
            break
    return labels


def members_change(before: int | None, after: int, previous_generation: int | None) -> str:
    """A rebalance's member counts in words: ``3 -> 1 members``; before the first generation the
    tables hold, or across a gap in them, the count before is said to be unknown, never ``?``."""
    if before is not None:
        return f"{before} -> {after} member{'s' if after != 1 else ''}"
    why = "the first generation the tables hold" if previous_generation is None else "count before not recorded"
    return f"{after} member{'s' if after != 1 else ''} after (before: unknown, {why})"


class BrokerAccount(NamedTuple):
    """The broker's own account of the rebalance that made a generation (`generations`' broker columns)."""

    cause: str | None
    reason: str | None
    client_reason: str | None

    def describe(self) -> str:
        meaning = BROKER_CAUSES.get(self.cause or "", "not classified")
        reason = f' ("{self.reason}")' if self.reason else ""
        client = (f"; client's reason: {self.client_reason}" if self.client_reason
                  and self.client_reason != "not provided" else "")
        return f"{self.cause or 'reason'}: {meaning}{reason}{client}"


def broker_accounts(generations: Iterable[dict[str, Any]]) -> dict[tuple[int, int], BrokerAccount]:
    """(source_partition, source_offset) of a generation's record -> the broker's account of the
    rebalance that made it, for the generations that have one (an audit run with `--server-log`).
    A rebalance row points at the same record (`rebalances.source_partition/source_offset`)."""
    out: dict[tuple[int, int], BrokerAccount] = {}
    for g in generations:
        if g.get("broker_cause") or g.get("broker_reason"):
            out[(g["source_partition"], g["source_offset"])] = BrokerAccount(
                g.get("broker_cause"), g.get("broker_reason"), g.get("broker_client_reason"))
    return out


def broker_account(accounts: dict[tuple[int, int], BrokerAccount], r: dict[str, Any]) -> BrokerAccount | None:
    """The broker's account of the rebalance row `r` (None without a server log, or when it did not reach back)."""
    return accounts.get((r["source_partition"], r["source_offset"]))


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
    accounts = broker_accounts(load_rows(tables, "generations", group=group))

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
        broker = broker_account(accounts, r)
        events.append((t, f"generation {r['generation_id']} {r['outcome']} "
                          f"({r['rebalance_protocol'] or 'protocol unknown'}): "
                          f"{r['trigger'] or 'cause unknown'}"
                          f"{' by ' + r['trigger_member_id'] if r['trigger_member_id'] else ''}; "
                          f"{'broker: ' + broker.describe() + '; ' if broker else ''}"
                          f"{start}, assignment {human_time(r['ended_at'])}, took {human_duration(r['duration_ms'])}; "
                          f"{members_change(r['members_before'], r['members_after'], r['previous_generation_id'])}, "
                          f"{r['partitions_moved']} partitions moved, {r['partitions_unowned']} "
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


class ViolationAnswer(NamedTuple):
    """`violations`' answer: the matching rows in time order, their counts by (day, kind) and by group."""

    rows: list[dict[str, Any]]
    by_day_kind: Counter[tuple[str, str]]
    by_group: Counter[str]
    kinds_in_table: list[str]


def _day_of(ms: int) -> str:
    return human_time(ms)[:10]


def violations(tables: str, *, groups: Sequence[str] = (), kinds: Sequence[str] = (), day: str | None = None,
               since: int | None = None, until: int | None = None) -> ViolationAnswer:
    """The violations of every group (or of those matching a glob of `groups`), of `kinds` (all
    when empty), revealed on `day` (UTC, YYYY-MM-DD) or within [since, until) (epoch ms)."""
    if day is not None:
        try:
            start = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            raise QueryError(f"--day {day!r}: expected YYYY-MM-DD") from None
        lo, hi = int(start.timestamp() * 1000), int(start.timestamp() * 1000) + 86_400_000
        since, until = max(lo, since) if since is not None else lo, min(hi, until) if until is not None else hi
    rows = load_rows(tables, "violations", group=groups[0] if len(groups) == 1 and not _is_glob(groups[0]) else None)
    kinds_in_table = sorted({r["kind"] for r in rows})
    chosen = sorted((r for r in rows
                     if (not groups or any(fnmatch.fnmatchcase(r["group_id"], g) for g in groups))
                     and (not kinds or r["kind"] in kinds)
                     and (since is None or r["record_timestamp"] >= since)
                     and (until is None or r["record_timestamp"] < until)),
                    key=lambda r: (r["record_timestamp"], r["group_id"], r["source_partition"], r["source_offset"],
                                   r["kind"]))
    return ViolationAnswer(chosen, Counter((_day_of(r["record_timestamp"]), r["kind"]) for r in chosen),
                           Counter(r["group_id"] for r in chosen), kinds_in_table)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


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
    v = sub.add_parser("violations", help="violations across groups: counts by day and kind, by group, then the rows")
    v.add_argument("--group", action="append", default=[], metavar="GLOB", help="only these groups (repeatable)")
    v.add_argument("--kind", action="append", default=[], metavar="KIND", help="only this kind (repeatable)")
    v.add_argument("--day", metavar="YYYY-MM-DD", help="revealed on this UTC day")
    v.add_argument("--since", metavar="TIME", help="revealed at or after (ISO 8601 or epoch ms)")
    v.add_argument("--until", metavar="TIME", help="revealed before (ISO 8601 or epoch ms)")
    v.add_argument("--limit", type=int, default=VIOLATIONS_LIMIT,
                   help="list at most N rows, the latest (default %(default)s; 0: counts only)")
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
    if args.command == "violations":
        return _print_violations(args, tables, out)
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


def _print_violations(args: argparse.Namespace, tables: str, out: TextIO) -> int:
    answer = violations(tables, groups=args.group, kinds=args.kind, day=args.day,
                        since=_time(args.since, "--since"), until=_time(args.until, "--until"))
    filters = [f for f in (", ".join(args.group), ", ".join(args.kind), args.day,
                           args.since and f"since {args.since}", args.until and f"until {args.until}") if f]
    where = f" ({'; '.join(filters)})" if filters else ""
    rows = answer.rows
    if not rows:
        known = ", ".join(answer.kinds_in_table) or "none"
        print(f"no violations{where}; kinds in {tables.rstrip('/')}/violations: {known}", file=out)
        return 0
    days = sorted({d for d, _ in answer.by_day_kind})
    kinds = sorted({k for _, k in answer.by_day_kind})
    print(f"{_count(len(rows), 'violation')} in {_count(len(answer.by_group), 'group')}{where}, "
          f"{days[0]} .. {days[-1]}", file=out)
    print("\nby day and kind:", file=out)
    widths = [max(len(k), 5) for k in kinds]
    print(f"{'day':<10}  " + "  ".join(f"{k:>{w}}" for k, w in zip(kinds, widths, strict=True)) + "  total", file=out)
    for d in days:
        counts = [answer.by_day_kind.get((d, k), 0) for k in kinds]
        print(f"{d:<10}  " + "  ".join(f"{c:>{w}}" for c, w in zip(counts, widths, strict=True))
              + f"  {sum(counts):>5}", file=out)
    print("\nby group (most first):", file=out)
    for g, n in answer.by_group.most_common(max(args.limit, 10)):
        print(f"  {n:>6}  {g}", file=out)
    if len(answer.by_group) > max(args.limit, 10):
        print(f"  ... {len(answer.by_group) - max(args.limit, 10)} more groups", file=out)
    if args.limit <= 0:
        return 0
    shown = rows[-args.limit:]
    more = f", the latest {len(shown)} of {len(rows)}" if len(shown) < len(rows) else ""
    print(f"\nviolations in time order{more}:", file=out)
    for r in shown:
        where_tp = f" {r['topic']}-{r['partition']}" if r["topic"] is not None else ""
        members = f" members {', '.join(r['member_ids'])}" if r["member_ids"] else ""
        print(f"{human_time(r['record_timestamp'])}  {r['group_id']}  generation {r['generation_id']}  {r['kind']}"
              f"{where_tp}{members}\n    {r['detail']} [{r['evidence']}]", file=out)
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
