"""Differential tests of coordinator_audit.core.consumer_protocol (and partition_for) against the genuine
kafka-clients 4.3.0 classes, driven through tests/oracle/java/ProtocolOracle.java.

Each test draws `oracle_cases` random cases (a fixed seed, so a failure reproduces), sends them to
ONE Java process, and checks both directions: our bytes == Kafka's serializer's bytes for the same
content (in Kafka's canonical order, since Kafka's serializer sorts), and Kafka's reading of our
bytes == our reading (in any order, any version up to 6, with trailing bytes or cut short).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from coordinator_audit.core.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from coordinator_audit.core.errors import RecordDecodeError
from coordinator_audit.core.jhash import java_string_hashcode, spread
from coordinator_audit.core.records import partition_for
from tests.oracle.kafka_jar import SEED, run_oracle

pytestmark = pytest.mark.oracle

T = TypeVar("T")


def _oracle(lines: list[str]) -> list[str]:
    """Runs ProtocolOracle once over all request lines; skips when no jar/JDK (fails with ORACLE=1)."""
    answers = run_oracle("ProtocolOracle", "".join(line + "\n" for line in lines)).splitlines()
    assert len(answers) == len(lines), f"{len(lines)} requests but {len(answers)} answers"
    return answers


# ---- the text encoding shared with ProtocolOracle.java

def s_tok(s: str | None) -> str:
    return "~" if s is None else "s" + s.encode("utf-8").hex()


def b_tok(b: bytes | None) -> str:
    return "~" if b is None else "b" + b.hex()


def l_tok(items: tuple[str, ...] | list[str]) -> str:
    return "L:" + ",".join(s_tok(s) for s in items)


def p_tok(pairs: list[tuple[str, int]]) -> str:
    return "P:" + ",".join(f"{s_tok(t)}/{p}" for t, p in pairs)


def flat(groups: tuple[TopicPartitions, ...]) -> list[tuple[str, int]]:
    return [(tp.topic, p) for tp in groups for p in tp.partitions]


def opt(v: int | None) -> str:
    return "~" if v is None else str(v)


def render_subscription(s: Subscription) -> str:
    """Our decoded subscription seen the way Kafka's Subscription object shows it."""
    rack = None if not s.rack_id else s.rack_id
    gen = s.generation_id if s.generation_id >= 0 else None
    return (f"version={s.version}|topics={l_tok(s.topics)}|userData={b_tok(s.user_data)}"
            f"|owned={p_tok(flat(s.owned_partitions))}|gen={opt(gen)}|rack={s_tok(rack)}")


def render_assignment(a: Assignment) -> str:
    return f"version={a.version}|parts={p_tok(flat(a.assigned_partitions))}|userData={b_tok(a.user_data)}"


# ---- random content

_ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz0123456789-._",
    "abcXYZ éüß中文Ω",
    "a\U0001f600b\U00010348",  # outside the BMP: two UTF-16 units each
]


def rstr(rng: random.Random, max_len: int = 12) -> str:
    alphabet = rng.choice(_ALPHABETS)
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len)))


def rbytes(rng: random.Random, max_len: int = 24) -> bytes | None:
    if rng.random() < 0.25:
        return None
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, max_len)))


def java_sorted(items: list[str]) -> list[str]:
    """String#compareTo order: UTF-16 code units."""
    return sorted(items, key=lambda s: s.encode("utf-16-be"))


def rgroups(rng: random.Random, *, unique_topics: bool, sort: bool) -> tuple[TopicPartitions, ...]:
    topics = [rstr(rng) for _ in range(rng.randint(0, 5))]
    if unique_topics:
        topics = list(dict.fromkeys(topics))
    if sort:
        topics = java_sorted(topics)
    groups = []
    for t in topics:
        parts = rng.sample(range(0, 3000), rng.randint(0 if not sort else 1, 6))
        groups.append(TopicPartitions(t, tuple(sorted(parts) if sort else parts)))
    return tuple(groups)


def random_subscription(rng: random.Random, version: int, *, canonical: bool) -> Subscription:
    topics = [rstr(rng) for _ in range(rng.randint(0, 6))]
    gen = rng.choice([-1, 0, 1, rng.randint(2, 2**31 - 1)]) if canonical else rng.randint(-(2**31), 2**31 - 1)
    return Subscription(
        version=version,
        topics=tuple(java_sorted(topics) if canonical else topics),
        user_data=rbytes(rng),
        owned_partitions=rgroups(rng, unique_topics=canonical, sort=canonical),
        generation_id=gen,
        rack_id=rng.choice([None, "", rstr(rng)]),
    )


