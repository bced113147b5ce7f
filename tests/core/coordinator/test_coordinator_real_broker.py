"""The real Apache Kafka 3.9.0 broker sample (Scala coordinator) against the port's Scala flavour:
the load path rebuilds exactly what each GroupMetadata record says (including the member order the
broker's mutable.HashMap produced), and a simulated grp-s01 reproduces the broker's own log lines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coordinator_audit.core.coordinator import CoordinatorConfig, GroupCoordinator, GroupState
from coordinator_audit.core.protocol import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    MemberIdentity,
    SyncGroupRequest,
)
from coordinator_audit.core.records import CoordinatorRecord, GroupMetadataKey, OffsetCommitKey, decode

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "samples" / "real_broker_3_9_0.parquet"
SERVER_LOG = Path("/work/shared/real-broker-sample/server_log_groupcoordinator.txt")


def _records() -> list[tuple[int, int, int, CoordinatorRecord]]:
    rows = pq.read_table(SAMPLE).to_pylist()
    rows.sort(key=lambda r: (r["partition"], r["offset"]))
    return [(r["partition"], r["offset"], int(r["timestamp"].timestamp() * 1000), decode(r["key"], r["value"]))
            for r in rows]


def _assert_group_matches(coord: GroupCoordinator, rec: CoordinatorRecord, where: str) -> None:
    """Follows GroupMetadataManager#loadGroup / GroupMetadata.loadGroup: the group equals its record."""
    assert isinstance(rec.key, GroupMetadataKey)
    v = coord.group(rec.key.group)
    value = rec.value
    if value is None:
        assert v is None, where
        return
    assert v is not None, where
    assert v.state == (GroupState.STABLE if value.members else GroupState.EMPTY), where
    assert v.generation_id == value.generation, where
    assert v.protocol_type == (value.protocol_type or None), where
    assert v.protocol_name == value.protocol, where
    assert v.leader_id == value.leader, where
    assert v.current_state_timestamp == (None if value.current_state_timestamp == -1
                                         else value.current_state_timestamp), where
    # the broker wrote its members in mutable.HashMap order; the rebuilt map iterates the same way
    assert [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
             m.session_timeout_ms, m.supported_protocols, m.assignment) for m in v.members] == [
        (m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout, m.session_timeout,
         ((value.protocol, m.subscription),), m.assignment) for m in value.members], where


def test_real_broker_log_replays_to_the_recorded_state() -> None:
    coord = GroupCoordinator(CoordinatorConfig(flavor="scala"))
    last_group: dict[str, CoordinatorRecord] = {}
    offsets: dict[tuple[str, str, int], object] = {}
    checked = 0
    for partition, offset, _ts, rec in _records():
        coord.replay(rec)
        if isinstance(rec.key, GroupMetadataKey):
            _assert_group_matches(coord, rec, f"__consumer_offsets-{partition}@{offset}")
            last_group[rec.key.group] = rec
            checked += 1
        elif isinstance(rec.key, OffsetCommitKey):
            k = (rec.key.group, rec.key.topic, rec.key.partition)
            if rec.value is None:
                offsets.pop(k, None)
            else:
                offsets[k] = rec.value
    assert checked == 22 and set(last_group) == {"grp-s01", "grp-s02", "grp-s05", "grp-s07"}
    for gid, rec in last_group.items():
        _assert_group_matches(coord, rec, f"end of log, {gid}")
        v = coord.group(gid)
        assert v is not None and v.state == GroupState.EMPTY  # every scenario ended with all members gone
    assert coord.unknown_records_skipped == 0
    for (gid, topic, part), value in offsets.items():
        o = coord.offsets(gid)[(topic, part)]
        assert (o.committed_offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms) == (
            value.offset, value.leader_epoch, value.metadata, value.commit_timestamp)  # type: ignore[attr-defined]
    assert sum(len(coord.offsets(g)) for g in last_group) == len(offsets)


# ------------------------------------------------------------------------------------------------
# grp-s01 simulated on the Scala flavour: the broker's log lines and records come out again


C1, C2, C3 = ("grp-s01-c1-d752a23f-9a3c-4b62-a45f-6a1d7bcdf0bd", "grp-s01-c2-a35ac3d1-942b-4583-8de4-08185e6df93b",
              "grp-s01-c3-9abb8a8b-605d-4373-8c7e-a5214e3b9265")
SUB = bytes.fromhex("000000000001000874702d7330312d6100000000")


def _ms(stamp: str) -> int:
    return int(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC).timestamp() * 1000)


def _real_lines(group: str) -> list[tuple[int, str]]:
    out = []
    for line in SERVER_LOG.read_text().splitlines():
        if f"group {group} " in line or f"group {group}." in line or f"Group {group} " in line:
            stamp, rest = line[1:].split("] ", 1)
            if "GroupCoordinator 1]" in rest and "Loading" not in rest and "Unloading" not in rest:
                out.append((_ms(stamp), rest))
    return out


