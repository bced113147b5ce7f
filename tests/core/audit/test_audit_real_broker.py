"""The audit on the real Kafka 3.9.0 broker sample: its causes must match the broker's own log reasons."""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coordinator_audit.core.audit import GroupAuditor
from coordinator_audit.core.records import decode

from .audit_builders import rows_by_table
from .audit_scoring import Score, score

SAMPLES = Path(__file__).resolve().parents[3] / "data" / "samples"


def _groups() -> dict[str, list[tuple[int, int, int, bytes, bytes | None]]]:
    table = pq.read_table(SAMPLES / "real_broker_3_9_0.parquet").to_pylist()
    table.sort(key=lambda r: (r["partition"], r["offset"]))
    out: dict[str, list[tuple[int, int, int, bytes, bytes | None]]] = defaultdict(list)
    for r in table:
        group = decode(r["key"], None).key.group  # type: ignore[union-attr]
        ts = int(r["timestamp"].timestamp() * 1000)
        out[group].append((r["partition"], r["offset"], ts, r["key"], r["value"]))
    return out


TRUTH = json.loads((SAMPLES / "real_broker_3_9_0.truth.json").read_text())
SERVER_LOG = (SAMPLES / "real_broker_3_9_0.server.log").read_text()
_LINE = re.compile(r"^\[(?P<ts>[^\]]+)\] INFO \[GroupCoordinator 1\]: (?P<msg>.*)$", re.MULTILINE)
_LEFT = re.compile(r"Member MemberMetadata\(memberId=([^,]+),.* has left group (\S+) ")


def broker_members(text: str) -> dict[tuple[str, int], str | None]:
    """(group, generation) -> the member the broker's own log names for it: for a generation that
    stabilized, the member in the reason of the first "Preparing to rebalance" line since the
    previous generation (the join, leave, expiry or rejoin that started the round); for an Empty
    generation, the member whose removal emptied the group (the last removal logged before "is now
    empty", or the LeaveGroup logged right after it in the same second)."""
    out: dict[tuple[str, int], str | None] = {}
    first: dict[str, str | None] = {}
    removed: dict[str, str] = {}
    lines = list(_LINE.finditer(text))
    for i, line in enumerate(lines):
        msg = line["msg"]
        if m := re.match(r"Preparing to rebalance group (\S+) .*?\(reason: (.*)", msg):
            who = re.search(r"(?:Adding new member|[Rr]emoving member|Leader|Updating metadata for member) (\S+)", m[2])
            first.setdefault(m[1], who[1] if who else None)
            if who and re.match(r"[Rr]emoving member", m[2]):
                removed[m[1]] = who[1]
        elif (m := re.match(r"Member (\S+) in group (\S+) has failed", msg)) or (m := _LEFT.match(msg)):
            removed[m[2]] = m[1]
        elif m := re.match(r"Stabilized group (\S+) generation (\d+)", msg):
            out[(m[1], int(m[2]))] = first.pop(m[1], None)
        elif m := re.match(r"Group (\S+) with generation (\d+) is now empty", msg):
            who = removed.get(m[1])
            nxt = lines[i + 1] if i + 1 < len(lines) else None
            if nxt is not None and nxt["ts"][:19] == line["ts"][:19] and (after := _LEFT.match(nxt["msg"])):
                who = after[1] if after[2] == m[1] else who
            out[(m[1], int(m[2]))] = who
            first.pop(m[1], None)
    return out


BROKER_MEMBERS = broker_members(SERVER_LOG)
GROUPS = {g["group"]: g for g in TRUTH["groups"]}


@pytest.fixture(scope="module")
def audited() -> dict[str, tuple[dict[str, list], GroupAuditor]]:
    out = {}
    for group, records in _groups().items():
        auditor = GroupAuditor()
        rows = list(auditor.feed(records)) + auditor.finish()
        out[group] = (rows_by_table(rows), auditor)
    return out


def test_sample_has_the_four_groups(audited) -> None:
    assert set(audited) == set(GROUPS)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_causes_agree_with_broker_reasons(audited, group: str) -> None:
    tables, _ = audited[group]
    truth = {g["generation"]: [g["cause"]] for g in GROUPS[group]["observed_causes_by_generation"]}
    result = score(tables["rebalance_causes"], truth)
    # same-generation static replacements are extra rows the truth lists as events, not generations
    extra = [m for m in result.mismatches if set(m[2]) - {"static_member_replaced"} != set(m[1])]
    assert result.agree == result.generations == len(truth), result.report()
    assert not extra, result.report()


