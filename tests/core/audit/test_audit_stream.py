"""The streaming contract: duplicates, quarantine, skipped types, counts, resumable state."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_audit.core.audit import (
    STATE_FORMAT,
    GroupAuditor,
    HistoryGap,
    RebalanceCauseRow,
    audit_group,
)
from coordinator_audit.core.records import CoordinatorRecord, GroupMetadataKey, encode

from .audit_builders import LogBuilder, member, rows_by_table, tps
from .test_audit_causes import audit

A = tps("t", 0, 1, 2)
B = tps("t", 3, 4, 5)
ALL = A + B


def rich_log() -> LogBuilder:
    """A bit of everything: creation, commits, a regression, a static replacement, an Empty
    generation, a tombstone and a recreated group."""
    log = LogBuilder("g")
    log.group(1, [member("s1-a", A, instance="s1"), member("s2-a", B, instance="s2")])
    log.commit("t", 0, 10).commit("t", 3, 4).commit("t", 0, 8).commit("t", 1, 2)
    log.group(1, [member("s1-b", A, instance="s1"), member("s2-a", B, instance="s2")])
    log.commit("t", 0, 11).offset_tombstone("t", 5)
    log.group(2, [member("s2-a", ALL, instance="s2")]).commit("t", 5, 1).commit("t", 5, 2)
    log.group(3, []).commit("t", 5, 0).tombstone()
    log.commit("t", 2, 3).group(1, [member("x-1", ALL)]).commit("t", 0, 99)
    return log


def test_duplicates_are_dropped_and_counted() -> None:
    records = rich_log().records
    doubled = [r for rec in records for r in (rec, rec)]
    auditor = GroupAuditor()
    rows = list(auditor.feed(doubled)) + auditor.finish()
    assert rows == list(audit_group(records))
    c = auditor.counts
    assert c.duplicates == len(records) and c.records_in == 2 * len(records)


def test_overlapping_reread_is_idempotent() -> None:
    records = rich_log().records
    auditor = GroupAuditor()
    first = list(auditor.feed(records[:12]))
    again = list(auditor.feed(records[5:])) + auditor.finish()
    assert first + again == list(audit_group(records))
    assert auditor.counts.duplicates == 7


def test_counts_add_up_and_split_by_kind() -> None:
    log = rich_log()
    log.raw(b"\x00\x03\x00\x01g", b"\x00\x00\x00\x00\x00\x05\x00")  # KIP-848 ConsumerGroupMetadata
    log.raw(b"\x00\x63abc", b"\x00\x00")  # an unknown record type
    log.raw(b"\x00", None)  # a key too short for its type
    auditor = GroupAuditor()
    tables = rows_by_table(list(auditor.feed(log.records)) + auditor.finish())
    c = auditor.counts
    assert (c.skipped_other_type, c.quarantined, c.group_records) == (1, 1, 7)
    assert c.replayed == c.group_records + c.offset_commits + c.offset_tombstones
    assert c.records_in == len(log.records) == c.duplicates + c.replayed + c.quarantined + c.skipped_other_type
    assert len([q for q in tables["quarantine"] if not q.replayed]) == c.quarantined
    assert sum(r.commits for r in tables["offset_commits"]) == c.offset_commits


def test_group_records_of_known_types_are_replayed_or_skipped_once_they_decode() -> None:
    """A consumer-group record is replayed, a share/streams group record is counted as another
    type; one that does not decode is quarantined naming the field and byte, not skipped."""
    log = LogBuilder("g", partition=4, offset=70)
    log.raw(b"\x00\x03\x00\x01g", b"\x00\x00\x00\x00\x00\x05\x00")  # ConsumerGroupMetadata, epoch 5
    log.raw(b"\x00\x17\x00\x01g", b"\x00\x00\x00\x00\x00\x02\x05")  # StreamsGroupTopology: cut short
    log.raw(b"\x00\x0b\x00\x01g", b"\x00\x00\x00\x00\x00\x03\x00\x00")  # ShareGroupMetadata: neither layout
    auditor = GroupAuditor()
    rows = rows_by_table(list(auditor.feed(log.records)) + auditor.finish())
    c = auditor.counts
    assert (c.skipped_other_type, c.quarantined, c.group_records) == (0, 2, 1)
    errors = [q.error for q in rows["quarantine"]]
    assert errors[0] == ("partition 4 offset 71, StreamsGroupTopologyValue.subtopologies, byte 6: "
                         "array count 4 exceeds the 0 byte(s) remaining")
    assert errors[1].startswith("partition 4 offset 72, ShareGroupMetadataValue.metadata_hash, byte 2: the bytes fit "
                                "neither Kafka 4.1+'s layout")


def test_quarantine_names_position_field_and_byte() -> None:
    log = LogBuilder("g", partition=12, offset=345)
    log.group(1, [member("a-1", ALL)])
    key, _ = encode(CoordinatorRecord.of(GroupMetadataKey("g"), None))
    log.raw(key, b"\x00\x03\x00\x08consu")  # truncated GroupMetadataValue
    log.commit("t", 0, 5)
    good_key, good_value = log.records[-1][3], log.records[-1][4]
    assert good_value is not None
    log.raw(good_key, good_value[:9])  # truncated commit value on a known key
    other_key = LogBuilder("other").commit("t", 0, 1).records[0]
    log.raw(other_key[3], other_key[4])  # another group's record
    tables = audit(log)
    errors = [q.error for q in tables["quarantine"]]
    assert len(errors) == 3
    assert errors[0].startswith("partition 12 offset 346, GroupMetadataValue.protocol_type, byte 4: ")
    assert errors[1].startswith("partition 12 offset 348, OffsetCommitValue") and ", byte " in errors[1]
    assert "group 'other' in the audit of group 'g'" in errors[2]
    q = tables["quarantine"][0]
    assert (q.group_id, q.partition, q.offset, q.key, q.key_type, q.replayed) == ("g", 12, 346, key, 2, False)
    assert q.value == b"\x00\x03\x00\x08consu"
    # the group is still intact after the bad record
    assert [c.cause for c in tables["rebalance_causes"]] == ["group_created"]


def test_load_path_invariant_breaks_are_quarantined() -> None:
    log = LogBuilder("g").group(1, [member("a-1", A)])
    log.group(2, [member("s-1", A, instance="s"), member("s-2", B, instance="s")])  # one instance twice
    log.group(3, [member("d", A), member("d", B)])  # one member id twice
    tables = audit(log)
    errors = [q.error for q in tables["quarantine"]]
    assert len(errors) == 2 and all("load path rejects" in e for e in errors)
    assert "instance id 's'" in errors[0] and "member id 'd'" in errors[1]
    assert [g.generation_id for g in tables["generations"]] == [1]


def test_undecodable_embedded_bytes_are_reported_but_replayed() -> None:
    bad = member("b-1", subscription=b"\x00\x01\x00\x00\x00\x05", assignment=b"\x00\x00\xff")
    log = LogBuilder("g").group(1, [member("a-1", A), bad])
    auditor = GroupAuditor()
    tables = rows_by_table(list(auditor.feed(log.records)) + auditor.finish())
    (q,) = tables["quarantine"]
    assert q.replayed and "member 'b-1' subscription" in q.error and "member 'b-1' assignment" in q.error
    assert auditor.counts.quarantined == 0 and auditor.counts.embedded_decode_errors == 2
    assert [c.cause for c in tables["rebalance_causes"]] == ["group_created"]
    assert {a.member_id for a in tables["assignments"]} == {"a-1"}


def test_bytes_like_inputs() -> None:
    records = [(p, o, ts, bytearray(k), memoryview(v) if v is not None else None)
               for p, o, ts, k, v in rich_log().records]
    assert list(audit_group(records)) == list(audit_group(rich_log().records))


def test_offset_windows_follow_every_group_record() -> None:
    tables = audit(rich_log())
    windows = sorted({(r.window_start_offset, r.window_end_offset, r.generation_id, r.window_state)
                      for r in tables["offset_commits"]}, key=lambda w: (w[0] is not None, w[0] or 0))
    assert windows == [(0, 5, 1, "Stable"), (5, 8, 1, "Stable"), (8, 11, 2, "Stable"), (11, 13, 3, "Empty"),
                       (13, 15, None, "Dead"), (15, None, 1, "Stable")]
    first = next(r for r in tables["offset_commits"] if r.window_start_offset == 0 and r.partition == 0)
    assert (first.commits, first.first_offset, first.last_offset, first.regressions) == (2, 10, 8, 1)
    assert first.first_commit_timestamp is not None and first.first_commit_timestamp < first.last_commit_timestamp


def test_state_round_trips_through_json() -> None:
    auditor = GroupAuditor()
    records = rich_log().records
    list(auditor.feed(records[:9]))
    state = auditor.to_dict()
    text = json.dumps(state)
    again = GroupAuditor.from_dict(json.loads(text))
    assert again.to_dict() == state
    assert again.finish() == auditor.finish()


def test_resume_at_every_split_equals_one_pass() -> None:
    records = rich_log().records
    one_pass = list(audit_group(records))
    for k in range(len(records) + 1):
        first = GroupAuditor()
        rows = list(first.feed(records[:k]))
        state = json.loads(json.dumps(first.to_dict()))
        second = GroupAuditor.from_dict(state)
        rows += list(second.feed(records[k:])) + second.finish()
        assert rows == one_pass, f"split at {k}"


def test_load_path_off_gives_the_same_rows() -> None:
    records = rich_log().records
    fast = GroupAuditor(load_path=False)
    assert list(fast.feed(records)) + fast.finish() == list(audit_group(records))


RECORD = st.tuples(
    st.one_of(st.binary(max_size=40), st.sampled_from([b"\x00\x00", b"\x00\x01\x00\x01g", b"\x00\x02\x00\x01g",
                                                      b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00"])),
    st.one_of(st.none(), st.binary(max_size=80)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORD, max_size=25), st.integers(0, 25))
def test_never_raises_on_arbitrary_bytes_and_counts_add_up(pairs, split) -> None:
    base = rich_log().records[:6]
    records = base + [(7, 100 + i, 1_700_000_100_000 + i, k, v) for i, (k, v) in enumerate(pairs)]
    auditor = GroupAuditor("g")
    rows = list(auditor.feed(records[:split]))
    resumed = GroupAuditor.from_dict(json.loads(json.dumps(auditor.to_dict())))
    rows += list(resumed.feed(records[split:])) + resumed.finish()
    assert rows == list(audit_group(records, group_id="g"))
    total = GroupAuditor("g")
    list(total.feed(records))
    c = total.counts
    assert c.records_in == len(records) == c.duplicates + c.replayed + c.quarantined + c.skipped_other_type


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 3, 5]), st.integers(-3, 3)), max_size=40))
def test_regressions_match_a_plain_definition(commits) -> None:
    log = LogBuilder("g").group(1, [member("a-1", ALL)])
    offsets: dict[int, int] = {}
    expected = 0
    for partition, delta in commits:
        offset = offsets.get(partition, 100) + delta
        if partition in offsets and offset < offsets[partition]:
            expected += 1
        offsets[partition] = offset
        log.commit("t", partition, offset)
    tables = audit(log)
    assert len(tables["violations"]) == sum(r.regressions for r in tables["offset_commits"]) == expected


def test_commit_value_struct_layout_matches_spec_e2() -> None:
    # the commit records built by the test log are OffsetCommitValue v3 exactly as Kafka serializes it
    # (OffsetCommitValue.json)
    log = LogBuilder("my-group").commit("orders", 3, 1234, at=1_700_000_000_000)
    value = log.records[0][4]
    assert value == struct.pack(">hqihq", 3, 1234, 0, 0, 1_700_000_000_000)


MEMBER_IDS = ["a-1", "a-2", "b-1", "c-1"]
INSTANCES = [None, None, "s1", "s2"]
PARTS = [("t", p) for p in range(4)] + [("u", 0)]


@st.composite
def random_member(draw, index: int):
    assigned = draw(st.lists(st.sampled_from(PARTS), max_size=4, unique=True))
    owned = draw(st.lists(st.sampled_from(PARTS), max_size=3, unique=True))
    return member(f"{MEMBER_IDS[index]}-{draw(st.integers(0, 2))}", assigned,
                  topics=draw(st.sampled_from([("t",), ("t", "u")])), owned=owned,
                  instance=INSTANCES[index], generation_id=draw(st.integers(-1, 6)),
                  sticky=(draw(st.lists(st.sampled_from(PARTS), max_size=2, unique=True)), draw(st.integers(-1, 6)))
                  if draw(st.booleans()) else None)


@st.composite
def random_logs(draw) -> LogBuilder:
    log = LogBuilder("g")
    for _ in range(draw(st.integers(1, 12))):
        action = draw(st.sampled_from(["group", "group", "group", "commit", "commit", "tombstone", "offset_tombstone"]))
        if action == "group":
            indexes = draw(st.lists(st.integers(0, 3), max_size=4, unique=True))
            members = [draw(random_member(i)) for i in indexes]
            log.group(draw(st.integers(0, 6)), members,
                      protocol=draw(st.sampled_from(["range", "sticky", "cooperative-sticky"])) if members else None)
        elif action == "commit":
            log.commit("t", draw(st.integers(0, 3)), draw(st.integers(0, 20)))
        elif action == "tombstone":
            log.tombstone()
        else:
            log.offset_tombstone("t", draw(st.integers(0, 3)))
    return log


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_logs(), st.integers(0, 12))
def test_random_group_histories_keep_the_invariants(log: LogBuilder, split: int) -> None:
    records = log.records
    one_pass = list(audit_group(records))
    first = GroupAuditor()
    rows = list(first.feed(records[:split]))
    second = GroupAuditor.from_dict(json.loads(json.dumps(first.to_dict())))
    assert rows + list(second.feed(records[split:])) + second.finish() == one_pass
    tables = rows_by_table(one_pass)
    assert tables["quarantine"] == []
    # every generation row has exactly one primary cause at its record (rows_by_table checks it too)
    primaries: dict[int, int] = {}
    for c in tables["rebalance_causes"]:
        if c.is_primary:
            primaries[c.source_offset] = primaries.get(c.source_offset, 0) + 1
    for g in tables["generations"]:
        assert primaries.get(g.source_offset, 0) == 1, g
    # ownership intervals are well formed
    for a in tables["assignments"]:
        assert a.valid_to is None or a.valid_to >= a.valid_from


def test_states_saved_before_the_split_by_concern_resume_to_one_pass() -> None:
    """Saved `group_state` rows outlive code changes: states (format 1) written by the audit as it was
    before its split into dispatch, offset-window tracker and generation observer (the window's
    summaries then a list of slots) load, save again unchanged but for their format number (2: the
    same keys, the record's value inside unless asked to leave it out), and resume to one pass's rows."""
    saved = json.loads((Path(__file__).parent / "data" / "state_format1_rich_log.json").read_text())
    records = rich_log().records
    one_pass = list(audit_group(records))
    assert [s["split"] for s in saved["states"]] == list(range(len(records) + 1))
    for s in saved["states"]:
        k, state = s["split"], s["state"]
        assert state["format"] == 1
        today = {**state, "format": STATE_FORMAT}
        resumed = GroupAuditor.from_dict(state)
        assert json.loads(json.dumps(resumed.to_dict())) == today, f"split at {k}"
        before = GroupAuditor()
        rows = list(before.feed(records[:k]))
        written = json.loads(json.dumps(before.to_dict()))
        # a tombstone's group_deleted cause is held today until the group's next record (which drops
        # it for a conversion to a consumer group): the state carries it; the format-1 audit emitted it
        held = written.pop("held_cause", None)
        if held is not None:
            rows.append(RebalanceCauseRow(**held["row"]))
        assert written == today, f"split at {k}"  # the same JSON written today
        assert rows + list(resumed.feed(records[k:])) + resumed.finish() == one_pass, f"split at {k}"


def test_a_gap_makes_the_next_generation_primary_history_gap_naming_both_records() -> None:
    log = LogBuilder("g")
    log.group(1, [member("a-1", tps("t", 0))]).commit("t", 0, 5)
    head = list(log.records)
    log.offset += 40  # offsets 2..41 of the partition were never read
    log.group(2, [member("a-1", tps("t", 0)), member("b-1", tps("t", 1))])
    auditor = GroupAuditor()
    rows = list(auditor.feed(head))
    auditor.note_gap(HistoryGap(7, 1, 42, 40, 0))
    rows += list(auditor.feed(log.records[len(head):])) + auditor.finish()
    causes = [r for r in rows_by_table(rows)["rebalance_causes"] if r.generation_id == 2]
    gap = next(r for r in causes if r.cause == "history_gap")
    assert gap.is_primary and [r.cause for r in causes if r.is_primary] == ["history_gap"]
    assert any(r.cause == "member_joined" and not r.is_primary for r in causes)  # what the records suggest stays
    assert gap.evidence == ("partition 7: 40 offset(s) missing before offset 42; partition 7 offset 42; previous "
                            "GroupMetadata at partition 7 offset 0 (generation 1)")
    assert auditor.gap_rows() == []  # consumed


def test_a_gap_no_later_record_explains_is_a_secondary_row_on_the_current_generation() -> None:
    log = LogBuilder("g")
    log.group(1, [member("a-1", tps("t", 0))])
    auditor = GroupAuditor()
    list(auditor.feed(log.records))
    auditor.note_gap(HistoryGap(7, 0, 10, 9, 1_700_000_009_000))
    [row] = auditor.gap_rows()
    assert (row.cause, row.generation_id, row.is_primary, row.source_offset) == ("history_gap", 1, False, 10)
    assert "no GroupMetadata record of the group followed" in row.detail


def test_a_state_that_keeps_its_record_value_apart_resumes_with_it_given_back() -> None:
    """`to_dict(record_value=False)` (what the Spark job saves, the value stored once beside it in
    `group_state.window_value`): the state holds every key but the saved GroupMetadata record's
    value; given back, it resumes and carries forward (`at_rest`) exactly as the whole state does;
    without it, the error names the group."""
    saved = json.loads((Path(__file__).parent / "data" / "state_format1_rich_log.json").read_text())
    records = rich_log().records
    one_pass = list(audit_group(records))
    checked = 0
    for s in saved["states"]:
        k = s["split"]
        before = GroupAuditor()
        rows = list(before.feed(records[:k]))
        whole = json.loads(json.dumps(before.to_dict()))
        apart = json.loads(json.dumps(before.to_dict(record_value=False)))
        value = before.window_record_value()
        if whole["group_record"] is None:
            assert apart == whole and value is None
            continue
        checked += 1
        assert "value" not in apart["group_record"]
        assert {**apart, "group_record": {**apart["group_record"], "value": whole["group_record"]["value"]}} == whole
        assert value is not None and len(json.dumps(apart)) < len(json.dumps(whole))
        assert GroupAuditor.at_rest(apart, record_value=value) == GroupAuditor.at_rest(whole)
        resumed = GroupAuditor.from_dict(apart, record_value=value)
        assert json.loads(json.dumps(resumed.to_dict())) == whole
        assert json.loads(json.dumps(resumed.to_dict(record_value=False))) == apart
        assert rows + list(resumed.feed(records[k:])) + resumed.finish() == one_pass, f"split at {k}"
        for load in (GroupAuditor.from_dict, GroupAuditor.at_rest):
            try:
                load(apart)
            except ValueError as e:
                assert "kept apart" in str(e) and repr(apart["group_id"]) in str(e)
            else:
                raise AssertionError(f"{load.__name__} resumed without the record's value")
    assert checked > 3
