"""Differential tier: the Python assignors against Kafka's own (kafka-clients jar) on random groups.

Each assignor gets `oracle_cases` seeded random cases, sent to ONE JVM run of
tests/oracle/java/AssignorOracle.java; the test asserts the same partitions per member in the same
list order, the same user data a member would send after receiving that assignment, and the same
failures. Cases: 1-30 members (some static), 1-5 topics of 1-64 partitions (some without metadata),
identical or mixed subscriptions, prior ownership with generations and conflicting claims, rack-aware
groups, assignor instances reused across cases (sticky's remembered max generation), and chains
where a case's ownership is the previous case's result after members joined or left.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from coordinator_audit.core.client.assignors import (
    ASSIGNORS,
    ConsumerPartitionAssignor,
    MemberAssignment,
    MemberSubscription,
    TopicPartition,
)
from coordinator_audit.core.consumer_protocol import encode_cooperative_user_data, encode_sticky_user_data
from coordinator_audit.core.errors import AssignorError
from tests.oracle.kafka_jar import SEED, run_oracle

pytestmark = pytest.mark.oracle

RACKS = ("rack-a", "rack-b", "rack-c")


@dataclass
class Case:
    assignor: str
    partitions_per_topic: dict[str, int]
    subscriptions: dict[str, MemberSubscription]
    partition_racks: dict[tuple[str, int], tuple[str, ...]] | None = None
    fresh: bool = True
    user_data_generation: int = 1
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# the line format of AssignorOracle.java


def _s(value: str | None) -> str:
    return "-" if value is None else "x" + value.encode("utf-8").hex()


def _list(items: list[str]) -> str:
    return ",".join(items) if items else "."


def _case_lines(case: Case) -> list[str]:
    lines = [f"CASE {case.assignor} {1 if case.fresh else 0} {case.user_data_generation}"]
    for topic, count in case.partitions_per_topic.items():
        racks = "-"
        if case.partition_racks is not None:
            racks = "/".join(_list([_s(r) for r in case.partition_racks.get((topic, p), ())]) for p in range(count))
            if count == 0:
                racks = "-"
        lines.append(f"T {_s(topic)} {count} {racks}")
    for member, sub in case.subscriptions.items():
        ud = "-" if sub.user_data is None else "x" + sub.user_data.hex()
        owned = _list([f"{_s(tp.topic)}:{tp.partition}" for tp in sub.owned_partitions])
        lines.append(f"M {_s(member)} {_s(sub.group_instance_id)} {_s(sub.rack_id)} {sub.generation_id} {ud} "
                     f"{_list([_s(t) for t in sub.topics])} {owned}")
    lines.append("END")
    return lines


def _unhex(token: str) -> str:
    return bytes.fromhex(token[1:]).decode("utf-8")


def _parse_output(text: str) -> list[tuple[dict[str, list[TopicPartition]], dict[str, bytes | None], str | None]]:
    results: list[tuple[dict[str, list[TopicPartition]], dict[str, bytes | None], str | None]] = []
    assignment: dict[str, list[TopicPartition]] = {}
    user_data: dict[str, bytes | None] = {}
    error: str | None = None
    for line in text.splitlines():
        parts = line.split(" ")
        if parts[0] == "CASE":
            assignment, user_data, error = {}, {}, None
        elif parts[0] == "A":
            tps = [] if parts[2] == "." else parts[2].split(",")
            assignment[_unhex(parts[1])] = [
                TopicPartition(_unhex(t.rsplit(":", 1)[0]), int(t.rsplit(":", 1)[1])) for t in tps]
        elif parts[0] == "U":
            user_data[_unhex(parts[1])] = None if parts[2] == "-" else bytes.fromhex(parts[2][1:])
        elif parts[0] == "ERR":
            error = parts[1]
        elif parts[0] == "END":
            results.append((assignment, user_data, error))
    return results


# ---------------------------------------------------------------------------------------------
# random cases


def _member_id(rng: random.Random, i: int) -> str:
    style = rng.random()
    if style < 0.8:
        return f"consumer-{rng.randint(1, 9)}-{rng.getrandbits(64):016x}"
    if style < 0.9:
        return f"c{i}"
    return rng.choice(["é", "z", "\U0001d518", "\uff5a", "Z", "a"]) + f"-{i}"


def _topics(rng: random.Random) -> dict[str, int]:
    names = rng.sample(["orders", "payments", "t0", "t1", "t2", "clicks", "topic-\u00e9", "\U0001d518-events",
                        "logs", "metrics", "a", "A"], rng.randint(1, 5))
    counts = {}
    for name in names:
        r = rng.random()
        counts[name] = 0 if r < 0.03 else rng.randint(1, 8) if r < 0.5 else rng.randint(1, 64)
    return counts


def _ownership(rng: random.Random, ppt: dict[str, int], members: list[str]) -> dict[str, list[TopicPartition]]:
    """A previous assignment: mostly disjoint, some partitions claimed twice, some unclaimed."""
    owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    pool = [TopicPartition(t, p) for t, n in ppt.items() for p in range(n)]
    rng.shuffle(pool)
    holders = [m for m in members if rng.random() < 0.8]
    if not holders:
        return owned
    for tp in pool:
        r = rng.random()
        if r < 0.1:
            continue
        owned[rng.choice(holders)].append(tp)
        if r > 0.93 and len(holders) > 1:
            owned[rng.choice(holders)].append(tp)
    for m in members:
        owned[m] = list(dict.fromkeys(owned[m]))
        if rng.random() < 0.5:
            owned[m].sort()
    return owned


def _subscription(rng: random.Random, assignor: str, topics: tuple[str, ...], owned: list[TopicPartition],
                  generation: int, instance: str | None, rack: str | None) -> MemberSubscription:
    """What a member of this assignor's protocol would send, with the odd irregularity."""
    sub_generation = generation if rng.random() < 0.7 else -1
    if assignor == "sticky":
        r = rng.random()
        if generation < 0 and r < 0.6:
            ud = None
        elif r < 0.85:
            ud = encode_sticky_user_data(owned, generation=generation)
        elif r < 0.95:
            ud = encode_sticky_user_data(owned, generation=generation)[:-4]  # V0: no generation
        else:
            ud = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 9)))
        return MemberSubscription(topics, ud, (), sub_generation, instance, rack)
    if assignor == "cooperative-sticky":
        r = rng.random()
        ud = (encode_cooperative_user_data(generation) if r < 0.8 else None if r < 0.9
              else bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 3))))
        return MemberSubscription(topics, ud, tuple(owned), sub_generation, instance, rack)
    return MemberSubscription(topics, None, tuple(owned) if rng.random() < 0.2 else (), sub_generation,
                              instance, rack)


