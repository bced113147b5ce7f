"""What-if: a group's audited night replayed under another configuration, read from the audit's Delta tables
(no Spark needed).

    coordinator-audit whatif --tables out/delta --group G --assignor cooperative-sticky --static
    coordinator-audit whatif --tables out/delta --group G --sweep [--sweep-session-timeouts-ms 10000,30000]

The group's `generations`, `assignments`, `offset_commits` and `rebalance_causes` rows give its member
lifecycle (`coordinator_audit.core.whatif.events.derive_history_from_rows`), each member's session and
rebalance timeouts included (the `assignments` columns `session_timeout_ms`, `rebalance_timeout_ms`).
Where the rows lack one (tables written before the audit kept them, a GroupMetadata value v0),
`--observed-session-timeout-ms` and `--observed-max-poll-interval-ms` say what the consumers ran
with (Kafka's defaults when not given), and the printed assumptions say so. The actual configuration is replayed first and
its reproduction score printed: how many of the audited generations the replay gives back exactly.
The actual row's costs are what happened, from the audited rows (`audited_costs`: the rebalances
and static replacements the log holds, the unowned stretches, moves and eager revocations of the
audit's ownership derivation); the replay's own costs of the actual configuration stand beside them
(the `reproduction_*` columns, the printed "actual, replayed" line). Each alternative's costs are
printed against what happened, and stored (one row per group and configuration, replacing the
group's earlier rows) in the Delta table `whatif` under `--tables`, written by delta-rs
(`--no-write` prints only).

The groups are independent: with more than one, they are replayed by `--workers` processes (default:
one per core), their output printed in group order as with one; a line on stderr tells the progress
of a long run (`whatif: 1,200/5,000 groups, 45 s`, every 10 s).
"""

from __future__ import annotations

import argparse
import io
import itertools
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from typing import Any, TextIO

import pyarrow as pa

from coordinator_audit.cli import EXIT_CODES, PROG
from coordinator_audit.core.audit import (
    AssignmentRow,
    AuditRow,
    GenerationRow,
    OffsetCommitRow,
    RebalanceCauseRow,
)
from coordinator_audit.core.errors import CoordinatorAuditError
from coordinator_audit.core.whatif.events import (
    Assumptions,
    BrokerStart,
    GroupHistory,
    derive_history_from_rows,
)
from coordinator_audit.core.whatif.replay import (
    ASSIGNOR_CHOICES,
    Configuration,
    Costs,
    ReplayResult,
    Reproduction,
    costs_of_rows,
    fit,
    replay,
)
from coordinator_audit.jobs.delta_read import WHATIF_TABLE
from coordinator_audit.jobs.query import QueryError, load_rows
from coordinator_audit.udfs.history import OwnershipRow, derive_group

__all__ = ["PROGRESS_SECONDS", "WHATIF_SCHEMA", "GroupInput", "GroupOutcome", "WhatIfError", "audited_costs", "main", "run",
           "sweep_groups", "whatif_rows"]

PROGRESS_SECONDS = 10.0
"""How often a run over many groups says how far it got (on stderr)."""


class WhatIfError(CoordinatorAuditError):
    """The what-if cannot be answered (the message names what is missing and where)."""


