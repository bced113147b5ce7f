"""The what-if held against a real broker: one scenario run for real under two configurations, the
first one's prediction of the second checked against what the second really did.

The scenario (`rolling_restart_and_crash`): 4 consumers of one 8-partition topic join at once; each
is closed and started again in turn (a rolling restart: the next process joins `DOWN_S` after its
predecessor closed), then one of them is SIGKILLed and not restarted (its session expires). It runs
on one Kafka 4.x broker twice at once, in two groups, on the same schedule:

* A, `whatif-a`: eager `range`, dynamic members (each close sends LeaveGroup: a rebalance per
  restart, every member revoking everything);
* B, `whatif-b`: `cooperative-sticky`, static members (group.instance.id: a close sends no
  LeaveGroup (KIP-345) and the restarted process takes its place within the session timeout, no
  rebalance; the crash waits the session timeout as A's does).

The broker's `__consumer_offsets` is audited by the job, with the broker's server.log, up to the end
of the schedule (the consumers are stopped only after it), then `coordinator-audit whatif` runs on
the tables as a user runs it: on A with `--assignor cooperative-sticky --static`, and on B alone.
A's replay must reproduce A (score 1.0), and its prediction of B is set against B's actual row, what
B did as the audit's rows tell it (`audited_costs`, the measure of every actual row); the consumers'
own account (their rebalance listeners, the kill) and the prediction without the broker's log are
printed beside.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from coordinator_audit.core.audit import AssignmentRow, GenerationRow, OffsetCommitRow, RebalanceCauseRow
from coordinator_audit.core.whatif.events import derive_history_from_rows
from coordinator_audit.core.whatif.replay import Configuration, Costs, fit, replay
from coordinator_audit.jobs import whatif
from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.delta_read import WHATIF_TABLE
from tests.kafka.cluster import Broker, Member

pytestmark = pytest.mark.kafka

TOPIC = "whatif-t"
PARTITIONS = 8
CONSUMERS = 4
SESSION_MS = 15000
"""session.timeout.ms of every consumer: GroupMember heartbeats every fifth of it, 3 s, Kafka's
default heartbeat.interval.ms (the one the what-if assumes); a restart takes well under it, the
crash's expiry waits all of it."""
DOWN_S = 4.0
"""A restart's downtime: from the close to the new process's JoinGroup. Longer than a heartbeat, so
that under A the members' rejoin after the LeaveGroup is over before the new process joins: its
JoinGroup starts a round of its own, which the broker's log dates (a faster restart joins the
LeaveGroup's round, and the log places it only within that round's last heartbeat interval)."""
STEP_S = 10.0
"""Between two restarts: A's two rounds (the LeaveGroup's, the JoinGroup's) are over."""
JOINED_S = 10.0
"""From the joint start to the first restart: the initial rebalance delay (3 s, once more when members
joined during it: 6 s) and the sync."""
AFTER_CRASH_S = SESSION_MS / 1000 + 8.0
"""From the crash to the end: the session expiry and the rebalance it starts."""
B_OFFSET_S = 2.0
"""B's schedule starts this much after A's (the two groups' JVM starts do not coincide)."""
BROKER_PROPERTIES = {"group.initial.rebalance.delay.ms": "3000"}
"""Kafka's default initial rebalance delay, the one the what-if assumes (the log does not carry it)."""

UNOWNED_TOLERANCE_MS = 10_000
"""How far the prediction of B's unowned partition-time may be from B's (`test_the_what_if_of_a_predicts_b`)."""

GROUPS = {"whatif-a": {"assignor": "range", "static": False},
          "whatif-b": {"assignor": "cooperative-sticky", "static": True}}


