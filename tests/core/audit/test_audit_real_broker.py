"""The audit on the real Kafka 3.9.0 broker sample: its causes must match the broker's own log reasons."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coordinator_core.audit import GroupAuditor
from coordinator_core.records import decode

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
