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
Each configuration's costs are printed against the actual one's, and stored (one row per group and
configuration, replacing the group's earlier rows) in the Delta table `whatif` under `--tables`,
written by delta-rs (`--no-write` prints only).

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
from dataclasses import dataclass, fields
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
from coordinator_audit.core.whatif.events import Assumptions, GroupHistory, derive_history_from_rows
from coordinator_audit.core.whatif.replay import (
    ASSIGNOR_CHOICES,
    Configuration,
    ReplayResult,
    Reproduction,
    costs_of_rows,
    fit,
    replay,
)
from coordinator_audit.jobs.delta_read import WHATIF_TABLE
from coordinator_audit.jobs.query import QueryError, load_rows

__all__ = ["PROGRESS_SECONDS", "WHATIF_SCHEMA", "GroupInput", "GroupOutcome", "WhatIfError", "main", "run",
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
`reproduction_*` the actual configuration's reproduction of the audited history (the same on every
row of a group); `assumptions` what the replay assumed where the tables are silent."""


def _ms(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return value


_LATER_COLUMNS = frozenset({"session_timeout_ms", "rebalance_timeout_ms"})
"""Columns a table written before the audit kept them lacks: read as null (the assumptions stand in)."""


def _rows(tables: str, table: str, cls: type, group: str | None) -> list[Any]:
    names = [f.name for f in fields(cls)]
    out = []
    for r in load_rows(tables, table, group=group):
        missing = [n for n in names if n not in r and n not in _LATER_COLUMNS]
        if missing:
            raise WhatIfError(f"{tables.rstrip('/')}/{table}: no column(s) {missing} (written by another version?)")
        out.append(cls(**{n: _ms(r.get(n)) for n in names}))
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


def whatif_rows(history: GroupHistory, actual: ReplayResult, rep: Reproduction, observed_rebalances: int,
                results: Sequence[ReplayResult], computed_at: int) -> list[dict[str, Any]]:
    """The `whatif` rows of one group: the actual configuration's, then each alternative's."""
    out = []
    notes = "; ".join(history.notes) or "none"
    for r in (actual, *results):
        c = r.resolved
        costs = r.costs
        assert c.assignor is not None and c.static is not None and c.session_timeout_ms is not None
        assert c.max_poll_interval_ms is not None and c.initial_rebalance_delay_ms is not None
        out.append({
            "group_id": history.group_id, "configuration": r.config.label(), "is_actual": r.config.is_actual,
            "assignor": c.assignor, "static_membership": c.static, "session_timeout_ms": c.session_timeout_ms,
            "max_poll_interval_ms": c.max_poll_interval_ms, "initial_rebalance_delay_ms": c.initial_rebalance_delay_ms,
            "reproduction_score": rep.score, "generations_observed": rep.generations_observed,
            "generations_reproduced": rep.matched, "reproduction_time_error_ms": rep.mean_time_error_ms,
            "observed_rebalances": observed_rebalances, "rebalances": costs.rebalances,
            "unowned_partition_ms": costs.unowned_partition_ms, "longest_unowned_ms": costs.longest_unowned_ms,
            "partitions_moved": costs.partitions_moved, "members_stopped": costs.members_stopped,
            "static_replacements": costs.static_replacements, "assumptions": notes, "computed_at": computed_at})
    return out


_COLUMNS = (("rebalances", 1), ("unowned_partition_ms", 1000), ("longest_unowned_ms", 1000), ("partitions_moved", 1),
            ("members_stopped", 1), ("static_replacements", 1))


def _cell(r: dict[str, Any], base: dict[str, Any], key: str, scale: int) -> str:
    """One cost, and its difference from the actual configuration's on an alternative's row."""
    if scale == 1:
        text, diff = str(r[key]), f"{r[key] - base[key]:+d}"
    else:
        text, diff = f"{r[key] / scale:.1f}", f"{(r[key] - base[key]) / scale:+.1f}"
    return text if r is base else f"{text} ({diff})"


def _print(rows: list[dict[str, Any]], rep: Reproduction, out: TextIO) -> None:
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
    _table(rows, out)


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


def _by_group(tables: str, table: str, cls: type, groups: Sequence[str] | None) -> dict[str, list[Any]]:
    rows = ([r for g in groups for r in _rows(tables, table, cls, g)] if groups
            else _rows(tables, table, cls, None))
    out: dict[str, list[Any]] = {}
    for r in rows:
        out.setdefault(r.group_id, []).append(r)
    return out


def group_rows(tables: str, group: str, generations: list[GenerationRow], assignments: list[AssignmentRow],
               commits: list[OffsetCommitRow], causes: list[RebalanceCauseRow], args: argparse.Namespace,
               configs: Sequence[Configuration], out: TextIO, computed_at: int) -> list[dict[str, Any]]:
    """One group's what-if: its history fitted to the actual configuration, then each alternative."""
    if any(g.group_type != "classic" for g in generations):
        raise WhatIfError(f"group {group!r} is a KIP-848 consumer group: the what-if replays classic groups only")
    assumptions = Assumptions(session_timeout_ms=args.observed_session_timeout_ms,
                              rebalance_timeout_ms=args.observed_max_poll_interval_ms)
    observed: list[AuditRow] = [*generations, *assignments, *causes]
    history, actual, rep = fit(lambda a: derive_history_from_rows(generations, assignments, commits, causes,
                                                                  assumptions=a), observed, assumptions)
    results: list[ReplayResult] = []
    for c in configs:
        results.append(replay(history, c, known=[actual, *results]))
    rows = whatif_rows(history, actual, rep, costs_of_rows(observed).rebalances, results, computed_at)
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
                          job.configs, printed, job.computed_at)
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
        for k, _ in _COLUMNS:
            t[k] = max(t[k], r[k]) if k == "longest_unowned_ms" else t[k] + r[k]
    ordered = [totals.pop("actual"), *totals.values()]
    _table(ordered, out)


def run(args: argparse.Namespace, out: TextIO, progress: TextIO | None = None) -> int:
    """The what-if of the groups asked for (`args`), printed to `out`, stored unless --no-write;
    `progress` (stderr from the command) hears how far a long run got."""
    tables = args.tables
    configs = configurations(args)  # a configuration Kafka would refuse fails here, before any group
    named = args.group or None
    generations = _by_group(tables, "generations", GenerationRow, named)
    for g in named or ():
        if g not in generations:
            raise WhatIfError(f"group {g!r}: not in {tables.rstrip('/')}/generations")
    assignments = _by_group(tables, "assignments", AssignmentRow, named)
    commits = _by_group(tables, "offset_commits", OffsetCommitRow, named)
    causes = _by_group(tables, "rebalance_causes", RebalanceCauseRow, named)
    computed_at = int(time.time() * 1000)
    groups = [GroupInput(g, generations[g], assignments.get(g, []), commits.get(g, []), causes.get(g, []))
              for g in sorted(generations)]
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
        write_deltalake(uri, pa.Table.from_pylist(rows, schema=WHATIF_SCHEMA), mode="overwrite",
                        predicate=f"group_id IN ({listed})")
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