@pytest.mark.skipif(not SERVER_LOG.exists(), reason="shared real-broker sample not present")
def test_simulated_grp_s01_reproduces_the_broker_log_lines_and_records() -> None:
    """GroupCoordinator (S) log texts and W1/W2 contents, for the steady scenario grp-s01: three
    kafka-python consumers (JoinGroup with MEMBER_ID_REQUIRED), range, then LeaveGroup one by one."""
    real = _real_lines("grp-s01")
    assert len(real) == 14
    times = [t for t, _ in real]
    ids = iter([C1, C2, C3])
    coord = GroupCoordinator(CoordinatorConfig(flavor="scala", group_initial_rebalance_delay_ms=100),
                             member_id_supplier=lambda prefix: next(ids))
    logs: list[str] = []
    records: list[CoordinatorRecord] = []
    corr = iter(range(1, 1000))

    def step(res) -> None:  # type: ignore[no-untyped-def]
        logs.extend(line.split("] ", 1)[1] for line in res.logs)
        records.extend(res.records)

    def join(member_id: str, client: str, t: int) -> None:
        step(coord.join_group(JoinGroupRequest(
            group_id="grp-s01", member_id=member_id, session_timeout_ms=10_000, rebalance_timeout_ms=300_000,
            protocol_type="consumer", protocols=(("range", SUB),), client_id=client, client_host="/127.0.0.1",
            api_version=5, correlation_id=next(corr)), now_ms=t))

    def sync(member_id: str, gen: int, t: int, assignments: tuple[tuple[str, bytes], ...] = ()) -> None:
        step(coord.sync_group(SyncGroupRequest(group_id="grp-s01", generation_id=gen, member_id=member_id,
                                               assignments=assignments, api_version=3,
                                               correlation_id=next(corr)), now_ms=t))

    def leave(member_id: str, t: int) -> None:
        step(coord.leave_group(LeaveGroupRequest(group_id="grp-s01", members=(MemberIdentity(member_id),),
                                                 api_version=3, correlation_id=next(corr)), now_ms=t))

    for client, t in zip(("grp-s01-c1", "grp-s01-c2", "grp-s01-c3"), times[:3], strict=True):
        join("", client, t)
    join(C2, "grp-s01-c2", times[3])
    join(C1, "grp-s01-c1", times[3] + 10)
    join(C3, "grp-s01-c3", times[3] + 20)
    step(coord.advance_time(now_ms=times[3] + 100))
    step(coord.advance_time(now_ms=times[3] + 200))
    gen1 = {C2: bytes.fromhex("000000000001000874702d7330312d6100000002000000020000000300000000"),
            C3: bytes.fromhex("000000000001000874702d7330312d6100000002000000040000000500000000"),
            C1: bytes.fromhex("000000000001000874702d7330312d6100000002000000000000000100000000")}
    sync(C2, 1, times[5], tuple(gen1.items()))
    sync(C1, 1, times[5] + 1)
    sync(C3, 1, times[5] + 2)
    for t in range(times[5] + 3000, times[6], 3000):  # heartbeats keep everybody in
        for m in (C1, C2, C3):
            coord.heartbeat(_hb(m, 1), now_ms=t)
    leave(C3, times[6])
    leave(C1, times[8])
    join(C2, "grp-s01-c2", times[9])
    gen2 = bytes.fromhex("000000000001000874702d7330312d610000000600000000000000010000000200000003000000040000000500000000")
    sync(C2, 2, times[10], ((C2, gen2),))
    leave(C2, times[11])

    # every broker line, in order, with the same text (the port also prints lines the sample left out)
    it = iter(logs)
    for _, line in real:
        assert any(line == mine for mine in it), f"missing or out of order: {line}"

    # the records equal the broker's (gen 1's currentStateTimestamp depends on the client's timing)
    written = [r for r in records if isinstance(r.key, GroupMetadataKey)]
    broker = [rec for _, _, _, rec in _records() if isinstance(rec.key, GroupMetadataKey) and rec.key.group == "grp-s01"]
    assert len(written) == len(broker) == 3
    for mine, theirs in zip(written, broker, strict=True):
        assert mine.value is not None and theirs.value is not None
        assert mine.value.members == theirs.value.members
        assert (mine.value.protocol_type, mine.value.generation, mine.value.protocol, mine.value.leader) == (
            theirs.value.protocol_type, theirs.value.generation, theirs.value.protocol, theirs.value.leader)
    assert [w.value.current_state_timestamp for w in written[1:]] == [  # type: ignore[union-attr]
        b.value.current_state_timestamp for b in broker[1:]]  # type: ignore[union-attr]


def _hb(member_id: str, generation: int) -> HeartbeatRequest:
    return HeartbeatRequest(group_id="grp-s01", generation_id=generation, member_id=member_id)

