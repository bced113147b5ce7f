"""A scenario test context for the coordinator port: drives one GroupCoordinator with a log time,
keeps every record written, and after each step checks that replaying those records (through the
codec: encode -> decode -> replay) on a fresh coordinator rebuilds the persisted state."""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator_audit.core.consumer_protocol import Subscription, encode_subscription
from coordinator_audit.core.coordinator import (
    CoordinatorConfig,
    CoordinatorResult,
    GroupCoordinator,
    GroupState,
)
from coordinator_audit.core.coordinator.views import GroupView
from coordinator_audit.core.protocol import (
    DeleteGroupsRequest,
    Errors,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    SyncGroupRequest,
)
from coordinator_audit.core.records import CoordinatorRecord, decode, encode


def sub(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0 bytes for `topics`."""
    return encode_subscription(Subscription(version=0, topics=tuple(topics)))


RANGE = (("range", sub("t")),)
SESSION = 10_000
REBALANCE = 60_000


@dataclass
class Ctx:
    """The scenario context. `flavor` picks the coordinator; keyword overrides go to CoordinatorConfig."""

    flavor: str = "java"
    group: str = "g"
    config_overrides: dict[str, object] = field(default_factory=dict)
    check_replay: bool = True

    def __post_init__(self) -> None:
        self.config = CoordinatorConfig(flavor=self.flavor, **self.config_overrides)  # type: ignore[arg-type]
        self.coord = GroupCoordinator(self.config)
        self.now = 0
        self.records: list[CoordinatorRecord] = []
        self.last: CoordinatorResult | None = None
        self._corr = 0
        self.tainted = False  # an injected append failure makes the log diverge from memory, as in Kafka

    # ------------------------------------------------------------------------------------------
    # time and plumbing

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _step(self, res: CoordinatorResult) -> CoordinatorResult:
        self.records.extend(res.records)
        self.last = res
        if self.check_replay and not self.tainted:
            assert_replay_matches(self)
        return res

    def at(self, t: int) -> CoordinatorResult:
        """Advance the log time to `t` (firing due timers)."""
        self.now = t
        return self._step(self.coord.advance_time(now_ms=t))

    def advance(self, ms: int) -> CoordinatorResult:
        return self.at(self.now + ms)

    def fail_next_append(self, error: Errors, *, written: bool = False) -> None:
        self.tainted = True
        self.coord.fail_next_append(error, written=written)

    def view(self, group: str | None = None) -> GroupView:
        v = self.coord.group(group or self.group)
        assert v is not None, f"no group {group or self.group!r}"
        return v

    # ------------------------------------------------------------------------------------------
    # requests

    def join(self, member_id: str = "", *, instance: str | None = None, protocols=RANGE, session: int = SESSION,
             rebalance: int = REBALANCE, version: int = 9, client_id: str = "client", reason: str | None = None,
             protocol_type: str = "consumer", group: str | None = None) -> CoordinatorResult:
        req = JoinGroupRequest(group_id=group if group is not None else self.group, member_id=member_id,
                               group_instance_id=instance, session_timeout_ms=session,
                               rebalance_timeout_ms=rebalance, protocol_type=protocol_type, protocols=protocols,
                               reason=reason, client_id=client_id, api_version=version,
                               correlation_id=self._next_corr())
        return self._step(self.coord.join_group(req, now_ms=self.now))

    def sync(self, member_id: str, generation: int, assignments: tuple[tuple[str, bytes], ...] = (), *,
             instance: str | None = None, protocol_type: str | None = "consumer", protocol_name: str | None = "range",
             group: str | None = None, version: int = 5) -> CoordinatorResult:
        req = SyncGroupRequest(group_id=group if group is not None else self.group, generation_id=generation,
                               member_id=member_id, group_instance_id=instance, protocol_type=protocol_type,
                               protocol_name=protocol_name, assignments=assignments, api_version=version,
                               correlation_id=self._next_corr())
        return self._step(self.coord.sync_group(req, now_ms=self.now))

    def heartbeat(self, member_id: str, generation: int, *, instance: str | None = None,
                  group: str | None = None) -> CoordinatorResult:
        req = HeartbeatRequest(group_id=group if group is not None else self.group, generation_id=generation,
                               member_id=member_id, group_instance_id=instance, correlation_id=self._next_corr())
        return self._step(self.coord.heartbeat(req, now_ms=self.now))

    def leave(self, *members: MemberIdentity | str, version: int = 5, group: str | None = None) -> CoordinatorResult:
        gid = group if group is not None else self.group
        if version < 3:
            (only,) = members
            assert isinstance(only, str)
            req = LeaveGroupRequest(group_id=gid, member_id=only, api_version=version,
                                    correlation_id=self._next_corr())
        else:
            ids = tuple(m if isinstance(m, MemberIdentity) else MemberIdentity(m) for m in members)
            req = LeaveGroupRequest(group_id=gid, members=ids, api_version=version, correlation_id=self._next_corr())
        return self._step(self.coord.leave_group(req, now_ms=self.now))

    def commit(self, offsets: dict[tuple[str, int], int] | None = None, *, member_id: str = "", generation: int = -1,
               instance: str | None = None, metadata: str | None = "", retention: int = -1, version: int = 9,
               group: str | None = None) -> CoordinatorResult:
        offsets = offsets if offsets is not None else {("t", 0): 10}
        topics: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(OffsetCommitRequestPartition(partition, offset, 5, metadata))
        req = OffsetCommitRequest(group_id=group if group is not None else self.group,
                                  topics=tuple(OffsetCommitRequestTopic(t, tuple(ps)) for t, ps in topics.items()),
                                  generation_id=generation, member_id=member_id, group_instance_id=instance,
                                  retention_time_ms=retention, api_version=version, correlation_id=self._next_corr())
        return self._step(self.coord.commit_offsets(req, now_ms=self.now))

    def delete(self, *group_ids: str) -> CoordinatorResult:
        req = DeleteGroupsRequest(group_ids=group_ids, correlation_id=self._next_corr())
        return self._step(self.coord.delete_groups(req, now_ms=self.now))

    # ------------------------------------------------------------------------------------------
    # common shapes

    def member_id_required(self, **kw: object) -> str:
        """A v4+ dynamic join without id: returns the id handed out with MEMBER_ID_REQUIRED."""
        res = self.join(**kw)  # type: ignore[arg-type]
        (resp,) = res.responses
        assert resp.error_code == Errors.MEMBER_ID_REQUIRED, resp
        return resp.member_id

    def stable_group(self, n: int = 1, *, static: bool = False, **kw: object) -> list[str]:
        """Brings `n` members to a Stable generation 1 (leader = first member); returns the member ids."""
        ids: list[str] = []
        for i in range(n):
            if static:
                res = self.join(instance=f"inst-{i}", **kw)  # type: ignore[arg-type]
                assert res.responses == ()
                ids.append(_newest(self, ids))
            else:
                mid = self.member_id_required(**kw)
                res = self.join(mid, **kw)  # type: ignore[arg-type]
                assert res.responses == ()
                ids.append(mid)
        for _ in range(10):  # the initial delay, extended once per window in which someone joined
            if self.view().state != GroupState.PREPARING_REBALANCE:
                break
            self.advance(self.config.group_initial_rebalance_delay_ms)
        v = self.view()
        assert v.state == GroupState.COMPLETING_REBALANCE, v.state
        leader = v.leader_id
        assert leader is not None
        assignments = tuple((m, f"a-{m}".encode()) for m in ids)
        self.sync(leader, v.generation_id, assignments)
        for m in ids:
            if m != leader:
                self.sync(m, v.generation_id)
        assert self.view().state == GroupState.STABLE
        return ids


def _newest(ctx: Ctx, known: list[str]) -> str:
    new = [m for m in ctx.view().member_ids if m not in known]
    assert len(new) == 1, new
    return new[0]


# ----------------------------------------------------------------------------------------------
# replay check


def persisted(view: GroupView) -> tuple[object, ...]:
    """The part of a group that GroupMetadata records carry (members sorted: a replayed hash map may
    iterate differently from the live one after resizes, exactly as in Kafka)."""
    members = tuple(sorted(
        (m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
         m.session_timeout_ms, dict(m.supported_protocols).get(view.protocol_name or "", b""), m.assignment)
        for m in view.members))
    return (view.generation_id, view.protocol_type, view.protocol_name, view.leader_id, members)


def _persisted_offsets(coord: GroupCoordinator, gid: str) -> dict[tuple[str, int], tuple[object, ...]]:
    """Offsets as records carry them: a v1 value (explicit expire timestamp) has no leader epoch."""
    return {tp: (o.committed_offset, o.leader_epoch if o.expire_timestamp_ms is None else None, o.metadata,
                 o.commit_timestamp_ms, o.expire_timestamp_ms)
            for tp, o in coord.offsets(gid).items()}


def replayed(ctx: Ctx) -> GroupCoordinator:
    """A fresh coordinator that replayed every record written so far, through the codec."""
    fresh = GroupCoordinator(ctx.config)
    for rec in ctx.records:
        key, value = encode(rec)
        fresh.replay(decode(key, value))
    return fresh


def assert_replay_matches(ctx: Ctx) -> None:
    """Replay equals live persisted state: offsets exactly; groups in Stable or Empty field by field."""
    fresh = replayed(ctx)
    live = ctx.coord
    for gid in set(live.group_ids()) | set(fresh.group_ids()):
        assert _persisted_offsets(live, gid) == _persisted_offsets(fresh, gid), f"offsets of {gid!r} differ"
        lv, fv = live.group(gid), fresh.group(gid)
        if lv is None:
            assert fv is None or (fv.state == GroupState.EMPTY and not live.offsets(gid)), \
                f"replay resurrected group {gid!r}"
            continue
        if lv.state not in (GroupState.STABLE, GroupState.EMPTY):
            continue
        if fv is None:
            # never written: S writes no record for a group that only handed out ids (no W5)
            assert lv.state == GroupState.EMPTY and lv.generation_id == 0 and not live.offsets(gid), \
                f"live group {gid!r} in {lv.state} has no record"
            continue
        assert fv.state == lv.state, (gid, fv.state, lv.state)
        assert persisted(fv) == persisted(lv), f"group {gid!r}: replay {persisted(fv)} != live {persisted(lv)}"
        if lv.state == GroupState.EMPTY and lv.current_state_timestamp is not None \
                and fv.current_state_timestamp is not None:
            assert fv.current_state_timestamp == lv.current_state_timestamp
