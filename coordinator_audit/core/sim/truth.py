"""Ground truth of a simulated run: per generation, the true rebalance causes and the planted violations.

Vocabulary is the audit's word for word, so a test can compare audit rows with truth rows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from coordinator_audit.core.errors import ScenarioError

CAUSES = (
    "history_start", "group_created", "member_joined", "member_left_or_expired", "static_member_replaced",
    "static_member_rejoined_new_generation", "subscription_changed", "assignor_changed",
    "cooperative_follow_up", "metadata_or_leader_rejoin", "group_emptied", "group_deleted",
    "aborted_generations",
)
VIOLATIONS = (
    "duplicate_assignment", "unsafe_cooperative_move", "stale_ownership_claim",
    "assignment_outside_subscription", "static_replacement_changed_assignment", "offset_regression",
)


@dataclass(frozen=True, slots=True)
class CauseRow:
    generation_id: int
    previous_generation_id: int | None
    cause: str
    member_id: str | None = None
    group_instance_id: str | None = None
    detail: str = ""
    is_primary: bool = False
    """The event that started the generation's round (one per generation; see `TruthTracker`)."""

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise ScenarioError(f"unknown cause {self.cause!r} (known: {', '.join(CAUSES)})")


@dataclass(frozen=True, slots=True)
class ViolationRow:
    generation_id: int
    kind: str
    topic: str | None = None
    partition: int | None = None
    member_ids: tuple[str, ...] = ()
    detail: str = ""
    source_offsets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in VIOLATIONS:
            raise ScenarioError(f"unknown violation kind {self.kind!r} (known: {', '.join(VIOLATIONS)})")


@dataclass(slots=True)
class GenerationTruth:
    """One GroupMetadata record of the log as the simulator knows it (W1/W2/W3 or the tombstone)."""

    generation_id: int
    state: str  # "Stable", "Empty" or "Dead" (tombstone)
    protocol_name: str | None
    leader_id: str | None
    members: list[dict[str, Any]]
    source_partition: int
    source_offset: int
    record_timestamp: int
    kind: str  # "created" (the Java coordinator's generation-0 record), "rebalance", "static_replacement",
    # "empty", "tombstone"


@dataclass(slots=True)
class Truth:
    scenario: str
    group: str
    seed: int
    consumer_offsets_partition: int
    description: str = ""
    dropped_prefix: int = 0
    generations: list[GenerationTruth] = field(default_factory=list)
    causes: list[CauseRow] = field(default_factory=list)
    violations: list[ViolationRow] = field(default_factory=list)
    planted: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    offset_commit_records: int = 0
    coordinator_flavour: str = "java"

    def primary_by_generation(self) -> dict[int, CauseRow]:
        """generation id -> its primary cause row."""
        return {c.generation_id: c for c in self.causes if c.is_primary}

    def causes_by_generation(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for c in self.causes:
            out.setdefault(c.generation_id, [])
            if c.cause not in out[c.generation_id]:
                out[c.generation_id].append(c.cause)
        return out

    def violation_kinds(self) -> set[str]:
        return {v.kind for v in self.violations}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["causes_by_generation"] = {str(k): v for k, v in sorted(self.causes_by_generation().items())}
        return d

    def to_json(self) -> str:
        """Stable text: same run, same bytes."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True, default=_default) + "\n"

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Truth:
        t = Truth(scenario=d["scenario"], group=d["group"], seed=d["seed"],
                  consumer_offsets_partition=d["consumer_offsets_partition"],
                  description=d.get("description", ""), dropped_prefix=d.get("dropped_prefix", 0),
                  records=d.get("records", 0), offset_commit_records=d.get("offset_commit_records", 0),
                  coordinator_flavour=d.get("coordinator_flavour", "java"))
        t.generations = [GenerationTruth(**g) for g in d.get("generations", [])]
        t.causes = [CauseRow(**c) for c in d.get("causes", [])]
        t.violations = [ViolationRow(**{**v, "member_ids": tuple(v["member_ids"]),
                                        "source_offsets": tuple(v.get("source_offsets", ()))})
                        for v in d.get("violations", [])]
        t.planted = list(d.get("planted", []))
        t.events = list(d.get("events", []))
        return t


def _default(o: Any) -> Any:
    if isinstance(o, set | frozenset):
        return sorted(o)
    if isinstance(o, bytes):
        return o.hex()
    raise TypeError(f"not JSON-serialisable: {o!r}")