def test_broker_log_names_a_member_for_every_generation() -> None:
    expected = {(g["group"], t["generation"]) for g in TRUTH["groups"] for t in g["observed_causes_by_generation"]}
    assert set(BROKER_MEMBERS) == expected
    assert all(BROKER_MEMBERS.values())


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_primary_cause_and_member_match_the_broker_log(audited, group: str) -> None:
    """The primary cause of every generation and the member it names are the broker's own: the
    member in the reason that started the round, the last member to leave an emptied group."""
    tables, _ = audited[group]
    got = {c.generation_id: (c.cause, c.member_id) for c in tables["rebalance_causes"] if c.is_primary}
    want = {t["generation"]: (t["cause"], BROKER_MEMBERS[(group, t["generation"])])
            for t in GROUPS[group]["observed_causes_by_generation"]}
    assert got == want
    assert {g.coordinator_flavour for g in tables["generations"]} == {"scala"}  # a 3.9 broker: no creation record


def test_overall_agreement_report(audited, capsys) -> None:
    total = Score()
    for group, (tables, _) in audited.items():
        truth = {g["generation"]: [g["cause"]] for g in GROUPS[group]["observed_causes_by_generation"]}
        total.add(score(tables["rebalance_causes"], truth))
    with capsys.disabled():
        print("\nreal broker sample, per-generation cause agreement:\n" + total.report())
    assert total.agreement == 1.0


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_generations_match_broker_members_and_times(audited, group: str) -> None:
    tables, _ = audited[group]
    gens = {g.generation_id: g for g in tables["generations"]}
    for t in GROUPS[group]["observed_causes_by_generation"]:
        g = gens[t["generation"]]
        assert g.member_count == t["members"]
        assert g.state == ("Stable" if t["members"] else "Empty")
        # "Stabilized group ..."/"is now empty" is logged at the transition the record's
        # currentStateTimestamp stamps (CompletingRebalance entry / Empty entry)
        # (the log line's clock is read a millisecond or two after the transition's)
        assert g.state_timestamp is not None and 0 <= t["stabilized_ts"] - g.state_timestamp <= 5
        assert g.missing_generations == 0
    # every generation but the last is closed by its successor
    ordered = sorted(gens.values(), key=lambda g: g.source_offset)
    for a, b in itertools.pairwise(ordered):
        assert a.ended_at == b.record_timestamp and a.ended_by_offset == b.source_offset
    assert ordered[-1].ended_at is None


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_clean_sample_has_no_violations_and_no_quarantine(audited, group: str) -> None:
    tables, auditor = audited[group]
    assert tables["violations"] == []
    assert tables["quarantine"] == []
    c = auditor.counts
    assert c.records_in == c.duplicates + c.replayed + c.quarantined + c.skipped_other_type
    assert c.quarantined == c.duplicates == c.skipped_other_type == 0
    commits = sum(r.commits for r in tables["offset_commits"])
    assert commits == c.offset_commits > 0


def test_static_rolling_restart_is_three_same_generation_replacements(audited) -> None:
    tables, _ = audited["grp-s05"]
    replaced = [c for c in tables["rebalance_causes"] if c.cause == "static_member_replaced"]
    assert len(replaced) == 3
    assert {c.generation_id for c in replaced} == {3}
    assert all(c.previous_generation_id == 3 and not c.is_primary for c in replaced)
    gen3 = next(g for g in tables["generations"] if g.generation_id == 3)
    assert gen3.static_replacements == 3 and gen3.static_member_count == 3
    # ownership passes to the new member ids at the replacement records, partitions unchanged
    rows3 = [a for a in tables["assignments"] if a.generation_id == 3]
    by_instance: dict[str, list] = defaultdict(list)
    for a in rows3:
        by_instance[a.group_instance_id].append(a)
    assert len(by_instance) == 3
    end = next(g for g in tables["generations"] if g.generation_id == 4).record_timestamp
    for instance, rows in by_instance.items():
        ids = sorted({a.member_id for a in rows}, key=lambda m: min(a.valid_from for a in rows if a.member_id == m))
        assert len(ids) == 2, instance
        old = [a for a in rows if a.member_id == ids[0]]
        new = [a for a in rows if a.member_id == ids[1]]
        assert {(a.topic, a.partition) for a in old} == {(a.topic, a.partition) for a in new}
        assert len({a.valid_to for a in old}) == 1 and {a.valid_to for a in old} == {a.valid_from for a in new}
        assert {a.valid_to for a in new} == {end}


def test_cooperative_group_two_rounds_per_join(audited) -> None:
    tables, _ = audited["grp-s07"]
    gens = {g.generation_id: g for g in tables["generations"]}
    assert gens[2].rebalance_protocol == "COOPERATIVE"
    # in generation 2 the newcomer gets nothing that jA still owned; generation 3 hands it over
    gen2 = {(a.member_id, a.partition) for a in tables["assignments"] if a.generation_id == 2}
    gen3 = {(a.member_id, a.partition) for a in tables["assignments"] if a.generation_id == 3}
    ja = next(m for m, _ in gen2 if "-jA-" in m)
    jb = next(m for m, _ in gen3 if "-jB-" in m)
    assert {p for m, p in gen2 if m == ja} == {0, 1, 2}
    assert {p for m, p in gen3 if m == jb} == {3, 4, 5}
    kept = [a for a in tables["assignments"] if a.generation_id == 3 and a.member_id == ja]
    assert all(a.owned_before for a in kept)