def _random_case(rng: random.Random, assignor: str) -> Case:
    ppt = _topics(rng)
    topic_names = list(ppt)
    extra = "no-metadata" if rng.random() < 0.1 else None
    n_members = rng.randint(1, 30) if rng.random() < 0.6 else rng.randint(1, 6)
    members = list(dict.fromkeys(_member_id(rng, i) for i in range(n_members)))
    same = rng.random() < 0.5
    common = tuple(rng.sample(topic_names, rng.randint(1, len(topic_names))))
    racked = rng.random() < 0.3
    base_generation = rng.randint(1, 20)
    owned = _ownership(rng, ppt, members)
    subs: dict[str, MemberSubscription] = {}
    for i, m in enumerate(members):
        if same:
            topics = common
        else:
            topics = tuple(rng.sample(topic_names, rng.randint(0 if rng.random() < 0.05 else 1, len(topic_names))))
        if extra and rng.random() < 0.5:
            topics = (*topics, extra)
        r = rng.random()
        generation = base_generation if r < 0.6 else base_generation - rng.randint(1, 3) if r < 0.8 else -1
        instance = f"instance-{rng.randint(0, 99)}-{i}" if rng.random() < 0.3 else None
        rack = rng.choice((*RACKS, "")) if racked and rng.random() < 0.9 else None
        claims = owned[m] if generation >= 0 or rng.random() < 0.2 else []
        subs[m] = _subscription(rng, assignor, topics, claims, generation, instance, rack)
    racks = None
    if racked:
        racks = {}
        all_on_all = rng.random() < 0.2
        for t, n in ppt.items():
            for p in range(n):
                racks[(t, p)] = RACKS if all_on_all else tuple(rng.sample(RACKS, rng.randint(0, 3)))
    return Case(assignor, ppt, subs, racks, fresh=rng.random() < 0.9,
                user_data_generation=base_generation + 1)


def _next_generation(rng: random.Random, previous: Case, result: dict[str, MemberAssignment]) -> Case:
    """The group one rebalance later: members leave or join, topics may grow; survivors report what
    the previous case gave them (as owned partitions or sticky user data)."""
    assignor = previous.assignor
    generation = previous.user_data_generation
    ppt = dict(previous.partitions_per_topic)
    if rng.random() < 0.2:
        t = rng.choice(list(ppt))
        ppt[t] += rng.randint(1, 8)
    members = [m for m in previous.subscriptions if rng.random() < 0.85]
    joiners = [_member_id(rng, 100 + i) for i in range(rng.randint(0, 4))]
    subs: dict[str, MemberSubscription] = {}
    topic_names = list(ppt)
    for m in members + joiners:
        before = previous.subscriptions.get(m)
        topics = before.topics if before is not None and rng.random() < 0.9 else tuple(
            rng.sample(topic_names, rng.randint(1, len(topic_names))))
        got = list(result[m].partitions) if m in result else []
        gen = generation if m in result else -1
        instance = before.group_instance_id if before is not None else None
        rack = before.rack_id if before is not None else None
        if assignor == "sticky":
            ud = encode_sticky_user_data(got, generation=gen) if m in result else None
            subs[m] = MemberSubscription(topics, ud, (), gen, instance, rack)
        elif assignor == "cooperative-sticky":
            subs[m] = MemberSubscription(topics, encode_cooperative_user_data(gen), tuple(got), gen, instance, rack)
        else:
            subs[m] = MemberSubscription(topics, None, (), gen, instance, rack)
    if not subs:
        subs[joiners[0] if joiners else "lonely"] = MemberSubscription(tuple(topic_names))
    racks = None
    if previous.partition_racks is not None:
        racks = {(t, p): previous.partition_racks.get((t, p), tuple(rng.sample(RACKS, rng.randint(1, 3))))
                 for t, n in ppt.items() for p in range(n)}
    return Case(assignor, ppt, subs, racks, fresh=True, user_data_generation=generation + 1, notes=["chained"])


