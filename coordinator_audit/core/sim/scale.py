"""Scale mode: many groups and tens of millions of offset-commit records, fast.

Group metadata comes from the real thing: each group's membership (start, and for a few groups a
rebalance storm) runs through the scenario runner and the coordinator port. Offset commits, which
dominate real `__consumer_offsets` traffic, take a fast path: key bytes are built once per
(group, topic, partition) and values are `struct`-packed OffsetCommitValue v3 records.

`generate(config, partitions=...)` yields column batches per `__consumer_offsets` partition with
contiguous offsets and non-decreasing timestamps; split the partitions over processes to use more
cores (each partition is produced by one caller only). Deterministic given `config.seed`.
"""

from __future__ import annotations

import heapq
import random
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.core.sim.port import partition_for
from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.core.sim.scenario import Scenario

_VALUE_V3 = struct.Struct(">hqihq")  # version 3, offset, leader epoch, metadata "" (len 0), commit timestamp


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey (record type 1, OffsetCommitKey.json)."""
    g, t = group.encode(), topic.encode()
    return struct.pack(f">hh{len(g)}sh{len(t)}si", 1, len(g), g, len(t), t, partition)


def offset_commit_value(offset: int, commit_ms: int, leader_epoch: int = 0) -> bytes:
    """OffsetCommitValue v3 (OffsetCommitValue.json) with empty metadata."""
    return _VALUE_V3.pack(3, offset, leader_epoch, 0, commit_ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleConfig:
    records: int = 20_000_000
    groups: int = 5000
    seed: int = 0
    start_ms: int = 1_700_000_000_000
    duration_ms: int = 86_400_000
    offsets_partitions: int = 50
    static_fraction: float = 0.2
    cooperative_fraction: float = 0.3
    storm_fraction: float = 0.01
    max_members: int = 200
    records_per_sec: int = 20

    def __post_init__(self) -> None:
        for name in ("records", "groups", "duration_ms", "offsets_partitions", "max_members"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ScaleConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("static_fraction", "cooperative_fraction", "storm_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"ScaleConfig.{name} must be in [0, 1], got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class GroupPlan:
    group_id: str
    partition: int
    members: int
    topics: tuple[tuple[str, int], ...]
    static: bool
    cooperative: bool
    storm: bool
    offset_ms: int  # when the group starts, after the scale run's start

    @property
    def partitions(self) -> int:
        return sum(n for _, n in self.topics)


@dataclass(slots=True)
class ScaleBatch:
    """Column lists of one batch of records (value None = tombstone)."""

    partition: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    timestamp_ms: list[int] = field(default_factory=list)
    key: list[bytes] = field(default_factory=list)
    value: list[bytes | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)


def _members(rng: random.Random, cap: int) -> int:
    r = rng.random()
    if r < 0.6:
        n = rng.randint(1, 5)
    elif r < 0.9:
        n = rng.randint(6, 30)
    elif r < 0.99:
        n = rng.randint(31, 100)
    else:
        n = rng.randint(101, 200)
    return min(n, cap)


def plan_groups(config: ScaleConfig) -> list[GroupPlan]:
    """The groups of a scale run: 1-200 members on 1-5 topics of 1-64 partitions, some static, some
    cooperative, a few with rebalance storms."""
    rng = random.Random(f"scale-{config.seed}")
    plans = []
    for i in range(config.groups):
        gid = f"scale-group-{i:06d}"
        topics = tuple((f"topic-{i:06d}-{t}", rng.randint(1, 64)) for t in range(rng.randint(1, 5)))
        plans.append(GroupPlan(gid, partition_for(gid, config.offsets_partitions), _members(rng, config.max_members),
                               topics, rng.random() < config.static_fraction,
                               rng.random() < config.cooperative_fraction, rng.random() < config.storm_fraction,
                               rng.randint(0, max(0, config.duration_ms // 10))))
    return plans


def metadata_scenario(plan: GroupPlan, config: ScaleConfig) -> Scenario:
    """The membership part of one group as a scenario (commits disabled: the fast path makes them)."""
    names = [f"m{j}" for j in range(plan.members)]
    timeline: list[dict[str, object]] = [{"at": 0, "do": "start", "consumers": names}]
    end = 10_000
    if plan.storm:
        for k in range(6):
            timeline.append({"at": 12_000 + 5_000 * k, "do": "restart", "consumer": names[k % len(names)],
                             "crash": k % 2 == 0, "downtime_ms": 500})
        end = 60_000
    data = {
        "name": plan.group_id, "group": plan.group_id, "seed": config.seed,
        "start_ms": config.start_ms + plan.offset_ms, "offsets_partitions": config.offsets_partitions,
        "topics": dict(plan.topics),
        "defaults": {"assignors": ["cooperative-sticky"] if plan.cooperative else ["range", "cooperative-sticky"],
                     "static": plan.static, "auto_commit": False, "session_timeout_ms": 10_000},
        "consumers": [{"name": n} for n in names], "timeline": timeline, "end_ms": end,
    }
    return Scenario.from_dict(data)


def _group_stream(plan: GroupPlan, config: ScaleConfig, rounds: int
                  ) -> Iterator[tuple[int, list[tuple[bytes, bytes | None]]]]:
    """(timestamp, records) chunks of one group: its metadata records, then `rounds` commit rounds."""
    result = run_scenario(metadata_scenario(plan, config))
    for r in result.full_records:
        yield r.timestamp_ms, [(r.key, r.value)]
    phase_end = result.scenario.start_ms + result.scenario.end_ms
    keys = [offset_commit_key(plan.group_id, t, p) for t, n in plan.topics for p in range(n)]
    remaining = config.start_ms + config.duration_ms - phase_end
    step = max(1, remaining // max(1, rounds))
    rate = config.records_per_sec * step // 1000 or 1
    pack = _VALUE_V3.pack
    for k in range(rounds):
        ts = phase_end + k * step
        off = k * rate
        yield ts, [(k, pack(3, off + i, 0, 0, ts)) for i, k in enumerate(keys)]


def commit_rounds(plans: Iterable[GroupPlan], config: ScaleConfig) -> int:
    total = sum(p.partitions for p in plans)
    return max(1, config.records // max(1, total))


def generate(config: ScaleConfig, *, partitions: Iterable[int] | None = None, batch_rows: int = 65_536,
             plans: list[GroupPlan] | None = None) -> Iterator[ScaleBatch]:
    """Yields the records of the chosen `__consumer_offsets` partitions (all by default), partition by
    partition, in batches of about `batch_rows`."""
    plans = plans if plans is not None else plan_groups(config)
    rounds = commit_rounds(plans, config)
    wanted = sorted(set(range(config.offsets_partitions) if partitions is None else partitions))
    batch = ScaleBatch()
    for part in wanted:
        streams = [_group_stream(p, config, rounds) for p in plans if p.partition == part]
        offset = 0
        tagged = (((ts, gi, recs) for ts, recs in s) for gi, s in enumerate(streams))
        for ts, _, recs in heapq.merge(*tagged, key=lambda x: (x[0], x[1])):
            n = len(recs)
            batch.partition.extend([part] * n)
            batch.offset.extend(range(offset, offset + n))
            batch.timestamp_ms.extend([ts] * n)
            for k, v in recs:
                batch.key.append(k)
                batch.value.append(v)
            offset += n
            if len(batch) >= batch_rows:
                yield batch
                batch = ScaleBatch()
    if len(batch):
        yield batch
