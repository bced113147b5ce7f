"""A deterministic port of Kafka's classic group coordinator (GroupMetadataManager and ClassicGroup of the
group-coordinator module; core's Scala GroupCoordinator where the two differ).

Split by concern: `config` (broker settings, flavour), `state` (states and transitions), `group`
(group and member state), `hashorder` (Java/Scala hash-map iteration order), `join`, `sync`,
`heartbeat`, `leave`, `commit` (one module per request), `rebalance` (shared procedures and timer
handlers), `timers`, `records_out` (records written), `load` (replay, load completion, unload),
`expiration` (offset retention, DeleteGroups), `logs` (server.log lines), `coordinator` (the facade).
"""

from __future__ import annotations

from coordinator_audit.core.errors import IllegalStateTransition

from .config import CoordinatorConfig, Flavor
from .coordinator import CoordinatorResult, GroupCoordinator
from .runtime import CoordinatorStatus, DeterministicMemberIds
from .state import VALID_PREVIOUS_STATES, GroupState
from .timers import Timer
from .views import GroupView, MemberView, OffsetView

__all__ = [
    "VALID_PREVIOUS_STATES",
    "CoordinatorConfig",
    "CoordinatorResult",
    "CoordinatorStatus",
    "DeterministicMemberIds",
    "Flavor",
    "GroupCoordinator",
    "GroupState",
    "GroupView",
    "IllegalStateTransition",
    "MemberView",
    "OffsetView",
    "Timer",
]
