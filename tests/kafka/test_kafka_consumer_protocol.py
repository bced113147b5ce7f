"""The broker tier for KIP-848 consumer groups: a Kafka 4.4 broker, real consumers with
`group.protocol=consumer` (uniform and range server assignors; scale out and in; a SIGKILL; a clean
leave; a poll timeout; a subscription change; a regular expression; static members back within and
past their session; an online migration from classic and back), the broker's `__consumer_offsets`
exported through Spark's Kafka source and audited by the job with the broker's server.log, and the
tables held against what the consumers saw (scenarios_kip848.Truth)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.jobs.kafka_source import read_kafka
from tests.kafka.cluster import Broker
from tests.kafka.scenarios_kip848 import BROKER_PROPERTIES, SCENARIOS, run_all
from tests.kafka.truth import tables_at

pytestmark = pytest.mark.kafka

GROUPS = [group for group, _ in SCENARIOS.values()]
Tables = dict[str, list[dict[str, Any]]]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    """A Kafka 4.4 broker with every scenario run on it; stopped when the module ends."""
    broker = Broker(tmp_path_factory.mktemp("kafka44"), 44, properties=BROKER_PROPERTIES)
    try:
        broker.start()
        assert broker.version == "4.4.0"
        truths = run_all(broker)
        (broker.directory / "truth.json").write_text(json.dumps(truths, indent=1))
        yield broker, truths
    finally:
        broker.stop()


def topic_names(broker: Broker) -> dict[str, str]:
    """{topic id: topic name} as the broker keeps them (each partition directory's
    `partition.metadata`), to hold the tables' topic ids against the names the consumers saw."""
    out = {}
    for meta in (broker.directory / "data").glob("*-*/partition.metadata"):
        fields = dict(line.split(": ", 1) for line in meta.read_text().splitlines() if ": " in line)
        out[fields["topic_id"]] = meta.parent.name.rsplit("-", 1)[0]
    return out


@pytest.fixture(scope="module")
def kafka_run(spark, live, tmp_path_factory: pytest.TempPathFactory):
    """The job over the broker's `__consumer_offsets` through Spark's Kafka source, with the broker's
    server.log: its summary and tables."""
    broker, _ = live
    out = tmp_path_factory.mktemp("kip848-kafka")
    cfg = load_config(None, {"input.kafka_bootstrap": broker.bootstrap, "output.path": str(out),
                             "input.server_log": str(broker.server_log), "output.writer": "embedded",
                             "job.shards": 2})
    summary = run_audit(spark, cfg)
    return summary, tables_at(spark, summary.locations)


@pytest.fixture(scope="module")
def tables(kafka_run, live) -> Tables:
    broker, _ = live
    return {**kafka_run[1], "_topic_names": [topic_names(broker)]}


def test_the_same_log_exported_to_parquet_gives_identical_tables(spark, live, kafka_run, tmp_path) -> None:
    """The Parquet export of the offsets the Kafka run read, audited as files, gives the same rows
    in every table (`runs` aside, which records how each run read)."""
    broker, _ = live
    summary, kafka_tables = kafka_run
    export = tmp_path / "consumer_offsets.parquet"
    ending = {p: e for p, (_, e) in summary.kafka_offsets.items()}
    read_kafka(spark, broker.bootstrap, ending_offsets=ending).df.write.parquet(str(export))
    cfg = load_config(None, {"input.path": str(export), "input.format": "parquet", "output.path": str(tmp_path / "out"),
                             "input.server_log": str(broker.server_log), "output.writer": "embedded",
                             "job.shards": 2})
    file_tables = tables_at(spark, run_audit(spark, cfg).locations)
    for name in kafka_tables:
        if name != "runs":
            assert sorted(map(repr, file_tables[name])) == sorted(map(repr, kafka_tables[name])), name
    assert file_tables["runs"][0]["records_in"] == kafka_tables["runs"][0]["records_in"] > 0


