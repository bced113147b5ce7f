"""`GroupAuditor.merge_stretch` / `stretch_regression`: a group's offset commits summarised in
stretches elsewhere (as the Spark job's scan kernel does) and merged into the audit in log order
give exactly the rows of feeding every record, causes included (their commit evidence comes from
the merged summaries), on every sample log and for any cut of the stretches."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coordinator_audit.core.audit import GroupAuditor, OffsetSummary, Regression, audit_group
from coordinator_audit.core.records import offset_commit_key_fields, offset_commit_value_fields

from .audit_builders import LogBuilder, member, tps

SAMPLES = sorted((Path(__file__).resolve().parents[3] / "data" / "samples").glob("*.parquet"))

Record = tuple[int, int, int, bytes, bytes | None]


def _groups(path: Path) -> dict[str, list[Record]]:
    t = pq.read_table(path).to_pydict()
    records = sorted(zip(t["partition"], t["offset"], [int(x.timestamp() * 1000) for x in t["timestamp"]],
                         t["key"], t["value"], strict=True))
    out: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        n = int.from_bytes(r[3][2:4], "big", signed=True)
        out[r[3][4:4 + n].decode()].append(r)
    return out


def _is_commit(r: Record) -> bool:
    return int.from_bytes(r[3][:2], "big") in (0, 1)


def _stretches(records: list[Record], rng: random.Random, cut: float) -> list[tuple[str, object]]:
    """The group's records as the job hands them to the replay: every record but the offset commits
    as itself, the commits as stretch summaries (one per topic-partition and run of records between
    two GroupMetadata records, cut at random further), each placed at its first record, and every
    backwards step inside a stretch as a regression candidate at its record."""
    events: list[tuple[tuple[int, int], str, object]] = []
    open_: dict[tuple[str, int], list] = {}

    def close(tp: tuple[str, int]) -> None:
        s, first_src, first_ts = open_.pop(tp)
        events.append(((s.source_partition, s.first_source_offset), "stretch", (tp, s, first_src, first_ts)))

    for r in records:
        p, o, ts, key, value = r
        if not _is_commit(r):
            for tp in list(open_):
                close(tp)
            events.append(((p, o), "record", r))
            continue
        _, topic, part = offset_commit_key_fields(key)
        tp = (topic, part)
        if tp in open_ and rng.random() < cut:
            close(tp)
        if tp not in open_:
            open_[tp] = [OffsetSummary(p, o), None, None]
        entry = open_[tp]
        s = entry[0]
        if value is None:
            s.tombstone(o)
            continue
        _, off, _, _, cts, _ = offset_commit_value_fields(value)
        if not s.commits:
            entry[1], entry[2] = o, ts
        back = s.commit(off, cts, o, True)  # every step back is a candidate; the window decides
        if back is not None:
            events.append(((p, o), "regression", (tp, back, off, cts, p, o, ts)))
    for tp in list(open_):
        close(tp)
    events.sort(key=lambda e: e[0])
    return [(kind, payload) for _, kind, payload in events]


def _audit_in_stretches(group: str, records: list[Record], rng: random.Random, cut: float, *,
                        observe: bool = True, embedded: bool = True) -> list:
    auditor = GroupAuditor(group, observe=observe, embedded=embedded)
    rows: list = []
    for kind, payload in _stretches(records, rng, cut):
        if kind == "record":
            rows.extend(auditor.feed([payload]))
        elif kind == "stretch":
            (topic, part), s, first_src, first_ts = payload
            rows.extend(auditor.merge_stretch(topic, part, s, first_commit_source_offset=first_src,
                                              first_commit_record_ts=first_ts))
        else:
            (topic, part), back, off, cts, p, o, ts = payload
            rows.extend(auditor.stretch_regression(topic, part, back, off, cts, p, o, ts))
    rows.extend(auditor.finish())
    return rows


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("cut", [0.0, 0.3])
def test_stretches_merged_give_the_rows_of_every_record_fed(path: Path, cut: float) -> None:
    rng = random.Random(f"{path.stem}-{cut}")
    for group, records in _groups(path).items():
        auditor = GroupAuditor(group)
        fed = [*auditor.feed(records), *auditor.finish()]
        assert sorted(map(repr, fed)) == sorted(map(repr, audit_group(records, group_id=group)))
        merged = _audit_in_stretches(group, records, rng, cut)
        assert sorted(map(repr, merged)) == sorted(map(repr, fed)), group


def test_a_step_back_across_stretches_is_a_violation_only_in_a_stable_window() -> None:
    auditor = GroupAuditor("g")
    first = OffsetSummary.of_commit(10, 1000, 0, 5)
    later = OffsetSummary.of_commit(7, 1001, 0, 9)
    assert auditor.merge_stretch("t", 0, first, first_commit_source_offset=5, first_commit_record_ts=1) == []
    # before any GroupMetadata record the window is not Stable: nothing counts
    assert auditor.merge_stretch("t", 0, later, first_commit_source_offset=9, first_commit_record_ts=2) == []
    assert auditor.stretch_regression("t", 0, Regression(10, 1000, 5), 7, 1001, 0, 9, 2) == []
    (row,) = [r for r in auditor.finish() if type(r).__name__ == "OffsetCommitRow"]
    assert (row.commits, row.regressions, row.first_offset, row.last_offset) == (2, 0, 10, 7)


def _offset_rows(rows: list) -> list[str]:
    """The rows an offsets-only audit gives: offset_commits, offset_regression violations, quarantine."""
    kept = ("OffsetCommitRow", "QuarantineRow")
    return sorted(repr(r) for r in rows if type(r).__name__ in kept
                  or (type(r).__name__ == "ViolationRow" and r.kind == "offset_regression"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_an_offsets_only_audit_gives_the_offset_rows_of_the_full_one(path: Path) -> None:
    for group, records in _groups(path).items():
        full = _audit_in_stretches(group, records, random.Random(0), 0.3)
        only = _audit_in_stretches(group, records, random.Random(0), 0.3, observe=False)
        assert _offset_rows(only) == sorted(map(repr, only)), group  # nothing else comes out
        assert _offset_rows(only) == _offset_rows(full), group
        # the samples' embedded bytes all decode: without decoding them, the same rows
        lean = _audit_in_stretches(group, records, random.Random(0), 0.3, observe=False, embedded=False)
        assert sorted(map(repr, lean)) == _offset_rows(full), group


def test_an_offsets_only_audit_names_the_owners_of_a_regression_and_saves_no_state() -> None:
    log = (LogBuilder().group(1, [member("a-1", tps("t", 0, 1)), member("b-1", tps("t", 2))])
           .commit("t", 0, 10).commit("t", 0, 4).group(2, []).commit("t", 0, 1).commit("t", 0, 0))
    auditor = GroupAuditor("g", observe=False)
    rows = [*auditor.feed(log.records), *auditor.finish()]
    (v,) = [r for r in rows if type(r).__name__ == "ViolationRow"]
    assert (v.kind, v.generation_id, v.member_ids) == ("offset_regression", 1, ("a-1",))
    assert _offset_rows(rows) == _offset_rows(list(audit_group(log.records, group_id="g")))
    with pytest.raises(ValueError, match="offsets-only"):
        auditor.to_dict()


def test_an_offsets_only_audit_that_decodes_no_embedded_bytes_gives_the_same_offset_rows() -> None:
    """`embedded=False`: the windows open where they did (a record listing a member id twice is
    still quarantined and opens none), a regression still names the partition's owners (the
    snapshot is built then), and only the quarantine row of the undecodable embedded bytes is gone."""
    bad = member("b-1", subscription=b"\x00\x01\x00\x00\x00\x05", assignment=b"\x00\x00\xff")
    log = (LogBuilder().group(1, [member("a-1", tps("t", 0, 1)), bad]).commit("t", 0, 10).commit("t", 0, 4)
           .group(2, [member("d", tps("t", 0)), member("d", tps("t", 1))]).commit("t", 0, 3)
           .group(3, []).commit("t", 0, 1))
    decoding, lean = GroupAuditor("g", observe=False), GroupAuditor("g", observe=False, embedded=False)
    full = [*decoding.feed(log.records), *decoding.finish()]
    rows = [*lean.feed(log.records), *lean.finish()]

    def quarantined(rows: list) -> list[str]:
        return [r.error for r in rows if type(r).__name__ == "QuarantineRow"]

    assert ([r for r in rows if type(r).__name__ != "QuarantineRow"]
            == [r for r in full if type(r).__name__ != "QuarantineRow"])
    violations = [r for r in rows if type(r).__name__ == "ViolationRow"]
    assert [(v.generation_id, v.member_ids) for v in violations] == [(1, ("a-1",)), (1, ("a-1",))]
    assert len(quarantined(full)) == 2 and "member 'b-1' assignment" in quarantined(full)[0]
    assert quarantined(rows) == quarantined(full)[1:] and "member id 'd'" in quarantined(rows)[0]
    assert (lean.counts.embedded_decode_errors, decoding.counts.embedded_decode_errors) == (0, 2)
    with pytest.raises(ValueError, match="embedded=False needs observe=False"):
        GroupAuditor("g", embedded=False)
