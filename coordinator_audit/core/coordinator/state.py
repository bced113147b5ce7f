"""Group states and the valid-previous-state table (ClassicGroupState / GroupState#validPreviousStates)."""

from __future__ import annotations

from enum import Enum

from coordinator_audit.core.errors import IllegalStateTransition


class GroupState(Enum):
    """Follows ClassicGroupState / GroupState: valued with Kafka's display names."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    EMPTY: frozenset({PREPARING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
}


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    """Follows ClassicGroup#assertValidTransition: raises IllegalStateTransition on a forbidden move."""
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalStateTransition(group_id, current, target)