class Run:
    """One group's run of the scenario: its consumer processes, what was done when, the kill."""

    def __init__(self, broker: Broker, group: str, assignor: str, static: bool) -> None:
        self.broker, self.group, self.assignor, self.static = broker, group, assignor, static
        self.processes: list[Member] = []
        self.steps: list[tuple[float, str]] = []  # (epoch s, what)
        self.killed: dict[int, int] = {}  # process index -> epoch ms of its SIGKILL
        self.error: BaseException | None = None

    def process(self, i: int) -> Member:
        """A new (held) process of consumer c{i}: the same client id (and instance id, static) each time."""
        m = Member(self.broker, self.group, f"c{i}", TOPIC, assignor=self.assignor,
                   instance_id=f"c{i}" if self.static else None, session_ms=SESSION_MS, hold=True)
        self.processes.append(m)
        return m.start()

    def step(self, what: str) -> None:
        self.steps.append((time.time(), what))

    def stop(self) -> None:
        for m in self.processes:
            m.stop()


def rolling_restart_and_crash(run: Run, start: threading.Barrier, done: threading.Barrier, delay: float) -> None:
    """The scenario on `run`'s group (module docstring); every step at a fixed time from the joint start."""
    try:
        live = [run.process(i) for i in range(1, CONSUMERS + 1)]
        start.wait(timeout=120)
        time.sleep(delay)
        t0 = time.monotonic()
        for m in live:
            m.send("join")
        run.step("join c1-c4")
        for i in range(CONSUMERS):
            nxt = run.process(i + 1)  # its JVM started ahead, joining when told
            _sleep_until(t0 + JOINED_S + i * STEP_S)
            live[i].close()
            run.step(f"close c{i + 1}")
            _sleep_until(t0 + JOINED_S + i * STEP_S + DOWN_S)
            nxt.send("join")
            live[i] = nxt
            run.step(f"start c{i + 1}")
        _sleep_until(t0 + JOINED_S + CONSUMERS * STEP_S)
        victim = live[1]
        run.killed[next(k for k, m in enumerate(run.processes) if m is victim)] = int(time.time() * 1000)
        victim.kill()
        run.step("kill -9 c2")
        _sleep_until(t0 + JOINED_S + CONSUMERS * STEP_S + AFTER_CRASH_S)
        run.step("end")
    except BaseException as exc:
        run.error = exc
        start.abort()
        done.abort()
        raise
    finally:
        with contextlib.suppress(threading.BrokenBarrierError):
            done.wait(timeout=300)


def _sleep_until(t: float) -> None:
    left = t - time.monotonic()
    if left < -1.0:
        raise AssertionError(f"the schedule fell {-left:.1f} s behind (a consumer JVM started too slowly)")
    if left > 0:
        time.sleep(left)


