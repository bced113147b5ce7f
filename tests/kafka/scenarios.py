"""Consumer-group scenarios run by real consumers against a real broker; each returns its ground truth.

Truth of a group: `members` (every consumer's events, as its rebalance listener saw them) and
`steps` (what the scenario did, in order, with the generation the group settled in after it).
The scenarios run in parallel threads, one group each, so the tier takes about as long as the
longest scenario.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from tests.kafka.cluster import Broker, Member, settle

Truth = dict[str, Any]

TOPICS = {"eager-a": 6, "coop-a": 6, "static-a": 6, "sub-a": 2, "sub-b": 2, "poll-a": 4}


class Scenario:
    """Collects a group's members and steps; `finish()` stops every member left running."""

    def __init__(self, broker: Broker, group: str, name: str) -> None:
        self.broker, self.group, self.name = broker, group, name
        self.members: list[Member] = []
        self.steps: list[dict[str, Any]] = []

    def member(self, client_id: str, topics: str, **kw: Any) -> Member:
        m = Member(self.broker, self.group, client_id, topics, **kw)
        self.members.append(m)
        return m

    def step(self, action: str, live: list[Member], **kw: Any) -> int:
        """Waits until `live` settle in a generation after the previous step's (the same one for a
        static rejoin) and records the step."""
        previous = self.steps[-1]["generation"] if self.steps else 0
        generation = settle(live, min_generation=previous if kw.get("same_generation") else previous + 1)
        self.steps.append({"action": action, "generation": generation, "t": int(time.time() * 1000), **kw})
        return generation

    def truth(self) -> Truth:
        return {"group": self.group, "scenario": self.name, "steps": self.steps,
                "members": [{"client_id": m.client_id, "instance_id": m.instance_id, "events": list(m.events)}
                            for m in self.members]}

    def finish(self) -> None:
        for m in self.members:
            m.stop()


def eager_expiry_and_leave(s: Scenario) -> None:
    """Range, 3 members; one SIGKILLed (session expiry), one closed (LeaveGroup), then the last one."""
    c = [s.member(f"e{i}", "eager-a", session_ms=4000) for i in (1, 2, 3)]
    for m in c:
        m.start()
    s.step("start 3", c)
    c[2].kill()
    s.step("kill -9 e3", c[:2], member="e3", audit="member_left_or_expired", broker="member_session_expired")
    c[1].close()
    s.step("close e2", c[:1], member="e2", audit="member_left_or_expired", broker="member_left")
    c[0].close()
    s.steps.append({"action": "close e1", "generation": None, "member": "e1"})


def cooperative_scale(s: Scenario) -> None:
    """Cooperative-sticky: 2 members, scale out to 4 one by one, scale in to 2, then close."""
    kw = {"assignor": "cooperative-sticky", "session_ms": 6000}
    c = [s.member(f"k{i}", "coop-a", **kw) for i in (1, 2, 3, 4)]
    c[0].start()
    c[1].start()
    s.step("start 2", c[:2])
    # one member at a time: each join is a join round then a follow-up round once the partitions it
    # takes were revoked (KIP-429); two joins at once may fold into each other's rounds
    c[2].start()
    s.step("scale out to 3", c[:3], member="k3", audit="cooperative_follow_up", broker="cooperative_follow_up")
    c[3].start()
    s.step("scale out to 4", c, member="k4", audit="cooperative_follow_up", broker="cooperative_follow_up")
    c[3].close()
    s.step("close k4", c[:3], member="k4", audit="member_left_or_expired", broker="member_left")
    c[2].close()
    s.step("close k3", c[:2], member="k3", audit="member_left_or_expired", broker="member_left")
    c[1].close()
    c[0].close()


