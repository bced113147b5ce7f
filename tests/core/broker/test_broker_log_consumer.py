"""The broker's words for KIP-848 consumer groups (`coordinator_audit.core.broker_log`): the real Kafka
4.4.0 broker's server.log lines of the sample's two groups, read against what the driver did and the
audit's causes (which cannot tell a fence from a leave)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_audit.core.broker_log import BrokerLogError, broker_account, parse_lines, read_server_log
from tests.core.audit.test_audit_consumer_groups import RECORDS, REGEX, UNIFORM, _audit, _truth

LOG = Path(__file__).resolve().parents[1] / "codec" / "data" / "real_broker_4_4_0_kip848.server_log.txt"


def _account() -> dict[tuple[str, int], object]:
    return {(g.group_id, g.generation_id): g for g in broker_account(read_server_log(LOG))}


def test_each_epoch_bump_names_the_member_lines_that_caused_it() -> None:
    """Every epoch of both groups is in the account; a kill is the broker's session-expiry fence, a
    close its "left the consumer group", a start its "joins the consumer group", each naming the
    member the audit's cause names; a regex refresh bump has no member line."""
    account = _account()
    for group in (UNIFORM, REGEX):
        t = _audit(RECORDS[group])
        epochs = {g.generation_id for g in t["generations"]} - {1}  # a 4.3+ broker logs no bump for epoch 1
        assert {e for g, e in account if g == group} == epochs
        who = {m["member_id"]: m["consumer"] for m in _truth(group)["members_seen"]}
        for c in t["rebalance_causes"]:
            if c.is_primary and c.cause in ("member_joined", "member_left_or_expired"):
                b = account[(group, c.generation_id)]
                assert c.member_id in b.broker_reason and b.broker_state == "consumer"  # type: ignore[attr-defined]
                assert b.rebalance_started_at <= c.record_timestamp + 5  # type: ignore[attr-defined]
                if c.cause == "member_joined":
                    assert b.broker_cause == "member_joined"  # type: ignore[attr-defined]
                    continue
                action = next(a["action"] for a in _truth(group)["actions"]
                              if a.get("consumer") == who[c.member_id] and a["action"] in ("kill", "close"))
                want = "member_session_expired" if action == "kill" else "member_left"
                assert b.broker_cause == want, (group, c.generation_id, b)  # type: ignore[attr-defined]
    killed = [b for b in account.values() if b.broker_cause == "member_session_expired"]  # type: ignore[attr-defined]
    assert len(killed) == 1 and "fenced from the group because the member session expired" in killed[0].broker_reason
    regex_only = [b for (g, _), b in account.items() if g == REGEX and b.broker_reason is None]  # type: ignore[attr-defined]
    assert regex_only and all(b.broker_cause is None for b in regex_only)  # type: ignore[attr-defined]


def test_other_fences_a_static_member_s_leave_and_a_bad_bump_line() -> None:
    prefix = "[2026-11-29 00:18:23,453] INFO [GroupCoordinator id=1 topic=__consumer_offsets partition=3] [GroupId g] "
    suffix = " (org.apache.kafka.coordinator.group.GroupMetadataManager)"
    lines = [prefix.replace("23,453", f"2{k},000") + body + suffix for k, body in enumerate([
        "Member a fenced from the group because it failed to transition from epoch 4 within 45000ms.",
        "Bumped group epoch to 5.",
        "Static Member b with instance id i-1 temporarily left the consumer group.",
        "Static Member c with instance id i-2 left the consumer group.",
        "Bumped group epoch to 6 with metadata hash 12.",
    ])]
    five, six = broker_account(parse_lines(lines))
    assert (five.generation_id, five.broker_cause) == (5, "member_rebalance_timeout")
    assert (six.generation_id, six.broker_cause) == (6, "member_left")
    assert six.broker_reason == "Static Member c with instance id i-2 left the consumer group."
    with pytest.raises(BrokerLogError, match=r":1: a 'Bumped group epoch' line does not parse"):
        broker_account(parse_lines([prefix + "Bumped group epoch to five." + suffix]))