def _python_run(case: Case, instance: ConsumerPartitionAssignor) -> tuple[dict[str, MemberAssignment] | None,
                                                                           dict[str, bytes | None], str | None]:
    try:
        result = instance.assign(case.partitions_per_topic, case.subscriptions, partition_racks=case.partition_racks)
    except AssignorError as e:
        return None, {}, e.java_exception
    user_data = {}
    for member, assignment in result.items():
        fresh = ASSIGNORS[case.assignor]()
        fresh.on_assignment(assignment, case.user_data_generation)
        user_data[member] = fresh.subscription_user_data(case.subscriptions[member].topics)
    return result, user_data, None


def _run_cases(assignor: str, count: int) -> tuple[list[Case], list[tuple], list[tuple]]:
    rng = random.Random(f"{SEED}-{assignor}")
    cases: list[Case] = []
    py_results: list[tuple] = []
    instance: ConsumerPartitionAssignor | None = None
    while len(cases) < count:
        if cases and py_results[-1][0] is not None and rng.random() < 0.4:
            case = _next_generation(rng, cases[-1], py_results[-1][0])
        else:
            case = _random_case(rng, assignor)
        if case.fresh or instance is None:
            instance = ASSIGNORS[assignor]()
        cases.append(case)
        py_results.append(_python_run(case, instance))
    stdin = "\n".join(line for case in cases for line in _case_lines(case)) + "\n"
    java_results = _parse_output(run_oracle("AssignorOracle", stdin, timeout=600))
    return cases, py_results, java_results


_RUNS: dict[tuple[str, int], tuple[list[Case], list[tuple], list[tuple]]] = {}


def _cached_run(assignor: str, count: int) -> tuple[list[Case], list[tuple], list[tuple]]:
    """One JVM run per assignor, shared by the assignment and the user-data test."""
    key = (assignor, count)
    if key not in _RUNS:
        _RUNS[key] = _run_cases(assignor, count)
    return _RUNS[key]


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
def test_assignor_matches_java(assignor: str, oracle_cases: int) -> None:
    cases, py_results, java_results = _cached_run(assignor, oracle_cases)
    assert len(java_results) == len(cases)
    failures = []
    for i, (case, (py_assignment, _, py_err), (java_assignment, _, java_err)) in enumerate(
            zip(cases, py_results, java_results, strict=True)):
        if java_err is not None or py_err is not None:
            if java_err != py_err:
                failures.append(f"case {i}: Java error {java_err}, Python error {py_err}")
            continue
        assert py_assignment is not None
        got = {m: list(a.partitions) for m, a in py_assignment.items()}
        if got != java_assignment:
            diff = {m: (got.get(m), java_assignment.get(m)) for m in set(got) | set(java_assignment)
                    if got.get(m) != java_assignment.get(m)}
            failures.append(f"case {i} ({case.notes}): {len(diff)} members differ, e.g. "
                            f"{next(iter(diff.items()))} (python, java)")
    assert not failures, f"{len(failures)}/{len(cases)} cases differ:\n" + "\n".join(failures[:10])


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
def test_subscription_user_data_matches_java(assignor: str, oracle_cases: int) -> None:
    """The user data each member would send after receiving its assignment (onAssignment then
    subscriptionUserData on a fresh Java instance), byte for byte."""
    cases, py_results, java_results = _cached_run(assignor, oracle_cases)
    failures = []
    compared = 0
    for i, ((_, py_ud, py_err), (_, java_ud, java_err)) in enumerate(zip(py_results, java_results, strict=True)):
        if py_err is None and java_err is None:
            compared += 1
            bad = sorted(m for m in java_ud if py_ud.get(m) != java_ud[m])
            if bad:
                mine, theirs = py_ud.get(bad[0]), java_ud[bad[0]]
                failures.append(f"case {i}: member {bad[0]!r}: python {mine.hex() if mine else mine} "
                                f"java {theirs.hex() if theirs else theirs}")
    assert compared > 0
    assert not failures, f"{len(failures)}/{len(cases)} cases differ:\n" + "\n".join(failures[:5])
