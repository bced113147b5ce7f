"""Runs a scenario: consumers + assignors + the real coordinator on a virtual clock, writing the log.

`run_scenario(scenario)` returns the `__consumer_offsets` records (as a reader would see them, after
any dropped prefix), the full log, and the ground truth. Everything is a function of the scenario
and its seed: two runs give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from coordinator_audit.core.client.consumer import ConsumerConfig, GroupConsumer, Request
from coordinator_audit.core.client.misbehaviour import BuggyAssignor
from coordinator_audit.core.errors import ScenarioError
from coordinator_audit.core.protocol import (
    DeleteGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from coordinator_audit.core.sim.clock import EventQueue
from coordinator_audit.core.sim.log import LogRecord, LogWriter
from coordinator_audit.core.sim.port import (
    CoordinatorPort,
    GroupSnapshot,
    encode_record,
    make_assignor,
    partition_for,
)
from coordinator_audit.core.sim.scenario import ConsumerSpec, Scenario, Step
from coordinator_audit.core.sim.tracker import TruthTracker
from coordinator_audit.core.sim.truth import Truth


@dataclass(slots=True)
class RunResult:
    scenario: Scenario
    records: list[LogRecord]
    full_records: list[LogRecord]
    truth: Truth
    port: CoordinatorPort


@dataclass(slots=True, eq=False)
class _Process:
    name: str
    spec: ConsumerSpec
    consumer: GroupConsumer
    pid: int
    wake: Any = None
    wake_at: int | None = None


@dataclass(slots=True)
class _Armed:
    leader_crash_mid_sync: bool = False


class Runner:
    """Runs one scenario. `track_truth=False` leaves the ground truth (`RunResult.truth`) empty but for
    the events and record count, and spares the per-request group snapshots it is built from: the
    log written is the same (a caller that needs only the log, e.g. a what-if replay). `member_ids`
    supplies the coordinator's new member ids (default: seeded from the scenario's seed)."""

    def __init__(self, scenario: Scenario, *, track_truth: bool = True,
                 member_ids: Callable[[str], str] | None = None) -> None:
        self.s = scenario
        self.track_truth = track_truth
        self.q = EventQueue(scenario.start_ms)
        self.metadata: dict[str, int] = dict(scenario.topics)
        self.partition = partition_for(scenario.group, scenario.offsets_partitions)
        self.log = LogWriter()
        self.port = CoordinatorPort(initial_rebalance_delay_ms=scenario.initial_rebalance_delay_ms,
                                    offsets_partitions=scenario.offsets_partitions, seed=scenario.seed,
                                    member_ids=member_ids, flavor=scenario.flavor)
        self.truth = Truth(scenario=scenario.name, group=scenario.group, seed=scenario.seed,
                           consumer_offsets_partition=self.partition, description=scenario.description,
                           coordinator_flavour=scenario.flavor)
        self.tracker = TruthTracker(self.truth) if track_truth else _Untracked(self.truth)
        self.procs: dict[str, _Process] = {}
        self.zombies: list[_Process] = []
        self.by_cid: dict[int, _Process] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.specs: dict[str, ConsumerSpec] = {c.name: c for c in scenario.consumers}
        self.armed = _Armed()
        self._cid = 0
        self._pid = 0
        self._coord_tick: Any = None
        self._coord_tick_at: int | None = None

    # ----------------------------------------------------------------------------------------------
    # plumbing

    def _next_cid(self) -> int:
        self._cid += 1
        return self._cid

    def _snapshot(self) -> GroupSnapshot | None:
        """The group's state for the truth tracker (None when the truth is not tracked)."""
        return self.port.snapshot(self.s.group) if self.track_truth else None

    def _event(self, kind: str, **data: Any) -> None:
        self.truth.events.append({"at_ms": self.q.now - self.s.start_ms, "event": kind, **data})

    def _apply_result(self, result: Any, now: int, *, committer: str | None = None) -> None:
        self.tracker.set_committer(committer)
        snap = self._snapshot() if result.records else None
        for rec in result.records:
            key, value = encode_record(rec)
            logged = self.log.append(self.partition, now, key, value)
            self.tracker.on_record(rec, logged, snap)
            if value is not None and hasattr(rec.key, "topic"):
                self.committed[(rec.key.topic, rec.key.partition)] = rec.value.offset
        for cid in getattr(result, "dropped", ()):
            proc = self.by_cid.pop(cid, None)
            if proc is not None:
                # Kafka abandoned the parked request: the client's request timeout fires instead
                wait = proc.consumer.config.max_poll_interval_ms + 5000
                self.q.after(wait, partial(self._time_out, proc, cid),
                             "request timeout")
        for resp in result.responses:
            proc = self.by_cid.pop(resp.correlation_id, None)
            if proc is not None:
                self.q.after(self.s.network_ms, partial(self._deliver, proc, resp), "response")

    def _time_out(self, proc: _Process, correlation_id: int, now: int) -> None:
        self._send(proc, proc.consumer.request_timed_out(correlation_id, now), now)

    def _metadata_update(self, proc: _Process, now: int) -> None:
        self._send(proc, proc.consumer.on_metadata_update(now), now)

    def _deliver(self, proc: _Process, response: Any, now: int) -> None:
        if (self.armed.leader_crash_mid_sync and isinstance(response, JoinGroupResponse)
                and response.error_code == 0 and response.leader == response.member_id
                and proc.consumer.alive):
            # the leader dies between its JoinGroup response and its SyncGroup
            self.armed.leader_crash_mid_sync = False
            self._event("leader_crash_mid_sync", consumer=proc.name, generation_id=response.generation_id,
                        member_id=response.member_id)
            proc.consumer.crash()
            self._reschedule(proc)
            return
        self._send(proc, proc.consumer.handle(response, now), now)

    def _send(self, proc: _Process, requests: list[Request], now: int) -> None:
        for req in requests:
            self._call(proc, req, now)
        self._reschedule(proc)

    def _call(self, proc: _Process | None, req: Any, now: int) -> None:
        self._fire_coordinator_timers(now)
        if proc is not None:
            self.by_cid[req.correlation_id] = proc
        member_id = getattr(req, "member_id", None) or None
        if isinstance(req, HeartbeatRequest | SyncGroupRequest | OffsetCommitRequest):
            # these never change membership (timers due now have fired above): no before/after needed
            self._apply_result(self.port.call(req, now), now, committer=member_id)
            self._schedule_coordinator()
            return
        before = self._snapshot()
        result = self.port.call(req, now)
        after = self._snapshot()
        is_join = isinstance(req, JoinGroupRequest)
        consumer = proc.consumer if proc else None
        self._apply_result(result, now, committer=member_id)
        self.tracker.on_step(before, after, member_id=member_id,
                             reason=req.reason if is_join else None,
                             topics=consumer.subscription if (is_join and consumer) else None,
                             is_join=is_join, is_leave=isinstance(req, LeaveGroupRequest))
        self._schedule_coordinator()

    def _fire_coordinator_timers(self, now: int) -> None:
        deadline = self.port.next_deadline()
        if deadline is not None and deadline <= now:
            before = self._snapshot()
            result = self.port.advance_time(now)
            after = self._snapshot()
            self._apply_result(result, now)
            self.tracker.on_step(before, after, member_id=None, reason=None, topics=None,
                                 is_join=False, is_leave=False)

    def _schedule_coordinator(self) -> None:
        deadline = self.port.next_deadline()
        if deadline is None or (self._coord_tick_at is not None and self._coord_tick_at <= deadline
                                and self._coord_tick is not None and not self._coord_tick.cancelled):
            return
        self.q.cancel(self._coord_tick)
        self._coord_tick_at = max(deadline, self.q.now)
        self._coord_tick = self.q.schedule(self._coord_tick_at, self._coordinator_tick, "coordinator timers")

    def _coordinator_tick(self, now: int) -> None:
        self._coord_tick = None
        self._coord_tick_at = None
        self._fire_coordinator_timers(now)
        self._schedule_coordinator()

    def _reschedule(self, proc: _Process) -> None:
        at = proc.consumer.wake_at()
        if at is None:
            self.q.cancel(proc.wake)
            proc.wake, proc.wake_at = None, None
            return
        at = max(at, self.q.now)
        if proc.wake is not None and not proc.wake.cancelled and proc.wake_at == at:
            return
        self.q.cancel(proc.wake)
        proc.wake_at = at
        proc.wake = self.q.schedule(at, partial(self._tick, proc), f"wake {proc.name}")

    def _tick(self, proc: _Process, now: int) -> None:
        proc.wake, proc.wake_at = None, None
        self._send(proc, proc.consumer.tick(now), now)

    # ----------------------------------------------------------------------------------------------
    # processes

    def _new_process(self, spec: ConsumerSpec) -> _Process:
        self._pid += 1
        index = [c.name for c in self.s.consumers].index(spec.name) + 1
        config = ConsumerConfig(
            group_id=self.s.group, client_id=spec.client_id or f"consumer-{self.s.group}-{index}",
            client_host=spec.client_host or f"/10.0.0.{index}", group_instance_id=spec.group_instance_id,
            session_timeout_ms=spec.session_timeout_ms, heartbeat_interval_ms=spec.heartbeat_interval_ms,
            max_poll_interval_ms=spec.max_poll_interval_ms, enable_auto_commit=spec.auto_commit,
            auto_commit_interval_ms=spec.auto_commit_interval_ms, retry_backoff_ms=spec.retry_backoff_ms,
            subscription_version=spec.subscription_version, client_rack=spec.rack,
            records_per_sec=spec.records_per_sec, stale_claims=bool(spec.bug("stale_claims")))
        assignors = [make_assignor(n) for n in spec.assignors]
        bug = spec.bug("assignor")
        if bug:
            assignors = [BuggyAssignor(a, bug, report=self._reporter(spec.name), all_topics=lambda: self.metadata)
                         for a in assignors]
        holder: list[_Process] = []
        consumer = GroupConsumer(config, assignors, topics=spec.topics, metadata=lambda: self.metadata,
                                 committed=lambda t, p: self.committed.get((t, p)),
                                 next_correlation_id=self._next_cid,
                                 observer=lambda kind, data: self._observe(holder[0], kind, data))
        proc = _Process(spec.name, spec, consumer, self._pid)
        holder.append(proc)
        return proc

    def _reporter(self, name: str) -> Callable[[str, dict[str, Any]], None]:
        def report(kind: str, detail: dict[str, Any]) -> None:
            self.tracker.plant(kind, detail, at_ms=self.q.now - self.s.start_ms, consumer=name)
        return report

    def _observe(self, proc: _Process, kind: str, data: dict[str, Any]) -> None:
        if kind == "stale_claims":
            self.tracker.plant("stale_ownership_claim", {"generation": data["generation"],
                                                         "partitions": [list(tp) for tp in data["partitions"]]},
                               at_ms=self.q.now - self.s.start_ms, consumer=proc.name)
        elif kind in ("fatal", "assignment_mismatch"):
            self._event(kind, consumer=proc.name, **{k: v for k, v in data.items() if k != "partitions"})

    def _start(self, name: str, now: int) -> None:
        current = self.procs.get(name)
        if current is not None and current.consumer.alive and not current.consumer.closing:
            raise ScenarioError(f"scenario {self.s.name!r}: consumer {name!r} started twice at t={now - self.s.start_ms}")
        proc = self._new_process(self.specs[name])
        self.procs[name] = proc
        self._event("start", consumer=name)
        self._send(proc, proc.consumer.start(now), now)

    def _stop(self, name: str, now: int, *, crash: bool) -> None:
        proc = self.procs.get(name)
        if proc is None or not proc.consumer.alive:
            return
        self._event("crash" if crash else "close", consumer=name, member_id=proc.consumer.generation.member_id)
        if crash:
            proc.consumer.crash()
            self._reschedule(proc)
        else:
            self._send(proc, proc.consumer.close(now), now)

    # ----------------------------------------------------------------------------------------------
    # timeline

    def run(self) -> RunResult:
        for step in self.s.timeline:
            self.q.schedule(self.s.start_ms + step.at, partial(self._do, step), f"step {step.index}")
        self.q.run_until(self.s.start_ms + self.s.end_ms)
        self.truth.records = len(self.log)
        full = list(self.log.records)
        records = full[self.s.drop_prefix:]
        if self.s.drop_prefix:
            _apply_partial_history(self.truth, records[0].offset if records else 0, self.s.drop_prefix)
        return RunResult(self.s, records, full, self.truth, self.port)

    def _do(self, step: Step, now: int) -> None:
        handler = getattr(self, f"_do_{step.do}")
        handler(step, now)

    def _do_start(self, step: Step, now: int) -> None:
        for name in step.consumers():
            self._start(name, now)

    def _do_scale_out(self, step: Step, now: int) -> None:
        self._do_start(step, now)

    def _do_crash(self, step: Step, now: int) -> None:
        for name in step.consumers():
            self._stop(name, now, crash=True)

    def _do_close(self, step: Step, now: int) -> None:
        for name in step.consumers():
            self._stop(name, now, crash=False)

    def _do_scale_in(self, step: Step, now: int) -> None:
        self._do_close(step, now)

    def _restart_one(self, name: str, now: int, step: Step) -> None:
        self._stop(name, now, crash=bool(step.get("crash", False)))
        changes = dict(step.get("set", ()))
        if changes:
            self.specs[name] = _with(self.specs[name], changes)
        self.q.after(step.get("downtime_ms", 0), partial(self._start, name), f"restart {name}")

    def _do_restart(self, step: Step, now: int) -> None:
        for name in step.consumers():
            self._restart_one(name, now, step)

    def _do_rolling_bounce(self, step: Step, now: int) -> None:
        names = step.consumers() or tuple(n for n, p in self.procs.items() if p.consumer.alive)
        interval = step.get("interval_ms", 10000)
        for i, name in enumerate(names):
            self.q.after(i * interval, partial(self._restart_one, name, step=step), f"bounce {name}")

    def _do_pause(self, step: Step, now: int) -> None:
        proc = self.procs.get(step.get("consumer"))
        if proc is None or not proc.consumer.alive:
            return
        proc.consumer.pause(now, step.get("ms"))
        self._event("pause", consumer=proc.name, ms=step.get("ms"))
        self._reschedule(proc)

    def _do_subscribe(self, step: Step, now: int) -> None:
        topics = step.get("topics")
        for name in step.consumers():
            self.specs[name] = _with(self.specs[name], {"topics": tuple(topics)})
            proc = self.procs.get(name)
            if proc is not None and proc.consumer.alive:
                self._event("subscribe", consumer=name, topics=list(topics))
                self._send(proc, proc.consumer.subscribe(topics, now), now)

    def _do_set_partitions(self, step: Step, now: int) -> None:
        self.metadata[step.get("topic")] = step.get("partitions")
        self._event("set_partitions", topic=step.get("topic"), partitions=step.get("partitions"))
        for proc in list(self.procs.values()):
            if proc.consumer.alive:
                self.q.after(step.get("refresh_ms", 1000),
                             partial(self._metadata_update, proc), "metadata")

    def _do_rejoin(self, step: Step, now: int) -> None:
        proc = self.procs.get(step.get("consumer"))
        if proc is not None and proc.consumer.alive:
            reason = step.get("reason", "cached metadata has changed")
            self._event("rejoin", consumer=proc.name, reason=reason)
            self._send(proc, proc.consumer.request_rejoin(reason, now), now)

    def _do_rewind(self, step: Step, now: int) -> None:
        proc = self.procs.get(step.get("consumer"))
        if proc is not None and proc.consumer.alive:
            proc.consumer.rewind(step.get("topic"), step.get("partition"), step.get("by"), now)
            self.tracker.plant("offset_rewind", {"topic": step.get("topic"), "partition": step.get("partition"),
                                                 "by": step.get("by")}, at_ms=now - self.s.start_ms,
                               consumer=proc.name, confirm=False)

    def _do_commit_wrong_generation(self, step: Step, now: int) -> None:
        proc = self.procs.get(step.get("consumer"))
        if proc is not None and proc.consumer.alive:
            delta = step.get("generation_delta", -1)
            self.tracker.plant("wrong_generation_commit", {"generation_delta": delta,
                                                           "generation_id": proc.consumer.generation.generation_id},
                               at_ms=now - self.s.start_ms, consumer=proc.name, confirm=False)
            self._send(proc, proc.consumer.commit_with_generation(delta, now), now)

    def _do_spawn_duplicate(self, step: Step, now: int) -> None:
        name = step.get("consumer")
        old = self.procs.get(name)
        if old is not None:
            self.zombies.append(old)
        self.procs.pop(name, None)
        self._event("spawn_duplicate", consumer=name)
        self._start(name, now)

    def _do_leader_crash_mid_sync(self, step: Step, now: int) -> None:
        self.armed.leader_crash_mid_sync = True
        self._event("leader_crash_mid_sync_armed")

    def _do_coordinator_failover(self, step: Step, now: int) -> None:
        self._fire_coordinator_timers(now)
        pairs = [(r.key, r.value) for r in self.log.records]
        before = self._snapshot()
        unload, load = self.port.failover(pairs, now)
        self._event("coordinator_failover", records_replayed=len(pairs))
        self._apply_result(unload, now)
        self._apply_result(load, now)
        after = self._snapshot()
        self.tracker.on_step(before, after, member_id=None, reason=None, topics=None, is_join=False, is_leave=False)
        self._coord_tick = None
        self._coord_tick_at = None
        self._schedule_coordinator()

    def _do_delete_group(self, step: Step, now: int) -> None:
        self._call(None, DeleteGroupsRequest(group_ids=(self.s.group,), correlation_id=self._next_cid()), now)


