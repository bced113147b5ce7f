"""Every rebalance cause on hand-built logs (written with the real codec)."""

from __future__ import annotations

from typing import Any

from coordinator_audit.core.audit import GroupAuditor

from .audit_builders import T0, LogBuilder, member, rows_by_table, tps


def audit(log: LogBuilder) -> dict[str, list[Any]]:
    auditor = GroupAuditor()
    rows = list(auditor.feed(log.records)) + auditor.finish()
    c = auditor.counts
    assert c.records_in == c.duplicates + c.replayed + c.quarantined + c.skipped_other_type
    return rows_by_table(rows)


def causes(tables: dict[str, list[Any]], gen: int | None) -> list[str]:
    return [c.cause for c in tables["rebalance_causes"] if c.generation_id == gen]


def primary(tables: dict[str, list[Any]], gen: int | None) -> str:
    (p,) = [c.cause for c in tables["rebalance_causes"] if c.generation_id == gen and c.is_primary]
    return p


A = tps("t", 0, 1, 2)
B = tps("t", 3, 4, 5)
ALL = A + B


def test_group_created_from_first_generation() -> None:
    t = audit(LogBuilder().group(1, [member("a-1", ALL)]))
    assert causes(t, 1) == ["group_created"]
    (row,) = t["rebalance_causes"]
    assert row.previous_generation_id is None and row.is_primary and row.member_id == "a-1"
    assert t["generations"][0].missing_generations == 0


def test_java_creation_record_is_group_created_and_first_generation_is_a_join() -> None:
    log = (LogBuilder().group(0, [], protocol_type="")
           .group(1, [member("b-1", B), member("a-1", A)], leader="a-1"))
    t = audit(log)
    assert causes(t, 0) == ["group_created"]
    assert primary(t, 1) == "member_joined"
    first = next(c for c in t["rebalance_causes"] if c.generation_id == 1 and c.is_primary)
    # the leader is the first member Kafka added: its join started the round; the detail lists all
    assert first.member_id == "a-1" and first.previous_generation_id == 0
    assert "2 joined in this round" in first.detail and "b-1" in first.detail
    g0 = next(g for g in t["generations"] if g.generation_id == 0)
    assert g0.state == "Empty" and g0.protocol_type is None and g0.ended_by_offset == 1
    assert {g.coordinator_flavour for g in t["generations"]} == {"java"}


def test_scala_first_generation_without_creation_record() -> None:
    t = audit(LogBuilder().group(1, [member("b-1", B), member("a-1", A)], leader="a-1"))
    row = next(c for c in t["rebalance_causes"] if c.is_primary)
    assert (row.cause, row.member_id) == ("group_created", "a-1")
    assert t["generations"][0].coordinator_flavour == "scala"


def test_flavour_unknown_when_commits_came_before_the_first_generation() -> None:
    # a group created by an offset commit (no JoinGroup): neither coordinator writes a creation record
    t = audit(LogBuilder().commit("t", 0, 5).group(1, [member("a-1", ALL)]))
    assert primary(t, 1) == "group_created"
    assert t["generations"][0].coordinator_flavour == "unknown"


def test_java_generation_zero_tombstone() -> None:
    t = audit(LogBuilder().group(0, [], protocol_type="").tombstone())
    (row,) = [c for c in t["rebalance_causes"] if c.cause == "group_deleted"]
    assert row.generation_id == 0 and not row.is_primary and "Java" in row.detail
    assert primary(t, 0) == "group_created"


def test_member_joined_and_left() -> None:
    log = (LogBuilder().group(1, [member("a-1", ALL)])
           .group(2, [member("a-1", A), member("b-1", B)])
           .group(3, [member("b-1", ALL)]))
    t = audit(log)
    assert causes(t, 2) == ["member_joined"]
    joined = next(c for c in t["rebalance_causes"] if c.generation_id == 2)
    assert joined.member_id == "b-1" and joined.previous_generation_id == 1
    assert causes(t, 3) == ["member_left_or_expired"]
    assert next(c for c in t["rebalance_causes"] if c.generation_id == 3).member_id == "a-1"


def test_joined_and_left_together_without_commits_primary_is_the_leave() -> None:
    log = LogBuilder().group(1, [member("a-1", A), member("b-1", B)]).group(2, [member("a-1", A), member("c-1", B)])
    t = audit(log)
    assert primary(t, 2) == "member_left_or_expired"
    assert causes(t, 2) == ["member_left_or_expired", "member_joined"]