WHATIF_SCHEMA = pa.schema([
    pa.field("group_id", pa.string(), False),
    pa.field("configuration", pa.string(), False),
    pa.field("is_actual", pa.bool_(), False),
    pa.field("assignor", pa.string(), False),
    pa.field("static_membership", pa.bool_(), False),
    pa.field("session_timeout_ms", pa.int64(), False),
    pa.field("max_poll_interval_ms", pa.int64(), False),
    pa.field("initial_rebalance_delay_ms", pa.int64(), False),
    pa.field("reproduction_score", pa.float64(), False),
    pa.field("generations_observed", pa.int64(), False),
    pa.field("generations_reproduced", pa.int64(), False),
    pa.field("reproduction_time_error_ms", pa.float64(), True),
    pa.field("reproduction_rebalances", pa.int64(), True),
    pa.field("reproduction_unowned_partition_ms", pa.int64(), True),
    pa.field("reproduction_longest_unowned_ms", pa.int64(), True),
    pa.field("reproduction_partitions_moved", pa.int64(), True),
    pa.field("reproduction_members_stopped", pa.int64(), True),
    pa.field("reproduction_static_replacements", pa.int64(), True),
    pa.field("observed_rebalances", pa.int64(), False),
    pa.field("rebalances", pa.int64(), False),
    pa.field("unowned_partition_ms", pa.int64(), False),
    pa.field("longest_unowned_ms", pa.int64(), False),
    pa.field("partitions_moved", pa.int64(), False),
    pa.field("members_stopped", pa.int64(), False),
    pa.field("static_replacements", pa.int64(), False),
    pa.field("assumptions", pa.string(), False),
    pa.field("computed_at", pa.int64(), False),
])
"""The `whatif` table: one row per group and configuration (the actual one included, `is_actual`);
the configuration columns hold the values in force (the log's where the configuration keeps them);
the cost columns (`rebalances` to `static_replacements`) what happened on the actual row
(`audited_costs`) and the replay's measure on an alternative's; `reproduction_*` the actual
configuration's replay: how well it reproduces the audited history and what it measured itself
(the same on every row of a group; the replay's costs are null on rows a version without them
wrote); `assumptions` what the replay assumed where the tables are silent."""