def static_rolling_restart(s: Scenario) -> None:
    """Range, 3 static members (group.instance.id, KIP-345): each closed (no LeaveGroup) and restarted
    with its instance id; the coordinator replaces the member id without a rebalance."""
    kw = {"session_ms": 15000}
    live = [s.member(f"s{i}", "static-a", instance_id=f"inst{i}", **kw) for i in (1, 2, 3)]
    for m in live:
        m.start()
    s.step("start 3", live)
    for i in range(3):
        live[i].close()
        live[i] = s.member(f"s{i + 1}b", "static-a", instance_id=f"inst{i + 1}", **kw).start()
        s.step(f"restart inst{i + 1}", live, member=f"inst{i + 1}", same_generation=True,
               audit_row="static_member_replaced")
    for m in live:  # static members leave no LeaveGroup: the group empties when their sessions expire
        m.close()


def subscription_change(s: Scenario) -> None:
    """Range, 2 members on sub-a; one subscribes to sub-a and sub-b."""
    c = [s.member(f"u{i}", "sub-a") for i in (1, 2)]
    for m in c:
        m.start()
    s.step("start 2", c)
    c[0].send("subscribe sub-a,sub-b")
    s.step("u1 subscribes sub-a,sub-b", c, member="u1", audit="subscription_changed", broker="member_rejoined")
    c[1].close()
    c[0].close()


def poll_timeout(s: Scenario) -> None:
    """Range, 2 members; one stops polling past max.poll.interval.ms (its heartbeat thread sends
    LeaveGroup), then polls again and rejoins."""
    c = [s.member(f"p{i}", "poll-a", session_ms=6000, max_poll_ms=3000) for i in (1, 2)]
    for m in c:
        m.start()
    s.step("start 2", c)
    n, n0 = len(c[1].events), len(c[0].events)
    c[1].send("stall 7000")
    c[1].wait_for(lambda e: e["event"] == "stall_begin", 30, after=n)
    c[0].wait_for(lambda e: e["event"] == "assigned" and len(e["assignment"]) == 4, 40,
                  after=n0, what="all partitions after p2's poll timeout")
    s.step("p2 exceeds max.poll.interval.ms", c[:1], member="p2", audit="member_left_or_expired",
           broker="member_poll_timeout")
    c[1].wait_for(lambda e: e["event"] == "stall_end", 30, after=n)
    s.step("p2 polls again", c, member="p2", audit="member_joined", broker="member_joined")
    c[1].close()
    c[0].close()


SCENARIOS: dict[str, tuple[str, Callable[[Scenario], None]]] = {
    "eager-expiry-leave": ("grp-eager", eager_expiry_and_leave),
    "cooperative-scale": ("grp-coop", cooperative_scale),
    "static-rolling-restart": ("grp-static", static_rolling_restart),
    "subscription-change": ("grp-sub", subscription_change),
    "poll-timeout": ("grp-poll", poll_timeout),
}


def run_all(broker: Broker, names: list[str] | None = None) -> dict[str, Truth]:
    """Runs the scenarios (all by default) in parallel; {group: truth}."""
    return run_scenarios(broker, SCENARIOS, TOPICS, Scenario, names)


def run_scenarios(broker: Broker, table: Mapping[str, tuple[str, Callable[[Any], None]]], topics: Any,
                  scenario: Callable[[Broker, str, str], Any], names: list[str] | None = None) -> dict[str, Any]:
    """Runs the scenarios of `table` ({name: (group, driver)}; all by default) in parallel on `broker`
    after creating `topics`, each driven by its function on a `scenario(broker, group, name)`;
    {group: truth}. Raises the first failure after every scenario has stopped its consumers."""
    broker.create_topics(topics)  # also compiles the driver once, before the threads need it
    chosen = names or list(table)
    scenarios = {name: scenario(broker, table[name][0], name) for name in chosen}
    errors: dict[str, BaseException] = {}

    def run(name: str) -> None:
        try:
            table[name][1](scenarios[name])
        except BaseException as exc:
            errors[name] = exc
        finally:
            scenarios[name].finish()

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in chosen]
    for t in threads:
        t.start()
        time.sleep(0.5)  # stagger the JVM starts on a small machine
    for t in threads:
        t.join(timeout=400)
    if errors:
        name, exc = next(iter(errors.items()))
        raise AssertionError(f"scenario {name} failed: {exc}") from exc
    return {s.group: s.truth() for s in scenarios.values()}