def _rows_of(t: dict[str, list[Any]], gen: int) -> list[Any]:
    return [c for c in t["rebalance_causes"] if c.generation_id == gen]


def test_rolling_restart_leave_then_join_names_the_leaver() -> None:
    # b closes (its close commit, then LeaveGroup); a hears of it within a heartbeat and commits
    # before rejoining; b's restarted process joins the same round
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B, client_id="b")], state_ts=T0)
           .commit("t", 3, 10, at=T0 + 20_000).commit("t", 0, 10, at=T0 + 22_000)
           .group(2, [member("a-1", A), member("b-2", B, client_id="b")], at=T0 + 25_000))
    t = audit(log)
    first = next(c for c in _rows_of(t, 2) if c.is_primary)
    assert (first.cause, first.member_id) == ("member_left_or_expired", "b-1")
    assert "offset 1" in first.evidence  # the leaver's close commit
    assert causes(t, 2) == ["member_left_or_expired", "member_joined"]


def test_leader_rejoin_while_a_member_expires_inside_the_join_phase() -> None:
    # a (leader) rejoins at +21 s (its commit before rejoining); b died after its commit at +19 s and
    # its session (10 s) can only expire at +29 s: the join phase waited for it
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B)], state_ts=T0)
           .commit("t", 3, 10, at=T0 + 19_000).commit("t", 0, 10, at=T0 + 25_000)
           .group(2, [member("a-1", ALL)], at=T0 + 30_000))
    t = audit(log)
    first = next(c for c in _rows_of(t, 2) if c.is_primary)
    assert (first.cause, first.member_id) == ("metadata_or_leader_rejoin", "a-1")
    left = next(c for c in _rows_of(t, 2) if c.cause == "member_left_or_expired")
    assert left.member_id == "b-1" and not left.is_primary and "inside the join phase" in left.detail


def test_expired_member_first_when_its_session_ran_out_before_the_others_rejoined() -> None:
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B)], state_ts=T0)
           .commit("t", 3, 10, at=T0 + 5_000).commit("t", 0, 10, at=T0 + 16_000)
           .group(2, [member("a-1", ALL)], at=T0 + 17_000))
    t = audit(log)
    first = next(c for c in _rows_of(t, 2) if c.is_primary)
    assert (first.cause, first.member_id) == ("member_left_or_expired", "b-1")


def test_two_leavers_name_the_first() -> None:
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", tps("t", 3)), member("c-1", tps("t", 4, 5))],
                              state_ts=T0)
           .commit("t", 4, 10, at=T0 + 20_000).commit("t", 3, 10, at=T0 + 20_500).commit("t", 0, 10, at=T0 + 21_000)
           .group(2, [member("a-1", ALL)], at=T0 + 22_000))
    t = audit(log)
    first = next(c for c in _rows_of(t, 2) if c.is_primary)
    assert (first.cause, first.member_id) == ("member_left_or_expired", "c-1")


def test_group_emptied_names_the_last_to_leave() -> None:
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B)])
           .commit("t", 3, 10).commit("t", 0, 10).group(2, []))
    t = audit(log)
    (row,) = _rows_of(t, 2)
    assert (row.cause, row.member_id, row.is_primary) == ("group_emptied", "a-1", True)


def test_two_joiners_a_restarted_process_joins_after_its_predecessor() -> None:
    # a-1 rejoined (commit at +21 s) while c-1 still committed (+22 s): the round began before c
    # left. c-2 is c's restart (same client id and host): it cannot have joined before c-1's last
    # commit; d-1 is a new process and could have joined any time after generation 1
    log = (LogBuilder().group(1, [member("a-1", A), member("c-1", B, client_id="c")], state_ts=T0)
           .commit("t", 0, 10, at=T0 + 21_000).commit("t", 3, 10, at=T0 + 22_000)
           .group(2, [member("c-2", tps("t", 3), client_id="c"), member("a-1", A), member("d-1", tps("t", 4, 5))],
                  at=T0 + 40_000))
    t = audit(log)
    first = next(c for c in _rows_of(t, 2) if c.is_primary and c.cause == "member_joined")
    assert first.member_id == "d-1" and "c-2" in first.detail and "d-1" in first.detail