def at_version(s: Subscription) -> Subscription:
    """What a reader gets back at s.version: fields the version lacks take their defaults."""
    v = s.version
    return Subscription(v, s.topics, s.user_data, s.owned_partitions if v >= 1 else (),
                        s.generation_id if v >= 2 else -1, s.rack_id if v >= 3 else None)


def mangle(rng: random.Random, data: bytes) -> bytes:
    """Our bytes, sometimes cut short or with junk appended (Kafka ignores trailing bytes)."""
    roll = rng.random()
    if roll < 0.2:
        return data[: rng.randint(0, len(data))]
    if roll < 0.35:
        return data + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 6)))
    return data


def check_reading(ours_decode, render, kafka_answer: str, data: bytes) -> None:
    try:
        ours = render(ours_decode(data))
    except RecordDecodeError:
        assert kafka_answer.startswith("ERR"), f"we reject {data.hex()} but Kafka reads {kafka_answer}"
        return
    assert kafka_answer == f"OK {ours}", f"bytes {data.hex()}"


def check_answers(checks: list[tuple[str, Any]], answers: list[str], encode: Callable[[T], bytes],
                  decode: Callable[[bytes], T], render: Callable[[T], str], *,
                  as_read: Callable[[T], T] = lambda item: item) -> None:
    """Kafka's answers to a subscription or assignment test: for a ("ser", content) case Kafka's
    serializer wrote our bytes and we read them back as `as_read(content)`; for a ("de", bytes) case
    Kafka read the bytes as we do (`check_reading`)."""
    for (kind, item), answer in zip(checks, answers, strict=True):
        if kind == "ser":
            ours = encode(item)
            assert answer == f"OK {ours.hex()}", f"{item}"
            assert decode(ours) == as_read(item)
        else:
            check_reading(decode, render, answer, item)


# ---- tests

def test_subscription_matches_kafka(oracle_cases: int) -> None:
    rng = random.Random(SEED)
    lines, checks = [], []
    for i in range(oracle_cases):
        # Kafka's serializer vs ours, on content in Kafka's canonical order
        sub = random_subscription(rng, i % 4, canonical=True)
        owned = flat(sub.owned_partitions)
        lines.append("\t".join(["SUB_SER", str(sub.version), l_tok(sub.topics), b_tok(sub.user_data), p_tok(owned),
                                str(sub.generation_id), s_tok(sub.rack_id)]))
        checks.append(("ser", sub))
        # Kafka's reading of our bytes, in any order and at versions up to 6 (clamped to 3)
        odd = random_subscription(rng, rng.randint(0, 6), canonical=False)
        data = mangle(rng, encode_subscription(odd))
        lines.append(f"SUB_DE\t{data.hex()}")
        checks.append(("de", data))
    check_answers(checks, _oracle(lines), encode_subscription, decode_subscription, render_subscription,
                  as_read=at_version)


def test_assignment_matches_kafka(oracle_cases: int) -> None:
    rng = random.Random(SEED + 1)
    lines, checks = [], []
    for i in range(oracle_cases):
        # Kafka groups partitions by topic in order of first appearance: unique topics round-trip
        asg = Assignment(i % 4, rgroups(rng, unique_topics=True, sort=False), rbytes(rng))
        asg = Assignment(asg.version, tuple(g for g in asg.assigned_partitions if g.partitions), asg.user_data)
        lines.append("\t".join(["ASG_SER", str(asg.version), p_tok(flat(asg.assigned_partitions)),
                                b_tok(asg.user_data)]))
        checks.append(("ser", asg))
        odd = Assignment(rng.randint(0, 6), rgroups(rng, unique_topics=False, sort=False), rbytes(rng))
        data = mangle(rng, encode_assignment(odd))
        lines.append(f"ASG_DE\t{data.hex()}")
        checks.append(("de", data))
    check_answers(checks, _oracle(lines), encode_assignment, decode_assignment, render_assignment)


