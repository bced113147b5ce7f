"""Holding the audit's tables against what the real consumers saw (scenarios.Truth)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from coordinator_audit.jobs.delta_io import read_table


def seen_generations(truth: dict[str, Any]) -> dict[int, dict[str, set[tuple[str, int]]]]:
    """{generation: {member_id: assignment}} from every member's "assigned" events."""
    out: dict[int, dict[str, set[tuple[str, int]]]] = {}
    for member in truth["members"]:
        for e in member["events"]:
            if e["event"] == "assigned":
                parts = {(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in e["assignment"]}
                out.setdefault(int(e["generation"]), {})[e["member_id"]] = parts
    return out


def holders(truth: dict[str, Any], member_ids: Any) -> set[str]:
    """The members behind `member_ids`: a static member replaced within a generation (KIP-345) shows
    up under its old and its new member id, and counts once (by group.instance.id)."""
    instance = {e["member_id"]: m["instance_id"] for m in truth["members"] if m["instance_id"]
                for e in m["events"] if "member_id" in e}
    return {instance.get(m, m) for m in member_ids}


def tables_at(spark: Any, locations: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows (as dicts, without run_id/run_window) read back from Delta."""
    out = {}
    for name, loc in locations.items():
        df: DataFrame = read_table(spark, loc)
        out[name] = [r.asDict(recursive=True) for r in df.drop("run_id", "run_window").collect()]
    return out


def assert_tables_match_truth(tables: dict[str, list[dict[str, Any]]], truths: dict[str, dict[str, Any]], *,
                              broker_account: bool) -> None:
    """Every generation a consumer saw is a Stable generation with at least that many members (exactly
    the broker's count, when `broker_account`); every
    member's assignment in it is the table's; each scripted step's cause is the audit's primary
    cause (and the broker's own, from its server.log, when `broker_account`)."""
    gens = {(r["group_id"], r["generation_id"]): r for r in tables["generations"]}
    assigned: dict[tuple[str, int, str], set[tuple[str, int]]] = {}
    for r in tables["assignments"]:
        assigned.setdefault((r["group_id"], r["generation_id"], r["member_id"]), set()).add((r["topic"], r["partition"]))
    primary = {(r["group_id"], r["generation_id"]): r["cause"] for r in tables["rebalance_causes"] if r["is_primary"]}
    for group, truth in truths.items():
        for gen, members in seen_generations(truth).items():
            row = gens.get((group, gen))
            assert row is not None, f"{group}: generation {gen} seen by {sorted(members)} is not in generations"
            assert row["state"] == "Stable", (group, gen, row)
            # a static member replaced in the generation (KIP-345) shows up under both member ids
            # a member can be in a generation and never see it: its SyncGroup answered REBALANCE_IN_PROGRESS
            # because the next round had begun (cooperative follow-ups are quick); the broker counts it
            assert row["member_count"] >= len(holders(truth, members)), (group, gen, row["member_count"], sorted(members))
            if broker_account:
                assert row["member_count"] == row["broker_member_count"], (group, gen, row)
            for member_id, parts in members.items():
                assert assigned.get((group, gen, member_id), set()) == parts, (
                    f"{group} generation {gen} member {member_id}: table {assigned.get((group, gen, member_id))} "
                    f"consumer {parts}")
        previous = None
        for step in truth["steps"]:
            gen = step["generation"]
            if gen is None:
                continue
            where = f"{group} step {step['action']!r} (generation {gen})"
            if step.get("same_generation"):
                assert gen == previous, f"{where}: a static rejoin must not start a generation (was {previous})"
                rows = [r for r in tables["rebalance_causes"] if r["group_id"] == group
                        and r["generation_id"] == gen and r["cause"] == step["audit_row"]
                        and r["group_instance_id"] == step["member"]]
                assert rows, f"{where}: no {step['audit_row']} cause row for {step['member']}"
            if "audit" in step:
                assert primary.get((group, gen)) == step["audit"], (
                    f"{where}: primary cause {primary.get((group, gen))}; broker: "
                    f"{[(k[1], r['broker_cause'], r['broker_reason']) for k, r in sorted(gens.items()) if k[0] == group]}")
            if broker_account and "broker" in step:
                row = gens[(group, gen)]
                assert row["broker_cause"] == step["broker"], f"{where}: broker {row['broker_cause']} {row['broker_reason']!r}"
                assert row["stabilized_at"] is not None and row["rebalance_started_at"] is not None, (where, row)
                assert row["rebalance_duration_ms"] == row["stabilized_at"] - row["rebalance_started_at"] >= 0
            previous = gen
        if not broker_account:
            assert all(gens[k]["broker_reason"] is None for k in gens if k[0] == group)