class _Untracked(TruthTracker):
    """The tracker of a run whose ground truth is not wanted: it records nothing."""

    def on_step(self, before: GroupSnapshot | None, after: GroupSnapshot | None, **_: Any) -> None:
        pass

    def plant(self, kind: str, detail: dict[str, Any], **_: Any) -> None:
        pass

    def on_record(self, rec: Any, logged: LogRecord, snapshot: GroupSnapshot | None) -> None:
        pass

    def set_committer(self, member_id: str | None) -> None:
        pass


def _with(spec: ConsumerSpec, changes: dict[str, Any]) -> ConsumerSpec:
    from dataclasses import replace

    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()}
    return replace(spec, **fields)


def _apply_partial_history(truth: Truth, first_offset: int, dropped: int) -> None:
    """Rewrites the truth as a reader of the log without its first `dropped` records knows it."""
    truth.dropped_prefix = dropped
    kept = [g for g in truth.generations if g.source_offset >= first_offset]
    truth.generations = kept
    if not kept:
        truth.causes, truth.violations = [], []
        return
    first_gen = kept[0].generation_id
    from coordinator_audit.core.sim.truth import CauseRow

    truth.causes = [CauseRow(first_gen, None, "history_start", None, None, f"log starts at offset {first_offset}",
                             True)] + [
        c for c in truth.causes if c.generation_id > first_gen]
    truth.violations = [v for v in truth.violations if all(o >= first_offset for o in v.source_offsets)
                        and v.generation_id >= first_gen]


def run_scenario(scenario: Scenario) -> RunResult:
    """Runs `scenario` to its end and returns the log and the ground truth."""
    return Runner(scenario).run()


__all__ = ["RunResult", "Runner", "run_scenario"]