def _colliding_topics(rng: random.Random, count: int, mask: int) -> list[str]:
    """`count` topic names whose HashMap bucket under `mask` is the same (forces long chains,
    the resize a chain of 8 triggers below capacity 64, and head-of-chain insertion order).

    Sets that would put 8 names in one bucket of a 64-slot table are skipped: Java turns such a
    bucket into a tree, whose order the codec does not emulate (a documented gap)."""
    while True:
        found: list[str] = []
        while len(found) < count:
            t = "c" + rstr(rng, 8)
            if spread(java_string_hashcode(t)) & mask == 5 and t not in found:
                found.append(t)
        buckets = Counter(spread(java_string_hashcode(t)) & 63 for t in found)
        if max(buckets.values()) < 8:
            return found


def _random_owned(rng: random.Random) -> list[tuple[str, int]]:
    """A member's assignment in assignor order: up to 60 topics (so the HashMap resizes), partitions
    interleaved across topics; sometimes many topics sharing one bucket."""
    if rng.random() < 0.15:
        topics = _colliding_topics(rng, rng.randint(2, 12), rng.choice([15, 31]))
    else:
        topics = [rstr(rng, 10) or "t" for _ in range(rng.choice([0, 1, 3, 12, 13, 25, 60]))]
    pairs = [(t, p) for t in dict.fromkeys(topics) for p in rng.sample(range(100), rng.randint(1, 4))]
    rng.shuffle(pairs)
    return pairs


def _sticky_junk(rng: random.Random, good: bytes) -> bytes | None:
    roll = rng.random()
    if roll < 0.3:
        return good[:-4]  # V0: the same without the generation
    if roll < 0.5:
        return good[: rng.randint(0, len(good))]
    if roll < 0.6:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 12)))
    if roll < 0.7:  # a topic name that is not valid UTF-8 (Java substitutes U+FFFD)
        return bytes.fromhex("00000001" "0003" "61ff80" "00000001" "00000002" "00000007")
    if roll < 0.8:
        return rng.choice([None, b""])
    return good + b"\x01\x02"


def test_sticky_user_data_matches_kafka(oracle_cases: int) -> None:
    rng = random.Random(SEED + 2)
    lines, checks = [], []
    for _ in range(oracle_cases):
        owned = _random_owned(rng)
        gen = rng.choice([-1, 0, 1, rng.randint(0, 2**31 - 1)])
        ours = encode_sticky_user_data(owned, generation=gen)
        lines.append(f"STICKY_SER\t{gen}\t{p_tok(owned)}")
        checks.append(("ser", ours))
        data = _sticky_junk(rng, ours)
        lines.append(f"STICKY_DE\t{b_tok(data)}")
        checks.append(("de", data))
    answers = _oracle(lines)
    for (kind, item), answer in zip(checks, answers, strict=True):
        if kind == "ser":
            assert answer == f"OK {item.hex()}"
            item_decoded = decode_sticky_user_data(item)
            assert answer and item_decoded.generation is not None
        else:
            got = decode_sticky_user_data(item)
            assert answer == f"OK parts={p_tok(flat(got.previous_assignment))}|gen={opt(got.generation)}", \
                f"{None if item is None else item.hex()}"


def test_cooperative_user_data_matches_kafka(oracle_cases: int) -> None:
    rng = random.Random(SEED + 3)
    lines, checks = [], []
    for _ in range(oracle_cases):
        gen = rng.choice([-1, 0, rng.randint(-(2**31), 2**31 - 1)])
        lines.append(f"COOP_SER\t{gen}")
        checks.append(("ser", gen))
        data = rng.choice([None, b"", encode_cooperative_user_data(gen)[: rng.randint(0, 4)],
                           encode_cooperative_user_data(gen) + b"\x09"])
        lines.append(f"COOP_DE\t{b_tok(data)}")
        checks.append(("de", data))
    answers = _oracle(lines)
    for (kind, item), answer in zip(checks, answers, strict=True):
        if kind == "ser":
            assert answer == f"OK {encode_cooperative_user_data(item).hex()}"
        else:
            assert answer == f"OK gen={opt(decode_cooperative_user_data(item))}"


def test_partition_for_matches_java(oracle_cases: int) -> None:
    rng = random.Random(SEED + 4)
    groups = ["my-group", "", "polygenelubricants", "\U0001f600", "grp-\U0001f600-中"]
    groups += [rstr(rng, 30) for _ in range(oracle_cases)]
    answers = _oracle([f"HASH\t{s_tok(g)}" for g in groups])
    for g, answer in zip(groups, answers, strict=True):
        assert answer == f"OK {java_string_hashcode(g)} {partition_for(g)}", repr(g)