def test_static_member_replaced_in_same_generation() -> None:
    log = (LogBuilder().group(1, [member("s1-a", A, instance="s1"), member("s2-a", B, instance="s2")])
           .group(1, [member("s1-b", A, instance="s1"), member("s2-a", B, instance="s2")]))
    t = audit(log)
    assert causes(t, 1) == ["group_created", "static_member_replaced"]
    repl = t["rebalance_causes"][1]
    assert (repl.member_id, repl.group_instance_id, repl.is_primary) == ("s1-b", "s1", False)
    assert t["violations"] == []
    (gen,) = t["generations"]
    assert gen.static_replacements == 1 and gen.leader_id == "s1-b"  # the replaced leader's role moves on
    assert {a.member_id for a in t["assignments"]} == {"s1-a", "s1-b", "s2-a"}


def test_static_member_rejoined_new_generation() -> None:
    log = (LogBuilder().group(1, [member("s1-a", A, instance="s1"), member("s2-a", B, instance="s2")])
           .group(2, [member("s1-b", A, instance="s1"), member("s2-a", B, instance="s2")]))
    t = audit(log)
    assert causes(t, 2) == ["static_member_rejoined_new_generation"]
    assert t["rebalance_causes"][1].group_instance_id == "s1"


def test_static_member_expired_and_back_is_a_rejoin() -> None:
    log = (LogBuilder().group(1, [member("s1-a", A, instance="s1"), member("s2-a", B, instance="s2")])
           .group(2, [member("s2-a", ALL, instance="s2")])
           .group(3, [member("s1-b", A, instance="s1"), member("s2-a", B, instance="s2")]))
    t = audit(log)
    assert causes(t, 2) == ["member_left_or_expired"]
    assert causes(t, 3) == ["static_member_rejoined_new_generation"]


def test_subscription_changed() -> None:
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B)])
           .group(2, [member("a-1", A + tps("u", 0), topics=("t", "u")), member("b-1", B)]))
    t = audit(log)
    assert causes(t, 2) == ["subscription_changed"]
    row = t["rebalance_causes"][1]
    assert row.member_id == "a-1" and "'u'" in row.detail


def test_assignor_changed() -> None:
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B)], protocol="range")
           .group(2, [member("a-1", A), member("b-1", B)], protocol="cooperative-sticky"))
    t = audit(log)
    assert causes(t, 2) == ["assignor_changed"]
    assert "range" in t["rebalance_causes"][1].detail


def test_cooperative_follow_up() -> None:
    log = (LogBuilder().group(1, [member("a-1", ALL)], protocol="cooperative-sticky")
           # b joins: a keeps A, gives up B (owned at join, not assigned), b gets nothing yet
           .group(2, [member("a-1", A, owned=ALL, generation_id=1), member("b-1", ())],
                  protocol="cooperative-sticky")
           .group(3, [member("a-1", A, owned=A, generation_id=2), member("b-1", B, generation_id=2)],
                  protocol="cooperative-sticky"))
    t = audit(log)
    assert causes(t, 2) == ["member_joined"]
    assert causes(t, 3) == ["cooperative_follow_up"]
    assert "t-3" in t["rebalance_causes"][2].detail
    assert t["violations"] == []
    gens = {g.generation_id: g for g in t["generations"]}
    assert gens[2].rebalance_protocol == gens[3].rebalance_protocol == "COOPERATIVE"
    owned = {(a.member_id, a.partition): a.owned_before for a in t["assignments"] if a.generation_id == 3}
    assert owned[("a-1", 0)] is True and owned[("b-1", 3)] is False


def test_metadata_or_leader_rejoin() -> None:
    log = LogBuilder().group(1, [member("a-1", A), member("b-1", B)]).group(2, [member("a-1", A), member("b-1", B)])
    t = audit(log)
    assert causes(t, 2) == ["metadata_or_leader_rejoin"]


def test_group_emptied_then_members_join_again() -> None:
    log = (LogBuilder().group(1, [member("a-1", ALL)]).group(2, [])
           .group(3, [member("a-2", A), member("b-2", B)]))
    t = audit(log)
    assert causes(t, 2) == ["group_emptied"]
    assert t["rebalance_causes"][1].member_id == "a-1"  # the only member: the last to leave
    assert causes(t, 3) == ["member_joined", "member_joined"]
    assert t["rebalance_causes"][2].member_id == "a-2"  # the leader: the first member added
    g2 = next(g for g in t["generations"] if g.generation_id == 2)
    assert g2.state == "Empty" and g2.member_count == 0 and g2.protocol_name is None