def held(run: Run, until_ms: int) -> tuple[int, int]:
    """What the consumers themselves saw (their rebalance listeners, and the kill): the partition-ms
    during which no live process of the group held a partition, from the group's first assignment to
    `until_ms`, and the longest such stretch of one partition. The measure a replay takes of its
    simulated clients (`coordinator_audit.core.whatif.replay.Costs`)."""
    changes: list[tuple[int, int, frozenset[str]]] = []  # (epoch ms, process, what it holds from then)
    for k, m in enumerate(run.processes):
        holding: frozenset[str] = frozenset()
        for e in m.events:
            if e["event"] == "assigned":
                holding = frozenset(e["assignment"])
            elif e["event"] in ("revoked", "lost"):
                holding = holding - set(e["partitions"])
            elif e["event"] == "closed":
                holding = frozenset()
            else:
                continue
            changes.append((int(e["t"]), k, holding))
        if k in run.killed:
            changes.append((run.killed[k], k, frozenset()))
    holds: dict[int, frozenset[str]] = {}
    owned_at: list[tuple[int, frozenset[str]]] = []
    for t, k, holding in sorted(changes, key=lambda c: c[0]):
        holds[k] = holding
        if t <= until_ms:
            owned_at.append((t, frozenset().union(*holds.values())))
    first = next(t for t, owned in owned_at if owned)
    wanted = {f"{TOPIC}:{p}" for p in range(PARTITIONS)}
    unowned = longest = 0
    since: dict[str, int] = {}
    points = [(t, owned) for t, owned in owned_at if t >= first]
    for (t, owned), t_next in zip(points, [t for t, _ in points[1:]] + [until_ms], strict=True):
        missing = wanted - owned
        unowned += (t_next - t) * len(missing)
        for tp in wanted - missing:
            if tp in since:
                longest = max(longest, t - since.pop(tp))
        for tp in missing:
            since.setdefault(tp, t)
    for begun in since.values():
        longest = max(longest, until_ms - begun)
    return unowned, longest


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    """Both runs of the scenario on one Kafka 4.x broker; `until`: the end of both schedules (the
    consumers are stopped after it)."""
    broker = Broker(tmp_path_factory.mktemp("kafka-whatif"), 4, properties=BROKER_PROPERTIES)
    runs = {g: Run(broker, g, **kw) for g, kw in GROUPS.items()}
    try:
        broker.start()
        broker.create_topics({TOPIC: PARTITIONS})
        start, done = threading.Barrier(len(runs)), threading.Barrier(len(runs) + 1)
        threads = [threading.Thread(target=rolling_restart_and_crash, args=(r, start, done, k * B_OFFSET_S),
                                    name=g, daemon=True) for k, (g, r) in enumerate(runs.items())]
        for t in threads:
            t.start()
            time.sleep(0.5)
        with contextlib.suppress(threading.BrokenBarrierError):
            done.wait(timeout=400)
        until = datetime.now(UTC).replace(microsecond=0)  # a window bound is a whole second
        for r in runs.values():
            if r.error is not None:
                raise AssertionError(f"{r.group}: the scenario failed: {r.error!r}") from r.error
        for r in runs.values():
            r.stop()
        yield broker, runs, until
    finally:
        for r in runs.values():
            r.stop()
        broker.stop()


