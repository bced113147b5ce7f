"""Every violation kind on hand-built logs, and no false verdicts on partial histories."""

from __future__ import annotations

import pytest

from coordinator_audit.core.audit import GroupSnapshot
from coordinator_audit.core.errors import RecordDecodeError

from .audit_builders import LogBuilder, member, tps
from .test_audit_causes import audit

A = tps("t", 0, 1, 2)
B = tps("t", 3, 4, 5)
ALL = A + B
COOP = "cooperative-sticky"


def kinds(tables) -> list[tuple[int | None, str, str | None, int | None]]:
    return [(v.generation_id, v.kind, v.topic, v.partition) for v in tables["violations"]]


def test_duplicate_assignment() -> None:
    t = audit(LogBuilder().group(1, [member("a-1", A + tps("t", 3)), member("b-1", B)]))
    assert kinds(t) == [(1, "duplicate_assignment", "t", 3)]
    v = t["violations"][0]
    assert v.member_ids == ("a-1", "b-1") and "partition 7 offset 0" in v.evidence


def test_assignment_outside_subscription() -> None:
    t = audit(LogBuilder().group(1, [member("a-1", A + tps("secret", 0), topics=("t",)), member("b-1", B)]))
    assert kinds(t) == [(1, "assignment_outside_subscription", "secret", 0)]
    assert t["violations"][0].member_ids == ("a-1",)


def test_unsafe_cooperative_move() -> None:
    log = (LogBuilder().group(1, [member("a-1", ALL)], protocol=COOP)
           # a still owns B at this join, yet B goes straight to b (should have been revoked first)
           .group(2, [member("a-1", A, owned=ALL, generation_id=1), member("b-1", B)], protocol=COOP))
    t = audit(log)
    assert kinds(t) == [(2, "unsafe_cooperative_move", "t", p) for p in (3, 4, 5)]
    assert all(v.member_ids == ("a-1", "b-1") for v in t["violations"])


def test_two_phase_move_is_safe() -> None:
    log = (LogBuilder().group(1, [member("a-1", ALL)], protocol=COOP)
           .group(2, [member("a-1", A, owned=ALL, generation_id=1), member("b-1", ())], protocol=COOP)
           .group(3, [member("a-1", A, owned=A, generation_id=2), member("b-1", B, generation_id=2)], protocol=COOP))
    assert audit(log)["violations"] == []


def test_eager_move_is_not_unsafe() -> None:
    # eager members revoke everything before joining: they report no owned partitions
    log = LogBuilder().group(1, [member("a-1", ALL)]).group(2, [member("a-1", A), member("b-1", B)])
    assert audit(log)["violations"] == []


def test_stale_ownership_claim_names_the_stale_claimant() -> None:
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B)], protocol=COOP)
           # c-1 (a new identity: b's zombie twin) claims B from generation 0; b-1 owned B in generation 1
           .group(2, [member("a-1", A, owned=A, generation_id=1), member("b-1", B, owned=B, generation_id=1),
                      member("c-1", (), owned=B, generation_id=0)], protocol=COOP))
    t = audit(log)
    assert kinds(t) == [(2, "stale_ownership_claim", "t", p) for p in (3, 4, 5)]
    v = t["violations"][0]
    assert v.member_ids == ("c-1", "b-1") and "stale: c-1 (generation 0)" in v.detail


def test_stale_claim_in_sticky_user_data_kip341() -> None:
    # eager sticky: previous assignments travel in userData (V1 with generation)
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B)], protocol="sticky")
           .group(2, [member("a-1", A, sticky=(A, 1)), member("b-1", B, sticky=(B, 1)),
                      member("c-1", (), sticky=(tps("t", 5), 0))], protocol="sticky"))
    t = audit(log)
    assert kinds(t) == [(2, "stale_ownership_claim", "t", 5)]
    assert t["violations"][0].member_ids == ("c-1", "b-1")


def test_stale_claim_without_owner_uses_generations() -> None:
    # nobody owned t-9 last generation; two claim it, from generations 1 and 3
    log = (LogBuilder().group(3, [member("a-1", A), member("b-1", B)], protocol=COOP)
           .group(4, [member("a-1", A, owned=A + tps("t", 9), generation_id=3),
                      member("b-1", B, owned=B + tps("t", 9), generation_id=1)], protocol=COOP))
    t = audit(log)
    assert kinds(t) == [(4, "stale_ownership_claim", "t", 9)]
    assert t["violations"][0].member_ids == ("b-1", "a-1")


def test_static_replacement_changed_assignment() -> None:
    log = (LogBuilder().group(1, [member("s1-a", A, instance="s1"), member("s2-a", B, instance="s2")])
           .group(1, [member("s1-b", tps("t", 0), instance="s1"), member("s2-a", B, instance="s2")]))
    t = audit(log)
    assert kinds(t) == [(1, "static_replacement_changed_assignment", None, None)]
    assert t["violations"][0].member_ids == ("s1-a", "s1-b")


