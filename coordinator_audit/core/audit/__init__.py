"""The audit: one group's `__consumer_offsets` records in, the rows of six tables out.

Entry points: `audit_group(records)` for a whole group in one call, `GroupAuditor` for streaming in
several batches, reading the counts, and saving/resuming state (`to_dict`/`from_dict`),
`GroupReplay` for one group's part of a run in a chain of runs (fresh, resumed from a saved state or
carried as saved; its rows sorted into new rows and rows continuing an earlier run's). Row types
are in `coordinator_audit.core.audit.rows`; the offset-commit rules are `OffsetSummary`'s
(`coordinator_audit.core.audit.offsets`). This module is the audit's public face: code outside the
package imports from here.
"""

from __future__ import annotations

from coordinator_audit.core.audit.auditor import (
    NO_COUNTS,
    STATE_FORMAT,
    AtRest,
    AuditCounts,
    GroupAuditor,
    audit_group,
)
from coordinator_audit.core.audit.causes import CAUSE_PRIORITY, CAUSES
from coordinator_audit.core.audit.consumer import CONSUMER_CAUSES, CONSUMER_VIOLATION_KINDS
from coordinator_audit.core.audit.observer import HistoryGap
from coordinator_audit.core.audit.offsets import OffsetSummary, Regression
from coordinator_audit.core.audit.replayer import GroupReplay, ResumeMode, SavedGroup
from coordinator_audit.core.audit.rows import (
    ROW_TYPES,
    TABLES,
    AssignmentRow,
    AssignmentRun,
    AuditRow,
    GenerationRow,
    OffsetCommitRow,
    QuarantineRow,
    RebalanceCauseRow,
    ViolationRow,
    table_of,
)
from coordinator_audit.core.audit.share_streams import SHARE_STREAMS_CAUSES, SHARE_STREAMS_VIOLATION_KINDS
from coordinator_audit.core.audit.snapshot import GroupSnapshot
from coordinator_audit.core.audit.violations import VIOLATION_KINDS

__all__ = [
    "CAUSES",
    "CAUSE_PRIORITY",
    "CONSUMER_CAUSES",
    "CONSUMER_VIOLATION_KINDS",
    "NO_COUNTS",
    "ROW_TYPES",
    "SHARE_STREAMS_CAUSES",
    "SHARE_STREAMS_VIOLATION_KINDS",
    "STATE_FORMAT",
    "TABLES",
    "VIOLATION_KINDS",
    "AssignmentRow",
    "AssignmentRun",
    "AtRest",
    "AuditCounts",
    "AuditRow",
    "GenerationRow",
    "GroupAuditor",
    "GroupReplay",
    "GroupSnapshot",
    "HistoryGap",
    "OffsetCommitRow",
    "OffsetSummary",
    "QuarantineRow",
    "RebalanceCauseRow",
    "Regression",
    "ResumeMode",
    "SavedGroup",
    "ViolationRow",
    "audit_group",
    "table_of",
]