def test_group_deleted_then_recreated() -> None:
    log = LogBuilder().group(1, [member("a-1", ALL)]).group(2, []).tombstone().group(1, [member("a-2", ALL)])
    t = audit(log)
    deleted = [c for c in t["rebalance_causes"] if c.cause == "group_deleted"]
    # the deletion follows generation 2, whose primary cause stays group_emptied
    assert len(deleted) == 1 and deleted[0].generation_id == 2 and not deleted[0].is_primary
    assert primary(t, 2) == "group_emptied"
    created = [c for c in t["rebalance_causes"] if c.cause == "group_created"]
    assert [c.source_offset for c in created] == [0, 3]
    gens = sorted(t["generations"], key=lambda g: g.source_offset)
    assert [g.generation_id for g in gens] == [1, 2, 1]
    assert gens[1].ended_by_offset == 2 and gens[1].ended_at is not None


def test_aborted_generations_alone_is_primary() -> None:
    log = LogBuilder().group(1, [member("a-1", A), member("b-1", B)]).group(4, [member("a-1", A), member("b-1", B)])
    t = audit(log)
    assert causes(t, 4) == ["aborted_generations"]
    assert "2..3" in t["rebalance_causes"][1].detail
    assert next(g for g in t["generations"] if g.generation_id == 4).missing_generations == 2


def test_aborted_generations_with_a_join_is_secondary() -> None:
    log = LogBuilder().group(1, [member("a-1", ALL)]).group(3, [member("a-1", A), member("b-1", B)])
    t = audit(log)
    assert causes(t, 3) == ["member_joined", "aborted_generations"]
    assert primary(t, 3) == "member_joined"


def test_history_start_mid_life() -> None:
    log = LogBuilder(offset=5000).group(7, [member("a-1", A), member("b-1", B)]).group(8, [member("a-1", ALL)])
    t = audit(log)
    assert causes(t, 7) == ["history_start"]
    assert t["rebalance_causes"][0].previous_generation_id is None
    assert next(g for g in t["generations"] if g.generation_id == 7).missing_generations is None
    assert causes(t, 8) == ["member_left_or_expired"]


def test_history_start_empty_record() -> None:
    t = audit(LogBuilder().group(9, []))
    assert causes(t, 9) == ["history_start"]


def test_generation_going_back_restarts_history() -> None:
    log = LogBuilder().group(5, [member("a-1", ALL)]).group(2, [member("b-1", ALL)])
    t = audit(log)
    assert causes(t, 2) == ["history_start"]
    assert "went back" in t["rebalance_causes"][1].detail


def test_same_generation_rewrite_is_reported_not_guessed() -> None:
    log = LogBuilder().group(3, [member("a-1", ALL)]).group(3, [member("a-1", A), member("b-1", B)])
    t = audit(log)
    assert causes(t, 3) == ["history_start", "same_generation_rewrite"]
    assert "b-1" in t["rebalance_causes"][1].detail


def test_identical_record_repeated_adds_nothing() -> None:
    ms = [member("a-1", ALL)]
    t = audit(LogBuilder().group(1, ms).group(1, ms))
    assert causes(t, 1) == ["group_created"]
    assert len(t["generations"]) == 1 and len(t["assignments"]) == 6


def test_non_consumer_protocol_metadata_change() -> None:
    meta = member("w-1", subscription=b"\x00\x01config-v1", assignment=b"\x00\x01tasks")
    meta2 = member("w-1", subscription=b"\x00\x01config-v2", assignment=b"\x00\x01tasks")
    log = (LogBuilder().group(1, [meta], protocol_type="connect", protocol="sessioned")
           .group(2, [meta2], protocol_type="connect", protocol="sessioned"))
    t = audit(log)
    assert causes(t, 2) == ["subscription_changed"]
    assert t["assignments"] == [] and t["quarantine"] == []


def test_tombstone_at_history_start_is_primary() -> None:
    t = audit(LogBuilder().tombstone())
    (row,) = t["rebalance_causes"]
    assert (row.cause, row.generation_id, row.is_primary) == ("group_deleted", None, True)