def test_offset_regression_in_stable_window() -> None:
    log = (LogBuilder().group(1, [member("a-1", A), member("b-1", B)])
           .commit("t", 0, 10).commit("t", 4, 7).commit("t", 0, 12).commit("t", 0, 5).commit("t", 0, 6))
    t = audit(log)
    assert kinds(t) == [(1, "offset_regression", "t", 0)]
    v = t["violations"][0]
    assert v.member_ids == ("a-1",) and v.evidence == "partition 7 offsets 3 -> 4" and v.source_offset == 4
    row = next(r for r in t["offset_commits"] if r.partition == 0)
    assert (row.commits, row.first_offset, row.last_offset, row.regressions) == (4, 10, 6, 1)


def test_no_regression_in_empty_window_or_across_windows() -> None:
    log = (LogBuilder().group(1, [member("a-1", ALL)]).commit("t", 0, 10)
           .group(2, [member("a-1", ALL)]).commit("t", 0, 3)  # new window: not compared with 10
           .group(3, []).commit("t", 0, 20).commit("t", 0, 0))  # Empty: an offset reset is legitimate
    t = audit(log)
    assert t["violations"] == []
    assert sorted((r.generation_id, r.window_state, r.regressions) for r in t["offset_commits"]) == [
        (1, "Stable", 0), (2, "Stable", 0), (3, "Empty", 0)]


def test_offset_tombstone_does_not_reset_the_comparison() -> None:
    log = LogBuilder().group(1, [member("a-1", ALL)]).commit("t", 0, 10).offset_tombstone("t", 0).commit("t", 0, 4)
    t = audit(log)
    assert kinds(t) == [(1, "offset_regression", "t", 0)]
    (row,) = t["offset_commits"]
    assert (row.commits, row.tombstones, row.first_source_offset, row.last_source_offset) == (2, 1, 1, 3)


def test_partial_history_gives_no_false_ownership_verdicts() -> None:
    # the log starts mid-life: the first record would look like stale claims and unsafe moves
    # against a previous generation we do not have; commits before it would look like a regression
    log = (LogBuilder(offset=9000).commit("t", 0, 50).commit("t", 0, 40)
           .group(12, [member("a-1", A, owned=ALL, generation_id=11), member("b-1", B, owned=B, generation_id=9)],
                  protocol=COOP))
    t = audit(log)
    assert t["violations"] == []
    assert [c.cause for c in t["rebalance_causes"]] == ["history_start"]
    pre = next(r for r in t["offset_commits"] if r.generation_id is None)
    assert pre.window_state is None and pre.window_start_offset is None and pre.window_end_offset == 9002


def test_partial_history_then_real_violation_is_found() -> None:
    log = (LogBuilder(offset=9000).group(12, [member("a-1", ALL)], protocol=COOP)
           .group(13, [member("a-1", A, owned=ALL, generation_id=12), member("b-1", B)], protocol=COOP))
    assert {v.kind for v in audit(log)["violations"]} == {"unsafe_cooperative_move"}


def test_no_ownership_verdicts_after_an_empty_generation() -> None:
    log = (LogBuilder().group(1, [member("a-1", ALL)], protocol=COOP).group(2, [], protocol=None)
           .group(3, [member("a-1", A, owned=ALL, generation_id=1), member("b-1", B, owned=B, generation_id=0)],
                  protocol=COOP))
    assert audit(log)["violations"] == []


def test_replaced_static_member_moved_in_next_generation() -> None:
    # s1 restarts (W3, same partitions); the next rebalance changes nothing yet moves s1's partitions
    log = (LogBuilder().group(1, [member("s1-a", A, instance="s1"), member("s2-a", B, instance="s2")])
           .group(1, [member("s1-b", A, instance="s1"), member("s2-a", B, instance="s2")])
           .group(2, [member("s1-b", B, instance="s1"), member("s2-a", A, instance="s2")]))
    t = audit(log)
    assert kinds(t) == [(2, "static_replacement_changed_assignment", None, None)]
    assert t["violations"][0].member_ids == ("s1-b",)


def test_replaced_static_member_may_move_when_membership_changes() -> None:
    log = (LogBuilder().group(1, [member("s1-a", A, instance="s1"), member("s2-a", B, instance="s2")])
           .group(1, [member("s1-b", A, instance="s1"), member("s2-a", B, instance="s2")])
           .group(2, [member("s1-b", tps("t", 0), instance="s1"), member("s2-a", tps("t", 1, 2), instance="s2"),
                      member("s3-a", B, instance="s3")]))
    assert audit(log)["violations"] == []


def test_owner_ids_read_from_value_bytes() -> None:
    """What an offset_regression names, read from a GroupMetadata value's bytes (the Spark job's
    `coordinator_audit.udfs.decode.owners_udf`); bytes the codec rejects raise its error."""
    log = LogBuilder("g").group(4, [member("a-1", tps("t", 0, 1)), member("b-1", tps("t", 1, 2))])
    value = log.records[0][4]
    owners = GroupSnapshot.from_value_bytes(value, group_id="g").owner_ids()
    assert owners == {("t", 0): ("a-1",), ("t", 1): ("a-1", "b-1"), ("t", 2): ("b-1",)}
    with pytest.raises(RecordDecodeError):
        GroupSnapshot.from_value_bytes(value[:-4], group_id="g")
