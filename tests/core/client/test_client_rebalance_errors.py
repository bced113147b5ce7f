"""The consumer's handling of failed JoinGroup and SyncGroup responses (AbstractCoordinator's
JoinGroupResponseHandler, SyncGroupResponseHandler and joinGroupIfNeeded): the rejoin reason, the
coordinator backoff, the member-id reset, and the errors that stop the consumer."""

from __future__ import annotations

import itertools

import pytest

from coordinator_audit.core.client.assignors import ASSIGNORS
from coordinator_audit.core.client.consumer import ConsumerConfig, GroupConsumer, Request
from coordinator_audit.core.protocol import (
    Errors,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

BACKOFF = 100  # ConsumerConfig.retry_backoff_ms


def consumer() -> GroupConsumer:
    cids = itertools.count(1)
    return GroupConsumer(ConsumerConfig(group_id="g", client_id="c"), [ASSIGNORS["range"]()], topics=["t"],
                         metadata=lambda: {"t": 2}, committed=lambda _t, _p: None,
                         next_correlation_id=lambda: next(cids))


def failed_join(join: Request, error: Errors, *, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(correlation_id=join.correlation_id, error_code=error, member_id=member_id)


def joined_follower(c: GroupConsumer) -> SyncGroupRequest:
    """Starts `c` and answers its JoinGroup as generation 1 with another member as leader."""
    (join,) = c.start(0)
    assert isinstance(join, JoinGroupRequest)
    out = c.handle(JoinGroupResponse(correlation_id=join.correlation_id, error_code=Errors.NONE, member_id="m-1",
                                     generation_id=1, protocol_type="consumer", protocol_name="range",
                                     leader="m-0"), 10)
    (sync,) = out
    assert isinstance(sync, SyncGroupRequest) and sync.generation_id == 1
    return sync


def assert_rejoins(c: GroupConsumer, out: list[Request], now: int, name: str, *, backoff: bool) -> None:
    """`c` answered a failed response at `now` with `out`: a rejoin for exception `name`, sent at once,
    or (coordinator errors: the coordinator is marked unknown) only once the retry backoff has passed."""
    assert c.fatal is None and c.rejoin_needed
    assert c.rejoin_reason == f"rebalance failed due to {name}"
    if backoff:
        assert out == [] and c.wake_at() == now + BACKOFF
        (again,) = c.tick(now + BACKOFF)
    else:
        (again,) = out
    assert isinstance(again, JoinGroupRequest)


# errors both handlers answer with a rejoin: (error, the exception named in the reason, coordinator backoff)
RETRIED = [
    (Errors.REBALANCE_IN_PROGRESS, "RebalanceInProgressException", False),
    (Errors.COORDINATOR_NOT_AVAILABLE, "CoordinatorNotAvailableException", True),
    (Errors.NOT_COORDINATOR, "NotCoordinatorException", True),
    (Errors.COORDINATOR_LOAD_IN_PROGRESS, "CoordinatorLoadInProgressException", True),
]


@pytest.mark.parametrize(("error", "name", "backoff"),
                         [*RETRIED, (Errors.ILLEGAL_GENERATION, "IllegalGenerationException", False)])
def test_join_failure_requests_a_rejoin(error: Errors, name: str, backoff: bool) -> None:
    c = consumer()
    (join,) = c.start(0)
    assert_rejoins(c, c.handle(failed_join(join, error), 5), 5, name, backoff=backoff)


def test_join_unknown_member_resets_the_member_id_then_rejoins() -> None:
    c = consumer()
    (first,) = c.start(0)
    (join,) = c.handle(failed_join(first, Errors.MEMBER_ID_REQUIRED, member_id="m-1"), 5)
    assert isinstance(join, JoinGroupRequest) and join.member_id == "m-1"
    (again,) = c.handle(failed_join(join, Errors.UNKNOWN_MEMBER_ID), 30)
    assert c.rejoin_reason == "rebalance failed due to UnknownMemberIdException"
    assert c.generation.generation_id == -1 and c.generation.member_id == ""
    assert isinstance(again, JoinGroupRequest) and again.member_id == ""


def test_join_other_error_is_fatal() -> None:
    c = consumer()
    (join,) = c.start(0)
    assert c.handle(failed_join(join, Errors.GROUP_AUTHORIZATION_FAILED), 5) == []
    assert c.fatal == "JoinGroup failed: GROUP_AUTHORIZATION_FAILED"


@pytest.mark.parametrize(("error", "name", "backoff"), RETRIED)
def test_sync_failure_requests_a_rejoin(error: Errors, name: str, backoff: bool) -> None:
    c = consumer()
    sync = joined_follower(c)
    out = c.handle(SyncGroupResponse(correlation_id=sync.correlation_id, error_code=error), 20)
    assert c.generation.member_id == "m-1"  # kept: only UNKNOWN_MEMBER_ID/ILLEGAL_GENERATION reset state
    assert_rejoins(c, out, 20, name, backoff=backoff)


@pytest.mark.parametrize(("error", "name", "member_id"), [
    (Errors.UNKNOWN_MEMBER_ID, "UnknownMemberIdException", ""),
    (Errors.ILLEGAL_GENERATION, "IllegalGenerationException", "m-1"),
])
def test_sync_generation_errors_reset_state(error: Errors, name: str, member_id: str) -> None:
    c = consumer()
    sync = joined_follower(c)
    (again,) = c.handle(SyncGroupResponse(correlation_id=sync.correlation_id, error_code=error), 20)
    assert c.rejoin_reason == f"rebalance failed due to {name}"
    assert c.generation.generation_id == -1 and c.generation.member_id == member_id
    assert isinstance(again, JoinGroupRequest) and again.member_id == member_id


def test_sync_fenced_and_other_errors_are_fatal() -> None:
    for error, text in [(Errors.FENCED_INSTANCE_ID, "SyncGroup failed: FENCED_INSTANCE_ID"),
                        (Errors.GROUP_AUTHORIZATION_FAILED, "SyncGroup failed: GROUP_AUTHORIZATION_FAILED")]:
        c = consumer()
        sync = joined_follower(c)
        assert c.handle(SyncGroupResponse(correlation_id=sync.correlation_id, error_code=error), 20) == []
        assert c.fatal == text