@pytest.fixture(scope="module")
def tables(spark, live, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's tables of the broker's `__consumer_offsets` up to the end of the schedules."""
    broker, _, until = live
    out = tmp_path_factory.mktemp("whatif-tables")
    cfg = load_config(None, {"input.path": "", "input.kafka_bootstrap": broker.bootstrap, "output.path": str(out),
                             "input.server_log": str(broker.server_log), "output.writer": "embedded",
                             "window.until": until, "job.shards": 2})
    run_audit(spark, cfg)
    return out


def _whatif(tables: Path, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert whatif.main(["--tables", str(tables), *args]) == 0, out.getvalue()
    return out.getvalue()


def _without_broker_log(tables: Path, group: str) -> tuple[Costs, float]:
    """The prediction of B from A's rows alone, as if the audit had not had the broker's log (its
    costs, and A's reproduction score then)."""
    rows = {cls: whatif._rows(str(tables), name, cls, group) for name, cls in (
        ("generations", GenerationRow), ("assignments", AssignmentRow), ("offset_commits", OffsetCommitRow),
        ("rebalance_causes", RebalanceCauseRow))}
    gens, assigned, commits, causes = rows.values()
    history, actual, rep = fit(lambda a: derive_history_from_rows(gens, assigned, commits, causes, assumptions=a),
                               [*gens, *assigned, *causes])
    return replay(history, Configuration(assignor="cooperative-sticky", static=True), known=[actual]).costs, rep.score


def test_the_what_if_of_a_predicts_b(live, tables: Path) -> None:
    """A reproduced exactly (score 1.0), and A's prediction of B against B's actual (audited) costs.

    Tolerance, from what differs between two real runs of the same schedule:
    * rebalances: exact. B rebalances at the joint start (one round: every JoinGroup falls in the
      initial rebalance delay) and at the crash's expiry (the cooperative round moves only the dead
      member's partitions, nobody revokes, no follow-up round); the static restarts are
      replacements, no round. None of it depends on timing at the scale of the schedule.
    * unowned partition-seconds: within 10. The crashed member's 2 partitions wait its session
      timeout give or take where its last heartbeat fell before the kill and when the survivors
      heard of the expiry (their next heartbeat), in each run independently (up to a heartbeat,
      3 s, each way per partition; about 6 partition-s at most); each restart's 2 partitions wait
      its downtime (4 s in both runs) plus the JoinGroup and SyncGroup round trips of a JVM on a
      shared machine (about 0.25 s: 2 partition-s over 4 restarts); B's audited stretches start
      at a last commit (auto-commit every 500 ms: at most 1 partition-s over the crash's 2
      partitions). About 9 partition-s in all, 10 with room: some 15 % of B's figure.
    """
    _, runs, until = live
    out_a = _whatif(tables, "--group", "whatif-a", "--assignor", "cooperative-sticky", "--static")
    out_b = _whatif(tables, "--group", "whatif-b")
    rows = {(r["group_id"], r["configuration"]): r for r in
            DeltaTable(str(tables / WHATIF_TABLE)).to_pyarrow_table().to_pylist()}
    a, predicted, b = rows[("whatif-a", "actual")], rows[("whatif-a", "cooperative-sticky static")], \
        rows[("whatif-b", "actual")]
    until_ms = int(until.timestamp() * 1000)
    seen = {g: held(r, until_ms) for g, r in runs.items()}
    blind, blind_score = _without_broker_log(tables, "whatif-a")
    figures = (
        f"\nA (range, dynamic) audited: {_costs(a)}\n"
        f"A replayed (reproduces {a['generations_reproduced']} of {a['generations_observed']} generations, score "
        f"{a['reproduction_score']:.2f}): {_costs(a, 'reproduction_')}\n"
        f"A as its consumers saw it: unowned {seen['whatif-a'][0] / 1000:.1f} partition-s, longest "
        f"{seen['whatif-a'][1] / 1000:.1f} s\n"
        f"B (cooperative-sticky, static) predicted from A: {_costs(predicted)}\n"
        f"B audited: {_costs(b)}\n"
        f"B replayed (reproduces {b['generations_reproduced']} of {b['generations_observed']}): "
        f"{_costs(b, 'reproduction_')}\n"
        f"B as its consumers saw it: unowned {seen['whatif-b'][0] / 1000:.1f} partition-s, longest "
        f"{seen['whatif-b'][1] / 1000:.1f} s\n"
        f"B predicted from A without the broker's log (A reproduced with score {blind_score:.2f}): "
        f"{blind.rebalances} rebalances, unowned {(blind.unowned_partition_ms or 0) / 1000:.1f} partition-s\n"
        f"steps A: {_steps(runs['whatif-a'])}\nsteps B: {_steps(runs['whatif-b'])}\n"
        f"--- whatif A ---\n{out_a}--- whatif B ---\n{out_b}")
    print(figures)
    # A is reproduced: every audited generation, by state, members, primary cause and assignment
    assert a["reproduction_score"] == 1.0, figures
    # the scenario shows the difference: A rebalanced at every restart, B only at the start and the crash
    assert a["rebalances"] >= 1 + CONSUMERS + 1 and a["members_stopped"] > 0, figures
    assert b["static_replacements"] == CONSUMERS and b["members_stopped"] == 0, figures
    assert predicted["rebalances"] == b["rebalances"] == 2, figures
    assert predicted["static_replacements"] == b["static_replacements"], figures
    assert abs(predicted["unowned_partition_ms"] - b["unowned_partition_ms"]) <= UNOWNED_TOLERANCE_MS, figures


def _costs(r: dict[str, Any], prefix: str = "") -> str:
    return (f"{r[prefix + 'rebalances']} rebalances, unowned {r[prefix + 'unowned_partition_ms'] / 1000:.1f} "
            f"partition-s (longest {r[prefix + 'longest_unowned_ms'] / 1000:.1f} s), "
            f"{r[prefix + 'partitions_moved']} moved, {r[prefix + 'members_stopped']} stopped"
            + ("" if prefix else f", {r['static_replacements']} static replacements"))


def _steps(run: Run) -> str:
    t0 = run.steps[0][0] if run.steps else 0.0
    return ", ".join(f"{what} +{t - t0:.1f}s" for t, what in run.steps)
