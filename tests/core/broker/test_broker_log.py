"""The broker's server.log account (coordinator_audit.core.broker_log) on the real Kafka 3.9.0 sample
(Scala coordinator) and on Kafka 4.x lines (Java coordinator), without Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_audit.core.broker_log import (
    BrokerLogError,
    broker_account,
    classify_reason,
    parse_lines,
    read_server_log,
    server_log_files,
)

SAMPLES = Path(__file__).resolve().parents[3] / "data" / "samples"
SAMPLE_LOG = SAMPLES / "real_broker_3_9_0.server.log"

JAVA = "[GroupCoordinator id=1 topic=__consumer_offsets partition=2]"
JAVA_LOGGER = "(org.apache.kafka.coordinator.group.GroupMetadataManager)"
JAVA_LINES = [
    f"[2026-11-24 06:44:44,310] INFO {JAVA} Preparing to rebalance group g1 in state PreparingRebalance with old "
    f"generation 0 (reason: Adding new member c1-0d8c with group instance id null; client reason: need to re-join "
    f"with the given member-id: c1-0d8c). {JAVA_LOGGER}",
    f"[2026-11-24 06:44:45,317] INFO {JAVA} Stabilized group g1 generation 1 with 1 members. {JAVA_LOGGER}",
    "[2026-11-24 06:44:45,318] INFO [LocalLog partition=t-0] Rolled new log segment (kafka.log.LocalLog)",
    f"[2026-11-24 06:44:50,761] INFO {JAVA} [Group g1] Member c1-0d8c has left group through explicit `LeaveGroup` "
    f"request; client reason: consumer poll timeout has expired. {JAVA_LOGGER}",
    f"[2026-11-24 06:44:50,761] INFO {JAVA} Preparing to rebalance group g1 in state PreparingRebalance with old "
    f"generation 1 (reason: explicit `LeaveGroup` request for (c1-0d8c) members.). {JAVA_LOGGER}",
    f"[2026-11-24 06:44:50,762] INFO {JAVA} Group g1 with generation 2 is now empty. {JAVA_LOGGER}",
]


def test_the_real_sample_gives_every_generation_at_the_brokers_own_stabilized_time() -> None:
    truth = json.loads((SAMPLES / "real_broker_3_9_0.truth.json").read_text())
    expected = {(g["group"], c["generation"]): c for g in truth["groups"] for c in g["observed_causes_by_generation"]}
    account = {(g.group_id, g.generation_id): g for g in broker_account(read_server_log(SAMPLE_LOG))}
    assert set(account) == set(expected)
    for key, c in expected.items():
        g = account[key]
        assert g.stabilized_at == c["stabilized_ts"], key
        assert g.broker_member_count == c["members"], key
        assert g.rebalance_duration_ms == g.stabilized_at - g.rebalance_started_at >= 0, key
        if c["cause"] == "cooperative_follow_up":
            assert g.broker_cause == "cooperative_follow_up", key
        if c["cause"] == "member_left_or_expired":
            assert g.broker_cause in ("member_left", "member_session_expired"), key
    # the crash of grp-s02 (consumer killed) and the clean leaves of grp-s01
    assert account[("grp-s02", 3)].broker_cause == "member_session_expired"
    assert account[("grp-s01", 2)].broker_cause == "member_left"
    assert account[("grp-s01", 3)].broker_state == "Empty"
    assert account[("grp-s05", 1)].broker_cause == "static_member_joined"


def test_java_coordinator_lines_and_the_leave_reason_from_the_members_own_line() -> None:
    account = broker_account(parse_lines(JAVA_LINES))
    assert [(g.generation_id, g.broker_state, g.broker_cause) for g in account] == [
        (1, "Stable", "member_joined"), (2, "Empty", "member_poll_timeout")]
    first, second = account
    assert first.rebalance_started_at == 1795502684310 and first.stabilized_at == 1795502685317
    assert first.rebalance_duration_ms == 1007
    assert second.broker_client_reason == "consumer poll timeout has expired."


def test_a_rebalance_line_that_does_not_parse_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "server.log"
    bad.write_text(JAVA_LINES[0] + "\n" + JAVA_LINES[1].replace("with 1 members", "with some members") + "\n")
    with pytest.raises(BrokerLogError, match=r"server\.log:2: a 'Stabilized group'"):
        broker_account(read_server_log(bad))


def test_a_directory_is_read_with_its_rotated_files_in_time_order(tmp_path: Path) -> None:
    (tmp_path / "server.log.2026-11-24-05").write_text("\n".join(JAVA_LINES[:2]) + "\n")
    (tmp_path / "server.log").write_text("\n".join(JAVA_LINES[2:]) + "\n")
    (tmp_path / "controller.log").write_text(JAVA_LINES[0] + "\n")
    assert [f.name for f in server_log_files(tmp_path)] == ["server.log.2026-11-24-05", "server.log"]
    assert [g.generation_id for g in broker_account(read_server_log(tmp_path))] == [1, 2]
    with pytest.raises(BrokerLogError, match="no such file"):
        server_log_files(tmp_path / "missing")


def test_a_log_that_starts_mid_rebalance_has_no_start_or_reason() -> None:
    (g,) = broker_account(parse_lines(JAVA_LINES[1:2]))
    assert g.broker_reason is None and g.rebalance_started_at is None and g.rebalance_duration_ms is None
    assert g.stabilized_at is not None


@pytest.mark.parametrize("reason,client,cause", [
    ("removing member m-1 on heartbeat expiration", None, "member_session_expired"),
    ("removing member m-1 on heartbeat expiration.", None, "member_session_expired"),
    ("Removing member m-1 on LeaveGroup; client reason: the consumer is being closed", None, "member_left"),
    ("Removing member m-1 on LeaveGroup; client reason: consumer poll timeout has expired.",
     "consumer poll timeout has expired.", "member_poll_timeout"),
    ("Adding new member m-1 with group instance id Some(i1); client reason: ", "", "static_member_joined"),
    ("Adding new member m-1 with group instance id None; client reason: not provided", None, "member_joined"),
    ("Updating metadata for static member m-1 with instance id i1; client reason: x", None, "static_member_rejoined"),
    ("Leader m-1 re-joining group during Stable; client reason: need to revoke partitions and re-join",
     "need to revoke partitions and re-join", "cooperative_follow_up"),
    ("Updating metadata for member m-1 during Stable; client reason: x", "x", "member_rejoined"),
    ("Removing m-1 on pending sync request expiration", None, "member_sync_expired"),
    ("something new", None, "other"),
    (None, None, None),
])
def test_reasons_are_classified(reason: str | None, client: str | None, cause: str | None) -> None:
    assert classify_reason(reason, client) == cause