def _parts(tps: list[str]) -> set[tuple[str, int]]:
    return {(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in tps}


def _rows(tables: Tables, name: str, group: str) -> list[dict[str, Any]]:
    """The table's rows of `group`, a topic id in `topic` read as the topic's name (whether the log
    names every topic id is `test_topic_ids_are_named_from_the_log`)."""
    names = tables.get("_topic_names", [{}])[0]
    return [{**r, "topic": names.get(r["topic"], r["topic"])} if "topic" in r else r
            for r in tables[name] if r["group_id"] == group]


@pytest.mark.parametrize("group", GROUPS)
def test_every_member_epoch_the_clients_saw_has_its_partitions_in_assignments(live, tables, group) -> None:
    """Per member and member epoch: the epoch is a generation of the group (a consumer-protocol
    member's: a consumer-group epoch), and the partitions the member held at that epoch (every
    callback's whole assignment and the partitions it revoked or lost: a revocation runs before the
    epoch advances) are its `assignments` rows of that epoch, no more, no fewer; what a poll saw at
    an epoch is among them. After the last step the members close at once: a member closing while
    the broker hands it partitions (recorded, at a new epoch) revokes only those it had, so there the
    callbacks' partitions are among the rows."""
    _, truths = live
    truth = truths[group]
    types: dict[int, set[str]] = defaultdict(set)
    for r in _rows(tables, "generations", group):
        types[r["generation_id"]].add(r["group_type"])
    rows: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
    for a in _rows(tables, "assignments", group):
        rows[(a["member_id"], a["generation_id"])].add((a["topic"], a["partition"]))
    scripted = truth["steps"][-1]["epoch"]
    problems: list[str] = []
    checked = 0
    for m in truth["members"]:
        held: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
        polled: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
        for e in m["events"]:
            if e["event"] in ("assigned", "revoked", "lost") and e["generation"] > 0:
                held[(e["member_id"], e["generation"])] |= _parts(e.get("assignment", [])) | _parts(e["partitions"])
            elif e["event"] == "state" and e["generation"] > 0:
                polled[(e["member_id"], e["generation"])] |= _parts(e["assignment"])
        for (member_id, epoch) in held.keys() | polled.keys():
            where = f"{m['client_id']} ({member_id}) at epoch {epoch}"
            if epoch not in types:
                problems.append(f"{where}: no generation {epoch}")
                continue
            if m["protocol"] == "consumer" and "consumer" not in types[epoch]:
                problems.append(f"{where}: generation {epoch} is {sorted(types[epoch])}, no consumer-group epoch")
            table = rows.get((member_id, epoch), set())
            if (member_id, epoch) in held and epoch > scripted and not held[(member_id, epoch)] <= table:
                problems.append(f"{where} (closing): assignments {sorted(table)}, "
                                f"callbacks {sorted(held[(member_id, epoch)])}")
            elif (member_id, epoch) in held and epoch <= scripted and table != held[(member_id, epoch)]:
                problems.append(f"{where}: assignments {sorted(table)}, callbacks {sorted(held[(member_id, epoch)])}")
            if not polled[(member_id, epoch)] <= table:
                problems.append(f"{where}: assignments {sorted(table)}, a poll saw {sorted(polled[(member_id, epoch)])}")
            checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 3


@pytest.mark.parametrize("group", GROUPS)
def test_every_cause_agrees_with_what_the_driver_did(live, tables, group) -> None:
    """The primary causes of the epochs (and classic generations) each step made, between the
    previous step's quiet time and its own, are the step's, naming the consumer the driver acted on
    (by member id, or by group.instance.id for a static member); a member gone says the log cannot
    tell a fence from a leave; a static member back within its session makes no epoch, and a
    `static_member_left_temporarily` and a `static_member_rejoined` row."""
    _, truths = live
    truth = truths[group]
    client_of = {e["member_id"]: m["client_id"] for m in truth["members"] for e in m["events"] if e.get("member_id")}
    causes = _rows(tables, "rebalance_causes", group)
    gens = {(r["group_type"], r["generation_id"]): r for r in _rows(tables, "generations", group)}
    primary = sorted((r for r in causes if r["is_primary"]),
                     key=lambda r: (r["record_timestamp"], r["source_offset"], r["generation_id"]))
    problems: list[str] = []
    since = 0
    for step in truth["steps"]:
        where = f"step {step['action']!r} (epoch {step['epoch']})"
        if step["same_epoch"]:
            for cause in step["audit_rows"]:
                if not [r for r in causes if r["generation_id"] == step["epoch"] and r["cause"] == cause
                        and r["group_instance_id"] == step["member"] and since < r["record_timestamp"] <= step["t"]]:
                    problems.append(f"{where}: no {cause} row for {step['member']}")
        elif "expect" in step:
            made = [r for r in primary if since < r["record_timestamp"] <= step["t"]]
            got = [(r["cause"], r["group_instance_id"] or client_of.get(r["member_id"] or "", r["member_id"]))
                   for r in made]
            want = [tuple(e) for e in step["expect"]]
            if "then_broker_reason" in step:  # the broker's own rebalance after the step's epochs
                rest = got[len(want):]
                reasons = [gens.get(("classic", r["generation_id"]), {}).get("broker_reason") or ""
                           for r in made[len(want):]]
                if not rest or not all(step["then_broker_reason"] in x for x in reasons):
                    problems.append(f"{where}: after {want} a rebalance the broker explains by "
                                    f"{step['then_broker_reason']!r} was expected: {rest} {reasons}")
                got = got[:len(want)]
            if got != want:
                problems.append(f"{where}: primary causes {got}, the driver did {step['expect']}")
            for r in made:
                if r["cause"] == "member_left_or_expired" and "cannot tell" not in r["detail"]:
                    problems.append(f"{where}: {r['detail']!r} does not say the log cannot tell a fence from a leave")
                if "topic" in step and r["cause"] == "regex_resolved" and step["topic"] not in r["detail"]:
                    problems.append(f"{where}: {r['detail']!r} does not name {step['topic']}")
        since = step["t"]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("group", GROUPS)
def test_partition_ownership_agrees_with_the_clients_at_quiet_times(live, tables, group) -> None:
    """At each step's quiet time (every member settled at one epoch, nothing happening), each
    partition a member holds is owned by it in `partition_ownership`, once, and every epoch it
    settled in reached Stable in `generations`."""
    _, truths = live
    truth = truths[group]
    own: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in _rows(tables, "partition_ownership", group):
        own[(r["topic"], r["partition"])].append(r)
    gens = {r["generation_id"]: r for r in _rows(tables, "generations", group)}
    problems: list[str] = []
    for step in truth["steps"]:
        at = step["t"]
        if gens.get(step["epoch"], {}).get("state") != "Stable":
            problems.append(f"step {step['action']!r}: generation {step['epoch']} is "
                            f"{gens.get(step['epoch'], {}).get('state')}, not Stable")
        for client, seen in step["live"].items():
            for tp in sorted(_parts(seen["assignment"])):
                covering = [r for r in own.get(tp, []) if r["owned"] and r["valid_from"] <= at
                            and (r["valid_to"] is None or at < r["valid_to"])]
                if [r["member_id"] for r in covering] != [seen["member_id"]]:
                    problems.append(f"step {step['action']!r}: {tp} held by {client} ({seen['member_id']}) at {at}; "
                                    f"partition_ownership owners {[r['member_id'] for r in covering]}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("group", GROUPS)
def test_clean_groups_have_no_violations(tables, group) -> None:
    assert _rows(tables, "violations", group) == []


def test_topic_ids_are_named_from_the_log(tables) -> None:
    """A KIP-848 member's partitions are recorded by topic id; the log names them (OffsetCommit
    value v4+ carries the id beside the name), so every assignment of a topic the groups committed
    to names it, with the id beside it."""
    names = tables["_topic_names"][0]
    rows = [r for r in tables["assignments"] if r["group_id"] in GROUPS and r.get("topic_id")]
    assert rows
    unnamed = sorted({(r["group_id"], r["topic"]) for r in rows if r["topic"] in names})
    assert unnamed == []
    assert all(names.get(r["topic_id"], r["topic"]) == r["topic"] for r in rows)


def test_the_tables_hold_every_group(tables) -> None:
    held = {r["group_id"] for r in tables["generations"]}
    assert set(GROUPS) <= held, sorted(set(GROUPS) - held)
    assert tables["quarantine"] == []