def _ms(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return value


_LATER_COLUMNS = frozenset({"session_timeout_ms", "rebalance_timeout_ms"})
"""Columns a table written before the audit kept them lacks: read as null (the assumptions stand in)."""


BrokerStarts = dict[str, dict[tuple[int, int], BrokerStart]]
"""group -> {(source_partition, source_offset) of a generations row: the broker's start of its join phase}."""


def _rows(tables: str, table: str, cls: type, group: str | None, starts: BrokerStarts | None = None) -> list[Any]:
    """The rows of `table` as `cls`; with `starts`, a generations row's `rebalance_started_at` and
    `broker_reason` (set when the audit was given the broker's log) go there."""
    names = [f.name for f in fields(cls)]
    out = []
    for r in load_rows(tables, table, group=group):
        missing = [n for n in names if n not in r and n not in _LATER_COLUMNS]
        if missing:
            raise WhatIfError(f"{tables.rstrip('/')}/{table}: no column(s) {missing} (written by another version?)")
        out.append(cls(**{n: _ms(r.get(n)) for n in names}))
        if starts is not None and r.get("rebalance_started_at") is not None and r.get("broker_reason"):
            starts.setdefault(r["group_id"], {})[(r["source_partition"], r["source_offset"])] = BrokerStart(
                _ms(r["rebalance_started_at"]), r["broker_reason"])
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"{PROG} whatif", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES)
    p.add_argument("--tables", required=True, help="base path of the audit's Delta tables")
    p.add_argument("--group", action="append", help="a consumer group (repeatable; default: every group of the tables)")
    p.add_argument("--assignor", choices=ASSIGNOR_CHOICES)
    static = p.add_mutually_exclusive_group()
    static.add_argument("--static", dest="static", action="store_true", default=None,
                        help="static membership (group.instance.id per consumer)")
    static.add_argument("--dynamic", dest="static", action="store_false", help="dynamic membership")
    p.add_argument("--session-timeout-ms", type=int)
    p.add_argument("--max-poll-interval-ms", type=int)
    p.add_argument("--initial-rebalance-delay-ms", type=int, help="the broker's group.initial.rebalance.delay.ms")
    p.add_argument("--sweep", action="store_true",
                   help="every assignor x static on/off x --sweep-session-timeouts-ms instead of one configuration")
    p.add_argument("--sweep-session-timeouts-ms", default="",
                   help="comma-separated session timeouts for --sweep (default: the observed one only)")
    p.add_argument("--observed-session-timeout-ms", type=int, default=Assumptions().session_timeout_ms,
                   help="what the consumers ran with, for members whose assignments rows lack it (tables written "
                        "before the audit kept it; default Kafka's 45000)")
    p.add_argument("--observed-max-poll-interval-ms", type=int, default=Assumptions().rebalance_timeout_ms,
                   help="the same for the rebalance timeout (also missing from a GroupMetadata value v0; default "
                        "Kafka's 300000)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="processes replaying the groups in parallel (default: one per core)")
    p.add_argument("--no-write", action="store_true", help="print only, do not write the whatif table")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error(f"--workers must be >= 1, got {args.workers}")
    return args


def configurations(args: argparse.Namespace) -> list[Configuration]:
    """The alternatives asked for (none: only the actual configuration is replayed)."""
    if args.sweep:
        sessions: list[int | None] = [None]
        if args.sweep_session_timeouts_ms:
            try:
                sessions = [int(v) for v in args.sweep_session_timeouts_ms.split(",")]
            except ValueError:
                raise WhatIfError(f"--sweep-session-timeouts-ms {args.sweep_session_timeouts_ms!r}: "
                                  f"expected comma-separated integers") from None
        return [Configuration(assignor=a, static=s, session_timeout_ms=t,
                              max_poll_interval_ms=args.max_poll_interval_ms,
                              initial_rebalance_delay_ms=args.initial_rebalance_delay_ms)
                for a, s, t in itertools.product(ASSIGNOR_CHOICES, (False, True), sessions)]
    one = Configuration(assignor=args.assignor, static=args.static, session_timeout_ms=args.session_timeout_ms,
                        max_poll_interval_ms=args.max_poll_interval_ms,
                        initial_rebalance_delay_ms=args.initial_rebalance_delay_ms)
    return [] if one.is_actual else [one]


def audited_costs(generations: Sequence[GenerationRow], assignments: Sequence[AssignmentRow],
                  commits: Sequence[OffsetCommitRow], causes: Sequence[RebalanceCauseRow]) -> Costs:
    """What happened to one classic group, from the audit's rows, measured as a replay measures its
    simulated clients (`coordinator_audit.core.whatif.replay.Costs`):

    * rebalances, static replacements: the log's own (`costs_of_rows`);
    * unowned_partition_ms, longest_unowned_ms: the unowned stretches of the audit's ownership
      derivation (`coordinator_audit.udfs.history.derive_group`, the `partition_ownership` table: an
      eager owner unowned from its last commit before the join phase, a departed one from its last
      commit, up to the next assignment record), but those while the group was Empty (no consumer
      wanted the partitions) and those still open at the tables' end; and each static replacement
      (KIP-345), which that table keeps owned: the replaced process's partitions from its last sign
      of life (its last commit, else the record before) to the replacement record (the new process's
      JoinGroup). A stretch starts at the last commit, so it is longer than what the consumers saw
      by up to an auto-commit interval;
    * partitions_moved: per partition, times its next owner is another consumer (a static member by
      its group.instance.id, a dynamic one by client id and host: a restarted process is the same);
    * members_stopped: eager revocations, the members of an EAGER generation that held partitions in
      the generation before it under the same member id (they rejoined, and gave up everything first:
      `ConsumerCoordinator#onJoinPrepare`).

    Join phases that were aborted have no record, and what they cost is not seen."""
    if not generations:
        raise WhatIfError("no generations rows: nothing happened to measure")
    group_id = generations[0].group_id
    try:
        ownership, _, _ = derive_group(
            group_id, generations=[asdict(g) for g in generations], assignments=[asdict(a) for a in assignments],
            commits=[(o.topic, o.partition, o.first_commit_timestamp, o.last_commit_timestamp) for o in commits],
            causes=[asdict(c) for c in causes])
    except ValueError as exc:  # an assignment without its generations row (named in the message)
        raise WhatIfError(f"what happened cannot be measured: {exc}") from exc
    rows = [o for o in ownership if isinstance(o, OwnershipRow)]
    if len(rows) != len(ownership):  # dicts in, so never an OwnershipRun
        raise WhatIfError(f"group {group_id!r}: ownership derived as runs, not rows")
    gaps = [o.duration_ms for o in rows if not o.owned and o.unowned_reason != "group_empty"
            and o.valid_to is not None and o.duration_ms is not None]
    gaps += _replacement_gaps(generations, assignments, commits)
    moved = 0
    last: dict[tuple[str, int], str] = {}
    for o in sorted((o for o in rows if o.owned), key=lambda o: (o.topic, o.partition, o.valid_from)):
        who = o.group_instance_id if o.group_instance_id is not None else f"{o.client_id}@{o.client_host}"
        key = (o.topic, o.partition)
        moved += key in last and last[key] != who
        last[key] = who
    logged = costs_of_rows(generations)
    return Costs(logged.rebalances, sum(gaps), max(gaps, default=0), moved, _eager_revocations(generations, assignments),
                 logged.static_replacements)


def _replacement_gaps(generations: Sequence[GenerationRow], assignments: Sequence[AssignmentRow],
                      commits: Sequence[OffsetCommitRow]) -> list[int]:
    """Per partition of each replaced static member (a replacement record: a new member id for a
    group.instance.id within its generation), the time from the old process's last sign of life to
    the replacement record (`audited_costs`)."""
    records: dict[tuple[int, int], list[AssignmentRow]] = {}
    for a in assignments:
        records.setdefault((a.source_partition, a.source_offset), []).append(a)
    opening = {(g.source_partition, g.source_offset) for g in generations}
    last_commit: dict[tuple[int, int], dict[tuple[str, int], int]] = {}  # window's closing record -> commits
    for o in commits:
        if o.window_end_offset is not None and o.last_commit_timestamp is not None:
            last_commit.setdefault((o.source_partition, o.window_end_offset), {})[(o.topic, o.partition)] = \
                o.last_commit_timestamp
    out: list[int] = []
    current: dict[str, tuple[str, frozenset[tuple[str, int]]]] = {}  # instance id -> (member id, partitions)
    before = 0  # the previous record's time
    for key in sorted(records):
        rows = records[key]
        at = rows[0].valid_from
        if key in opening:
            current = {}
        mine: dict[str, list[AssignmentRow]] = {}
        for r in rows:
            mine.setdefault(r.member_id, []).append(r)
        for member_id, held in mine.items():
            instance = held[0].group_instance_id
            if instance is None:
                continue
            old = current.get(instance)
            if key not in opening and old is not None and old[0] != member_id:
                window = last_commit.get(key, {})
                alive = max([window[tp] for tp in old[1] if tp in window], default=before)
                out += [max(0, at - alive)] * len(old[1])
            current[instance] = (member_id, frozenset((r.topic, r.partition) for r in held))
        before = at
    return out


def _eager_revocations(generations: Sequence[GenerationRow], assignments: Sequence[AssignmentRow]) -> int:
    """Members of each EAGER generation that held partitions, under the same member id, in the
    generation before it (`audited_costs`)."""
    holders: dict[int, set[str]] = {}  # generation id -> its members that held partitions
    for a in assignments:
        holders.setdefault(a.generation_id, set()).add(a.member_id)
    stopped = 0
    previous: set[str] = set()
    for g in sorted(generations, key=lambda g: (g.source_partition, g.source_offset)):
        now = holders.get(g.generation_id, set()) if g.state == "Stable" else set()
        if g.rebalance_protocol == "EAGER":
            stopped += len(now & previous)
        previous = now
    return stopped


_COLUMNS = (("rebalances", 1), ("unowned_partition_ms", 1000), ("longest_unowned_ms", 1000), ("partitions_moved", 1),
            ("members_stopped", 1), ("static_replacements", 1))
"""The costs (`Costs` fields, the `whatif` table's cost columns) and the unit each is printed in."""


def whatif_rows(history: GroupHistory, actual: ReplayResult, rep: Reproduction, audited: Costs,
                results: Sequence[ReplayResult], computed_at: int) -> list[dict[str, Any]]:
    """The `whatif` rows of one group: the actual configuration's (what happened: `audited`), then
    each alternative's."""
    out = []
    notes = "; ".join(history.notes) or "none"
    replayed = {f"reproduction_{k}": getattr(actual.costs, k) for k, _ in _COLUMNS}
    for r in (actual, *results):
        c = r.resolved
        costs = audited if r is actual else r.costs
        assert c.assignor is not None and c.static is not None and c.session_timeout_ms is not None
        assert c.max_poll_interval_ms is not None and c.initial_rebalance_delay_ms is not None
        out.append({
            "group_id": history.group_id, "configuration": r.config.label(), "is_actual": r.config.is_actual,
            "assignor": c.assignor, "static_membership": c.static, "session_timeout_ms": c.session_timeout_ms,
            "max_poll_interval_ms": c.max_poll_interval_ms, "initial_rebalance_delay_ms": c.initial_rebalance_delay_ms,
            "reproduction_score": rep.score, "generations_observed": rep.generations_observed,
            "generations_reproduced": rep.matched, "reproduction_time_error_ms": rep.mean_time_error_ms,
            **replayed, "observed_rebalances": audited.rebalances, **{k: getattr(costs, k) for k, _ in _COLUMNS},
            "assumptions": notes, "computed_at": computed_at})
    return out


def _replayed(row: dict[str, Any]) -> dict[str, Any]:
    """The night's configuration as its replay measured it: an actual row's `reproduction_*` costs."""
    return {"configuration": "actual, replayed", **{k: row[f"reproduction_{k}"] for k, _ in _COLUMNS}}


def _accrue(total: dict[str, Any], row: dict[str, Any]) -> None:
    """Adds a row's costs to a total: the longest stretch is the longest of all, the others add up."""
    for k, _ in _COLUMNS:
        total[k] = max(total[k], row[k]) if k == "longest_unowned_ms" else total[k] + row[k]


def _cell(r: dict[str, Any], base: dict[str, Any], key: str, scale: int) -> str:
    """One cost, and its difference from the actual configuration's on an alternative's row."""
    if scale == 1:
        text, diff = str(r[key]), f"{r[key] - base[key]:+d}"
    else:
        text, diff = f"{r[key] / scale:.1f}", f"{(r[key] - base[key]) / scale:+.1f}"
    return text if r is base else f"{text} ({diff})"


def _print(rows: list[dict[str, Any]], rep: Reproduction, out: TextIO) -> None:
    """The group's reproduction, then its costs: what happened (the actual row), the actual
    configuration's replay (how far the replay's measure is from what happened), each alternative."""
    first = rows[0]
    out.write(f"group {first['group_id']}: the actual configuration reproduces {rep.matched} of "
              f"{rep.generations_observed} audited generations (score {rep.score:.2f}"
              + (f", record times off by {rep.mean_time_error_ms:.0f} ms on average" if rep.mean_time_error_ms
                 is not None else "") + ")\n")
    for d in rep.diffs:
        out.write(f"  generation #{d.index}: differs in {', '.join(d.differs_in)}\n")
    if rep.score < 1.0:
        out.write("  (alternatives below are only as trustworthy as this reproduction)\n")
    out.write(f"  assumed: {first['assumptions']}\n")
    _table([first, {**first, **_replayed(first)}, *rows[1:]], out)


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    head = ("configuration", "rebalances", "unowned s", "longest s", "moved", "stopped", "replacements")
    table = [head]
    base = rows[0]
    for r in rows:
        table.append((r["configuration"], *(_cell(r, base, key, scale) for key, scale in _COLUMNS)))
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        out.write("  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                   for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip() + "\n")


def _by_group(tables: str, table: str, cls: type, groups: Sequence[str] | None, starts: BrokerStarts | None = None
              ) -> dict[str, list[Any]]:
    rows = ([r for g in groups for r in _rows(tables, table, cls, g, starts)] if groups
            else _rows(tables, table, cls, None, starts))
    out: dict[str, list[Any]] = {}
    for r in rows:
        out.setdefault(r.group_id, []).append(r)
    return out


def group_rows(tables: str, group: str, generations: list[GenerationRow], assignments: list[AssignmentRow],
               commits: list[OffsetCommitRow], causes: list[RebalanceCauseRow], args: argparse.Namespace,
               configs: Sequence[Configuration], out: TextIO, computed_at: int,
               broker_starts: dict[tuple[int, int], BrokerStart] | None = None) -> list[dict[str, Any]]:
    """One group's what-if: its history fitted to the actual configuration, then each alternative.

    Where the audit had the broker's log, the joins and leaves that started a round are dated by it
    (`derive_history_from_rows`), unless the replay reproduces fewer generations with those dates
    than without (the simulated members' heartbeats do not fall when the real ones did, and the
    calibration of the other events may not make up for it): then the history without them is
    replayed, and its notes say so."""
    if any(g.group_type != "classic" for g in generations):
        raise WhatIfError(f"group {group!r} is a KIP-848 consumer group: the what-if replays classic groups only")
    assumptions = Assumptions(session_timeout_ms=args.observed_session_timeout_ms,
                              rebalance_timeout_ms=args.observed_max_poll_interval_ms)
    observed: list[AuditRow] = [*generations, *assignments, *causes]

    def fitted(starts: dict[tuple[int, int], BrokerStart] | None) -> tuple[GroupHistory, ReplayResult, Reproduction]:
        return fit(lambda a: derive_history_from_rows(generations, assignments, commits, causes, assumptions=a,
                                                      broker_starts=starts), observed, assumptions)

    history, actual, rep = fitted(broker_starts)
    if broker_starts and rep.score < 1.0:
        dated = rep
        history, actual, rep = max((history, actual, rep), fitted(None), key=lambda f: f[2].score)
        if rep is not dated:
            history = replace(history, notes=(
                *history.notes, f"the broker's log's dates of joins and leaves not used: the replay with them "
                                f"reproduced {dated.matched} of {dated.generations_observed} generations, without "
                                f"them {rep.matched}"))
            actual.history = history
    results: list[ReplayResult] = []
    for c in configs:
        results.append(replay(history, c, known=[actual, *results]))
    rows = whatif_rows(history, actual, rep, audited_costs(generations, assignments, commits, causes), results,
                       computed_at)
    _print(rows, rep, out)
    return rows


@dataclass(frozen=True, slots=True)
class GroupInput:
    """One group's audit rows, what its what-if is computed from."""

    group: str
    generations: list[GenerationRow]
    assignments: list[AssignmentRow]
    commits: list[OffsetCommitRow]
    causes: list[RebalanceCauseRow]
    broker_starts: dict[tuple[int, int], BrokerStart] | None = None


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    """One group's what-if: its `whatif` rows and printed text, or why it was skipped."""

    group: str
    rows: list[dict[str, Any]]
    printed: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class _Job:
    """What every group's what-if of one run shares."""

    tables: str
    args: argparse.Namespace
    configs: tuple[Configuration, ...]
    computed_at: int


_job: _Job | None = None
"""The run a pool worker serves (set once per worker by `_serve`)."""


def _serve(job: _Job) -> None:
    global _job
    _job = job


def _in_worker(g: GroupInput) -> GroupOutcome:
    assert _job is not None
    return _outcome(_job, g)


def _outcome(job: _Job, g: GroupInput) -> GroupOutcome:
    printed = io.StringIO()
    try:
        rows = group_rows(job.tables, g.group, g.generations, g.assignments, g.commits, g.causes, job.args,
                          job.configs, printed, job.computed_at, g.broker_starts)
    except CoordinatorAuditError as exc:  # one group's failure does not stop the others
        return GroupOutcome(g.group, [], printed.getvalue(), str(exc))
    return GroupOutcome(g.group, rows, printed.getvalue())


def sweep_groups(groups: Sequence[GroupInput], tables: str, args: argparse.Namespace,
                 configs: Sequence[Configuration], computed_at: int, *, workers: int = 1,
                 progress: TextIO | None = None, every_s: float = PROGRESS_SECONDS) -> Iterator[GroupOutcome]:
    """Each group's what-if (`group_rows`), in the order of `groups`. With `workers` > 1 and more than
    one group, `workers` processes replay them (the groups are independent: the outcomes are those of
    one process). `progress` gets a line every `every_s` seconds, and a last one when any was written."""
    job = _Job(tables, args, tuple(configs), computed_at)
    workers = min(workers, len(groups))
    start = last = time.monotonic()
    said = False

    def tell(done: int) -> None:
        assert progress is not None
        progress.write(f"whatif: {done:,}/{len(groups):,} groups, {time.monotonic() - start:.0f} s\n")
        progress.flush()

    def outcomes() -> Iterator[GroupOutcome]:
        if workers <= 1:
            for g in groups:
                yield _outcome(job, g)
            return
        # spawned workers: the parent's threads (delta-rs, Arrow) are not forked into them
        chunk = max(1, min(8, len(groups) // (workers * 16)))
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_serve,
                                   initargs=(job,))
        try:
            yield from pool.map(_in_worker, groups, chunksize=chunk)
        finally:  # a run stopped early (an error, Ctrl-C) drops the groups not yet started
            pool.shutdown(wait=True, cancel_futures=True)

    for done, outcome in enumerate(outcomes(), 1):
        yield outcome
        if progress is not None and (time.monotonic() - last >= every_s or (said and done == len(groups))):
            tell(done)
            said, last = True, time.monotonic()


def _print_total(rows: list[dict[str, Any]], groups: int, out: TextIO) -> None:
    actual = [r for r in rows if r["is_actual"]]
    full = sum(1 for r in actual if r["reproduction_score"] == 1.0)
    out.write(f"total over {groups} group(s) ({full} reproduced in every generation):\n")
    totals: dict[str, dict[str, Any]] = {}
    for r in rows:
        t = totals.setdefault(r["configuration"], {"configuration": r["configuration"], "groups": 0,
                                                   **{k: 0 for k, _ in _COLUMNS}})
        t["groups"] += 1
        _accrue(t, r)
    replayed = {"configuration": "actual, replayed", **{k: 0 for k, _ in _COLUMNS}}
    for r in actual:  # the night's configuration as the replays measured it, beside what happened
        _accrue(replayed, _replayed(r))
    ordered = [totals.pop("actual"), replayed, *totals.values()]
    _table(ordered, out)


def run(args: argparse.Namespace, out: TextIO, progress: TextIO | None = None) -> int:
    """The what-if of the groups asked for (`args`), printed to `out`, stored unless --no-write;
    `progress` (stderr from the command) hears how far a long run got."""
    tables = args.tables
    configs = configurations(args)  # a configuration Kafka would refuse fails here, before any group
    named = args.group or None
    starts: BrokerStarts = {}
    generations = _by_group(tables, "generations", GenerationRow, named, starts)
    for g in named or ():
        if g not in generations:
            raise WhatIfError(f"group {g!r}: not in {tables.rstrip('/')}/generations")
    assignments = _by_group(tables, "assignments", AssignmentRow, named)
    commits = _by_group(tables, "offset_commits", OffsetCommitRow, named)
    causes = _by_group(tables, "rebalance_causes", RebalanceCauseRow, named)
    computed_at = int(time.time() * 1000)
    groups = [GroupInput(g, generations[g], assignments.get(g, []), commits.get(g, []), causes.get(g, []),
                         starts.get(g)) for g in sorted(generations)]
    rows: list[dict[str, Any]] = []
    done = 0
    for outcome in sweep_groups(groups, tables, args, configs, computed_at, workers=args.workers,
                                progress=progress):
        out.write(outcome.printed)
        if outcome.error is not None:
            if named is not None and len(named) == 1:
                raise WhatIfError(outcome.error)
            out.write(f"group {outcome.group}: skipped: {outcome.error}\n")
            continue
        rows += outcome.rows
        done += 1
    if done > 1:
        _print_total(rows, done, out)
    if rows and not args.no_write:
        from deltalake import write_deltalake

        uri = f"{tables.rstrip('/')}/{WHATIF_TABLE}"
        written = sorted({r["group_id"] for r in rows})
        listed = ", ".join("'" + g.replace("'", "''") + "'" for g in written)
        # a table an earlier version wrote gains the columns it lacks (null on its other groups' rows)
        write_deltalake(uri, pa.Table.from_pylist(rows, schema=WHATIF_SCHEMA), mode="overwrite",
                        predicate=f"group_id IN ({listed})", schema_mode="merge")
        out.write(f"wrote {len(rows)} row(s) to {uri}\n")
    return 0 if done else 2


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args, sys.stdout, sys.stderr)
    except (CoordinatorAuditError, QueryError) as exc:
        print(f"{PROG} whatif: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
