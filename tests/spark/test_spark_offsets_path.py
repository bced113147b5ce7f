"""coordinator_audit.jobs.offsets_path against hand-built records (encoded with the codec): classification, the SQL
decode of every OffsetCommitValue version, the offset_commits summary and offset_regression rows,
checked with inline expected rows and against the pure-Python audit."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from chispa import assert_df_equality

from coordinator_audit.core.audit.auditor import audit_group
from coordinator_audit.core.audit.rows import OffsetCommitRow, ViolationRow, iso_ms
from coordinator_audit.core.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    encode_assignment,
    encode_subscription,
)
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode,
)
from coordinator_audit.jobs import offsets_path as op
from coordinator_audit.udfs.schemas import TABLE_SCHEMAS

pytestmark = pytest.mark.spark

SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
T = 1_700_000_000_000


def _commit(group, topic, part, offset, ts, *, version=3, metadata="", key_version=1, expire=-1):
    rec = CoordinatorRecord.of(OffsetCommitKey(group, topic, part),
                               OffsetCommitValue(offset, 7 if version >= 3 else -1, metadata, ts, expire),
                               key_version=key_version, value_version=version)
    return encode(rec)


def _tombstone(group, topic, part):
    return encode(CoordinatorRecord.of(OffsetCommitKey(group, topic, part), None))[0], None


def _member(mid, parts):
    sub = encode_subscription(Subscription(1, ("t",)))
    asg = encode_assignment(Assignment(1, (TopicPartitions("t", tuple(parts)),)))
    return MemberMetadata(mid, None, "c", "/h", 300000, 45000, sub, asg)


def _gm(group, gen, members, *, version=3):
    value = GroupMetadataValue("consumer", gen, "range" if members else None, members[0].member_id if members else None,
                               T, tuple(members))
    return encode(CoordinatorRecord.of(GroupMetadataKey(group), value, value_version=version))


def _gm_tombstone(group):
    return encode(CoordinatorRecord.of(GroupMetadataKey(group), None))[0], None


def _frame(spark, records):
    rows = [(k, v, "__consumer_offsets", 3, o, datetime.fromtimestamp((T + o) / 1000, UTC))
            for o, (k, v) in enumerate(records)]
    return spark.createDataFrame(rows, SCHEMA)


# one group's log: pre-history commits, a Stable generation with a regression (and a tombstone in
# between that must not reset the comparison), an Empty generation with a backwards commit (not a
# regression), a tombstone; plus another group in the same partition and an undecodable value.
LOG = [
    _commit("g", "t", 0, 10, T + 1),                     # 0 pre-history
    _gm("g", 1, [_member("m1", [0]), _member("m2", [1])]),  # 1 gen 1 Stable
    _commit("g", "t", 0, 20, T + 2, version=1, expire=T + 99),  # 2
    _tombstone("g", "t", 0),                             # 3
    _commit("g", "t", 0, 15, T + 4, version=4),          # 4 regression (15 < 20)
    _commit("h", "t", 0, 5, T + 5),                      # 5 other group
    _commit("g", "t", 1, 30, T + 6, version=0, key_version=0),  # 6
    _commit("g", "t", 0, 25, T + 7, version=2, metadata="meta"),  # 7
    (_commit("g", "t", 0, 1, T)[0], b"\x00\x03\x00"),    # 8 undecodable value: not a commit
    _gm("g", 2, [], version=4),                          # 9 gen 2 Empty (flexible value)
    _commit("g", "t", 0, 3, T + 10),                     # 10 backwards, but Empty: no regression
    _gm_tombstone("g"),                                  # 11 Dead
    _commit("g", "t", 0, 4, T + 12, metadata="x" * 200, version=4),  # 12 two-byte varint metadata length
]


def test_side_rows_carry_record_type_and_group(spark) -> None:
    """The single pass classifies the records it leaves to the replay (no SQL codec)."""
    _, _, scan = op.offset_path(_frame(spark, LOG))
    try:
        got = scan.side().select("offset", "record_type", "group_id")
        expected = [(1, 2, "g"), (8, 1, "g"), (9, 2, "g"), (11, 2, "g")]
        assert_df_equality(got, spark.createDataFrame(expected, "offset long, record_type smallint, group_id string"),
                           ignore_row_order=True, ignore_nullable=True)
    finally:
        scan.unpersist()


EXPECTED_SUMMARY = [
    # group, topic, part, gen, state, start, end, commits, tombs, first, last, first_ts, last_ts, regr, src_p, first_src, last_src
    ("g", "t", 0, None, None, None, 1, 1, 0, 10, 10, T + 1, T + 1, 0, 3, 0, 0),
    ("g", "t", 0, 1, "Stable", 1, 9, 3, 1, 20, 25, T + 2, T + 7, 1, 3, 2, 7),
    ("g", "t", 1, 1, "Stable", 1, 9, 1, 0, 30, 30, T + 6, T + 6, 0, 3, 6, 6),
    ("g", "t", 0, 2, "Empty", 9, 11, 1, 0, 3, 3, T + 10, T + 10, 0, 3, 10, 10),
    ("g", "t", 0, None, "Dead", 11, None, 1, 0, 4, 4, T + 12, T + 12, 0, 3, 12, 12),
    ("h", "t", 0, None, None, None, None, 1, 0, 5, 5, T + 5, T + 5, 0, 3, 5, 5),
]
"""The offset_commits rows of LOG."""


@pytest.mark.parametrize("given", ["rows", "parquet"])
def test_offset_commits_summary_and_regressions(spark, tmp_path, given: str) -> None:
    """Rows fed through Spark (the replay's output kept in a checkpoint) and local Parquet files
    (the pass hands its rows off as files, the replay's tasks write the two tables' files: the
    regression's owners then come from a window snapshot built only for it)."""
    df = _frame(spark, LOG)
    if given == "parquet":
        df.write.parquet(str(tmp_path / "log"))
        df = spark.read.parquet(str(tmp_path / "log"))
    summary, violations, scan = op.offset_path(df)
    assert scan.hands_off == (given == "parquet")
    if given == "parquet":  # the rows are read from the replay tasks' files, in the pass's directory
        assert scan.handoff is not None and all(scan.handoff.directory in f for f in summary.inputFiles())
    assert_df_equality(summary, spark.createDataFrame(EXPECTED_SUMMARY, TABLE_SCHEMAS["offset_commits"]),
                       ignore_row_order=True, ignore_nullable=True)
    expected_v = [("g", 1, "offset_regression", "t", 0, ["m1"],
                   f"t-0: committed offset 15 (commit time {iso_ms(T + 4)}) after 20 (commit time {iso_ms(T + 2)}) while the group "
                   f"was Stable in generation 1", "partition 3 offsets 2 -> 4", T + 4, 3, 4)]
    assert_df_equality(violations, spark.createDataFrame(expected_v, TABLE_SCHEMAS["violations"]),
                       ignore_row_order=True, ignore_nullable=True)
    scan.unpersist()


def test_sql_path_equals_the_pure_audit(spark) -> None:
    summary, violations, _scan = op.offset_path(_frame(spark, LOG))
    pure_rows, pure_violations = [], []
    for group in ("g", "h"):
        recs = [(3, o, T + o, k, v) for o, (k, v) in enumerate(LOG)
                if k[4:4 + int.from_bytes(k[2:4], "big")].decode() == group]
        for row in audit_group(recs):
            if isinstance(row, OffsetCommitRow):
                pure_rows.append(dataclasses.astuple(row))
            elif isinstance(row, ViolationRow) and row.kind == "offset_regression":
                pure_violations.append(dataclasses.astuple(row))

    def norm(rows):
        return sorted((tuple(tuple(x) if isinstance(x, list | tuple) else x for x in r) for r in rows), key=repr)

    assert norm(tuple(r) for r in summary.collect()) == norm(pure_rows)
    assert norm(tuple(r) for r in violations.collect()) == norm(pure_violations)


def test_rejected_records_are_read_offsets() -> None:
    """`Scan.with_rejected`: the input's rejected records in the window count as read in the pass's
    ranges and running counts of offsets never read. Partition 0 continues after offset 7 with
    records at 10, 11, 13, 16 (one chunk) and rejected ones at 9, 12, 15: offsets 8 and 14 were never
    read (8 before the side record at 13); partition 3 holds a rejected record only."""
    from coordinator_audit.jobs.offsets_path import Scan

    scan = Scan(None, {}, False, "spark", ((0, 10, 16, 4, 1),)).with_rejected([(0, 15), (0, 9), (3, 5), (0, 12)])
    assert scan.rejected == {0: (9, 12, 15), 3: (5,)}
    assert scan.ranges == {0: (9, 16, 7), 3: (5, 5, 1)}
    consts, ends = scan.missing_counts({0: 7, 3: 2}, {})
    assert ends == {0: 2, 3: 2}
    assert 13 - 2 - 2 + consts[(1, 0)] == 1  # the side record at 13: rank 2, two rejected records below
