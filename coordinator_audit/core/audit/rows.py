"""The audit's output rows: one frozen dataclass per Delta table, fields 1:1 with the table's columns.

Annotations are kept to plain types (int, str, bool, bytes, `X | None`, `tuple[str, ...]`) because
`coordinator_audit/udfs/schemas.py` derives the Spark schema from them. Times are epoch milliseconds (ints), as in
the Kafka records; the Spark layer may present them as timestamps.

Columns beyond the issue's lists (all documented on the class): record_timestamp / source
partition and offset on every table (so each row points at the log), `ended_by_offset`,
`static_replacements`, `rebalance_protocol` and `coordinator_flavour` on generations; `subscription_generation`,
`valid_from`, `valid_to` (ownership intervals), `session_timeout_ms` and `rebalance_timeout_ms` on assignments;
`is_primary` on causes; the window columns and `tombstones` on offset_commits; `replayed` and `key_type` on
quarantine.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from coordinator_audit.core.records_fast import fast_constructor

__all__ = [
    "ROW_TYPES",
    "TABLES",
    "AssignmentRow",
    "AssignmentRun",
    "AuditRow",
    "GenerationRow",
    "OffsetCommitRow",
    "QuarantineRow",
    "RebalanceCauseRow",
    "ViolationRow",
    "iso_ms",
    "table_of",
]


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as UTC ISO 8601 with milliseconds (``2026-11-21T23:43:28.080Z``): how
    the rows' text (details, evidence) names a time."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True, slots=True)
class GenerationRow:
    """One generation of a group, as the log persisted it (an assignment, empty or creation record:
    W1, W2 or W5 in docs/architecture.md).

    Emitted when the generation ends (`ended_at` set), or by `finish()` while it is still current
    (`ended_at` None; a later run supersedes that row, keyed by group/source_partition/source_offset).
    Replacement records (W3, same-generation static replacements) update `leader_id` and count in `static_replacements`;
    the other columns describe the record that opened the generation.
    """

    group_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    member_count: int
    static_member_count: int
    state: str
    """"Stable" when the record lists members, else "Empty" (Kafka's load path, `GroupMetadataManager#replay`)."""
    state_timestamp: int | None
    """currentStateTimestamp of the opening record (ms); None when absent (value v0/v1) or -1."""
    record_timestamp: int
    sync_latency_ms: int | None
    """record_timestamp - state_timestamp: for an assignment record (W1), the time from join completion to the leader's sync."""
    ended_at: int | None
    """Timestamp of the record (next generation or tombstone) that replaced this generation."""
    lifetime_ms: int | None
    """ended_at - record_timestamp."""
    source_partition: int
    source_offset: int
    missing_generations: int | None
    """Generation ids skipped before this one (aborted join phases); None when unknowable (history start)."""
    ended_by_offset: int | None
    """Log offset of the record that ended the generation (None while current)."""
    static_replacements: int
    """How many replacement records (W3: same-generation static replacements) came in this generation."""
    rebalance_protocol: str | None
    """"COOPERATIVE" when some member reported owned partitions at join, "EAGER" for an eager-only
    assignor (range, roundrobin, sticky), else None (cannot tell from the record)."""
    coordinator_flavour: str
    """Which coordinator wrote the group's log, as inferred from its records when this generation
    opened: "java" (Kafka 4.x: a generation-0 creation record, or a generation-0 group's tombstone),
    "scala" (<= 3.x: a generation 1 opens the group's life with no creation record before it),
    "unknown" (no evidence yet). A consumer group's generations are "java"."""
    group_type: str
    """"classic" (a GroupMetadata record, key type 2, opened the generation) or "consumer" (a KIP-848
    consumer group's epoch: its ConsumerGroupMetadata record, key type 3, or the epoch a 4.3+ broker
    starts a group at without writing it). For a consumer group: `generation_id` is the group epoch,
    `protocol_type` "consumer", `protocol_name` the server assignor the members prefer (None: the
    broker's default), `state` the broker's group state the epoch last had: "Empty" (no member),
    "Stable" (reached, `reached_at`), "Reconciling" (target assignment computed, members not all at it),
    "Assigning" (no target assignment for the epoch); `leader_id`, `state_timestamp`,
    `sync_latency_ms` and `rebalance_protocol` None."""
    assignment_epoch: int | None
    """Consumer groups: the epoch of the target assignment (key type 6) computed for this group epoch
    (None: none was written while the epoch lasted). None for classic generations."""
    assignment_timestamp: int | None
    """Consumer groups: the timestamp of that target-assignment record."""
    reached_at: int | None
    """Consumer groups: the timestamp of the record at which the group reached this epoch: every
    member's current assignment (key type 8) at the target assignment's epoch and STABLE (the
    broker's `Stable` state). None while reconciling, or when the epoch ended first."""
    reconciliation_ms: int | None
    """reached_at - record_timestamp: how long the group took from the epoch bump to stable."""


@dataclass(frozen=True, slots=True)
class AssignmentRow:
    """One partition assigned to one member in one generation, with its ownership interval.

    `valid_from` is the timestamp of the record that persisted the assignment (the assignment
    record, W1, or the replacement record, W3, that handed it to a replacing static member); `valid_to` that of the record that replaced it (None while
    current). This is ownership as the log proves it: an EAGER consumer actually stops a little
    earlier (it revokes before rejoining), a COOPERATIVE one holds a kept partition across
    generations (consecutive rows for the same member and partition then abut).
    """

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    topic: str
    partition: int
    subscription_version: int | None
    owned_before: bool
    """The partition was in this member's Subscription.ownedPartitions when it joined this generation."""
    user_data_generation: int | None
    """Generation carried by the assignor's userData (sticky V1, cooperative-sticky), where present."""
    subscription_generation: int | None
    """Subscription v2+ GenerationId (-1 read as None)."""
    valid_from: int
    valid_to: int | None
    source_partition: int
    source_offset: int
    group_type: str
    """"classic" (from a GroupMetadata record's embedded assignment) or "consumer" (a KIP-848 member's
    current assignment, key type 8: the partitions it owns, `partitions_pending_revocation`
    included until it releases them). For a consumer member, `generation_id` is the member epoch of
    the interval (a kept partition starts a new row when the member epoch advances, `owned_before`
    True); `client_id` / `client_host` from its member record (key type 5); the subscription and
    userData columns None."""
    topic_id: str | None
    """Consumer groups: the topic id the broker's record names (Kafka's base64 form); `topic` is its
    name when the log maps it (an OffsetCommit value v4 of the group carries both), else this id."""
    pending_revocation_at: int | None
    """Consumer groups: when the partition was put in the member's pending revocations during the
    interval (the member still owns it until a later record drops it), else None."""
    session_timeout_ms: int | None
    """Classic groups: the member's session timeout as the record persisted it (the JoinGroup's
    SessionTimeoutMs: the consumer's session.timeout.ms). None for consumer groups (KIP-848 keeps
    the session timeout per group, not per member)."""
    rebalance_timeout_ms: int | None
    """Classic groups: the member's rebalance timeout as the record persisted it (the JoinGroup's
    RebalanceTimeoutMs: the Java consumer's max.poll.interval.ms); None when the record does not
    carry it (GroupMetadata value v0) and for consumer groups."""


@dataclass(frozen=True, slots=True)
class RebalanceCauseRow:
    """One reason a generation (or a same-generation change) came about; a generation may have several.

    Exactly one row per generation carries `is_primary` True: the event the coordinator handled
    first (the decision table in `coordinator_audit.core.audit.causes`).
    """

    group_id: str
    generation_id: int | None
    previous_generation_id: int | None
    cause: str
    member_id: str | None
    group_instance_id: str | None
    detail: str
    evidence: str
    is_primary: bool
    record_timestamp: int
    source_partition: int
    source_offset: int


@dataclass(frozen=True, slots=True)
class ViolationRow:
    """A broken guarantee of the protocol, found in the log."""

    group_id: str
    generation_id: int | None
    kind: str
    topic: str | None
    partition: int | None
    member_ids: tuple[str, ...]
    detail: str
    evidence: str
    record_timestamp: int
    source_partition: int
    source_offset: int


@dataclass(frozen=True, slots=True)
class OffsetCommitRow:
    """Summary of the commits of one topic-partition within one generation window.

    A window runs from one GroupMetadata record (value or tombstone) of the group to the next; see
    `coordinator_audit.core.audit.offsets.OffsetSummary` for the rules, which the Spark job's offset path follows too.
    "first"/"last" mean first/last in log order.
    """

    group_id: str
    topic: str
    partition: int
    generation_id: int | None
    window_state: str | None
    """"Stable"/"Empty" (the opening record has members / has none), "Dead" (opened by a tombstone),
    None (before the first GroupMetadata record of the audited history)."""
    window_start_offset: int | None
    """Log offset of the GroupMetadata record that opened the window (None: before the first one)."""
    window_end_offset: int | None
    """Log offset of the record that closed it (None while the window is open)."""
    commits: int
    tombstones: int
    first_offset: int | None
    last_offset: int | None
    first_commit_timestamp: int | None
    last_commit_timestamp: int | None
    regressions: int
    source_partition: int
    first_source_offset: int
    last_source_offset: int


@dataclass(frozen=True, slots=True)
class QuarantineRow:
    """A record that did not decode or broke the load path's invariants, kept verbatim.

    `replayed` is False for records that were set aside (counted as quarantined), True for records
    that were replayed but had an embedded part (a member's subscription or assignment bytes) that
    did not decode; the error text names which.

    Lines of the input that are no readable record (a JSON line that does not parse, a key that is
    not valid hex, a record without an offset; rejected by the job's reader, never replayed) are
    quarantined too: the fields that could be read are set, and `input_file`, `input_line` (from 1)
    and `input_text` (the line) say where and what; they are None for the audit's own rows.
    """

    group_id: str | None
    partition: int | None
    offset: int | None
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    error: str
    replayed: bool
    key_type: int | None
    input_file: str | None = None
    input_line: int | None = None
    input_text: str | None = None


_TABLES: dict[type, str] = {
    GenerationRow: "generations",
    AssignmentRow: "assignments",
    RebalanceCauseRow: "rebalance_causes",
    ViolationRow: "violations",
    OffsetCommitRow: "offset_commits",
    QuarantineRow: "quarantine",
}

TABLES: tuple[str, ...] = tuple(_TABLES.values())
ROW_TYPES: dict[str, type] = {name: cls for cls, name in _TABLES.items()}


@dataclass(frozen=True, slots=True)
class AssignmentRun:
    """One member's `AssignmentRow`s of one interval, as one object: what the rows share once, and
    per row its topic, partition and `owned_before` (`rows()` are the rows themselves, in order).

    What a `GroupAuditor(assignment_runs=True)` emits instead of the rows: a member assigned a
    hundred partitions is one object, which a columnar consumer (the Spark job's replay) turns into
    its columns without building a row object per partition."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    subscription_version: int | None
    user_data_generation: int | None
    subscription_generation: int | None
    valid_from: int
    valid_to: int | None
    source_partition: int
    source_offset: int
    groups: tuple[tuple[str, tuple[int, ...]], ...]
    """(topic, partitions) in row order (every partition its own row)."""
    owned_before: bool | tuple[bool, ...]
    """The same for every row, or one per row."""
    size: int
    """The number of rows."""
    group_type: str = "classic"
    topic_id: str | None = None
    pending_revocation_at: int | None = None
    session_timeout_ms: int | None = None
    rebalance_timeout_ms: int | None = None
    """As the `AssignmentRow` columns (every row of a run shares them)."""

    def rows(self) -> list[AssignmentRow]:
        """The run's rows (what a `GroupAuditor` without runs emits)."""
        group, gen, member, instance = self.group_id, self.generation_id, self.member_id, self.group_instance_id
        client, host, version = self.client_id, self.client_host, self.subscription_version
        ud_gen, sub_gen, start, end = self.user_data_generation, self.subscription_generation, self.valid_from, self.valid_to
        p, o, make, owned = self.source_partition, self.source_offset, make_assignment_row, self.owned_before
        kind, topic_id, pending = self.group_type, self.topic_id, self.pending_revocation_at
        session, rebalance = self.session_timeout_ms, self.rebalance_timeout_ms
        if isinstance(owned, bool):
            return [make(group, gen, member, instance, client, host, t, partition, version, owned, ud_gen, sub_gen,
                         start, end, p, o, kind, topic_id, pending, session, rebalance)
                    for t, partitions in self.groups for partition in partitions]
        tps = [(t, partition) for t, partitions in self.groups for partition in partitions]
        return [make(group, gen, member, instance, client, host, t, partition, version, flag, ud_gen, sub_gen,
                     start, end, p, o, kind, topic_id, pending, session, rebalance)
                for (t, partition), flag in zip(tps, owned, strict=True)]


AuditRow = (GenerationRow | AssignmentRow | RebalanceCauseRow | ViolationRow | OffsetCommitRow | QuarantineRow
            | AssignmentRun)
"""What an audit emits: a row of one of the six tables, or (`GroupAuditor(assignment_runs=True)`
only) an `AssignmentRun` of several `assignments` rows."""

_TABLE_OF: dict[type, str] = {**_TABLES, AssignmentRun: "assignments"}


def table_of(row: AuditRow) -> str:
    """The Delta table a row belongs to (e.g. "generations")."""
    return _TABLE_OF[type(row)]


make_assignment_row = fast_constructor(AssignmentRow)
make_assignment_run = fast_constructor(AssignmentRun)
make_cause_row = fast_constructor(RebalanceCauseRow)
make_generation_row = fast_constructor(GenerationRow)
make_offset_commit_row = fast_constructor(OffsetCommitRow)
