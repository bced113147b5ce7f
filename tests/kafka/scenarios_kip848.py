"""KIP-848 consumer-group scenarios (`group.protocol=consumer`) run by real consumers against a real
Kafka 4.4 broker; each returns its ground truth.

Truth of a group: `members` (every consumer's events: its rebalance-listener callbacks and, after
each poll, its member epoch and whole assignment when either changed) and `steps` (what the
scenario did, in order, with the epoch the group settled in after it, the time it was quiet, and
`expect`: the primary causes, with the consumer they name, of the epochs the step made).
The scenarios run in parallel threads, one group each, on one broker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.kafka.cluster import Broker, Member
from tests.kafka.scenarios import run_scenarios

Truth = dict[str, Any]

SESSION_MS = 8000
"""`group.consumer.session.timeout.ms`: a SIGKILLed member, or a static one gone longer, is fenced after it."""
REGEX_REFRESH_MS = 10000
"""`group.consumer.regex.refresh.interval.ms` (the broker's minimum): a new topic matching a
subscribed regular expression is taken up within it."""

BROKER_PROPERTIES = {
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.regex.refresh.interval.ms": str(REGEX_REFRESH_MS),
    "group.initial.rebalance.delay.ms": "0",
}

TOPICS = {"k-uni": 6, "k-range-a": 4, "k-range-b": 2, "k-poll": 4, "k-static": 4, "kx-clicks": 4, "k-other": 2,
          "k-mig": 4}
LATE_TOPIC = ("kx-late", 3)
"""Created during the regex scenario; it matches the group's regular expression."""


def epoch_of(m: Member) -> int | None:
    """The member epoch a member last reported (a classic member: the generation of its last
    assignment, None while it is not assigned)."""
    for e in reversed(m.events):
        if m.protocol == "consumer" and e["event"] == "state":
            return int(e["generation"])
        if m.protocol == "classic" and e["event"] in ("assigned", "revoked", "lost"):
            return int(e["generation"]) if e["event"] == "assigned" else None
    return None


def settle(members: list[Member], *, min_epoch: int, quiet: float = 2.5, timeout: float = 60.0) -> int:
    """Waits until every member of `members` reports one same member epoch, at least `min_epoch`,
    and none reported anything for `quiet` seconds; returns that epoch."""
    deadline = time.monotonic() + timeout
    while True:
        epochs = {epoch_of(m) for m in members}
        newest = max((m.events[-1]["t"] for m in members if m.events), default=0)
        if len(epochs) == 1 and None not in epochs and time.time() * 1000 - newest >= quiet * 1000:
            epoch = int(epochs.pop())  # type: ignore[arg-type]
            if epoch >= min_epoch:
                return epoch
        if time.monotonic() > deadline:
            raise AssertionError(f"group of {[m.client_id for m in members]} did not settle at epoch >= {min_epoch} "
                                 f"within {timeout} s: last events {[m.events[-3:] for m in members]}")
        time.sleep(0.2)


class Scenario:
    """Collects a group's members and steps; `finish()` stops every member left running."""

    def __init__(self, broker: Broker, group: str, name: str) -> None:
        self.broker, self.group, self.name = broker, group, name
        self.members: list[Member] = []
        self.steps: list[dict[str, Any]] = []

    def member(self, client_id: str, topics: str, **kw: Any) -> Member:
        kw.setdefault("protocol", "consumer")
        m = Member(self.broker, self.group, client_id, topics, **kw)
        self.members.append(m)
        return m

    def step(self, action: str, live: list[Member], *, same_epoch: bool = False, **kw: Any) -> int:
        """Waits until `live` settle in an epoch after the previous step's (the same one when
        `same_epoch`), and records the step with the live members' ids and assignments."""
        previous = self.steps[-1]["epoch"] if self.steps else 0
        epoch = settle(live, min_epoch=previous if same_epoch else previous + 1)
        if same_epoch:
            assert epoch == previous, f"{self.group} {action}: epoch {previous} -> {epoch}, expected no new epoch"
        quiet = {m.client_id: m.events[-1] for m in live}
        self.steps.append({"action": action, "epoch": epoch, "t": int(time.time() * 1000), "same_epoch": same_epoch,
                           "live": {c: {"member_id": e["member_id"], "assignment": e["assignment"]}
                                    for c, e in quiet.items()}, **kw})
        return epoch

    def close(self, live: list[Member]) -> None:
        """Closes `live` (KafkaConsumer#close), all at once."""
        threads = [threading.Thread(target=m.close) for m in live]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=90)

    def truth(self) -> Truth:
        return {"group": self.group, "scenario": self.name, "steps": self.steps,
                "members": [{"client_id": m.client_id, "instance_id": m.instance_id, "protocol": m.protocol,
                             "events": list(m.events)} for m in self.members]}

    def finish(self) -> None:
        for m in self.members:
            m.stop()


def uniform_scale(s: Scenario) -> None:
    """Uniform assignor, 2 members; scale out to 4 one at a time; SIGKILL one (the broker fences it
    when its session expires); one leaves cleanly (scale in)."""
    c = [s.member(f"u{i}", "k-uni", remote="uniform") for i in (1, 2, 3, 4)]
    c[0].start()
    c[1].start()
    s.step("start u1 u2", c[:2])
    c[2].start()
    s.step("u3 joins", c[:3], expect=[("member_joined", "u3")])
    c[3].start()
    s.step("u4 joins", c, expect=[("member_joined", "u4")])
    c[3].kill()
    s.step("kill -9 u4", c[:3], expect=[("member_left_or_expired", "u4")])
    c[2].close()
    s.step("u3 closes", c[:2], expect=[("member_left_or_expired", "u3")])
    s.close(c[:2])


def range_subscription(s: Scenario) -> None:
    """Range assignor, 2 members on one topic; one subscribes to a second topic too."""
    c = [s.member(f"r{i}", "k-range-a", remote="range") for i in (1, 2)]
    for m in c:
        m.start()
    s.step("start r1 r2", c)
    c[0].send("subscribe k-range-a,k-range-b")
    s.step("r1 subscribes k-range-a,k-range-b", c, expect=[("subscription_changed", "r1")])
    s.close(c)


def poll_timeout(s: Scenario) -> None:
    """Uniform, 2 members; one stops polling past max.poll.interval.ms (the client leaves the group
    with member epoch -1), then polls again and rejoins."""
    c = [s.member(f"p{i}", "k-poll", remote="uniform", max_poll_ms=3000) for i in (1, 2)]
    for m in c:
        m.start()
    s.step("start p1 p2", c)
    n = len(c[1].events)
    c[1].send("stall 16000")  # leaves after 3 s; p1 settles well before p2 polls again
    c[1].wait_for(lambda e: e["event"] == "stall_begin", 30, after=n)
    s.step("p2 exceeds max.poll.interval.ms", c[:1], expect=[("member_left_or_expired", "p2")])
    c[1].wait_for(lambda e: e["event"] == "stall_end", 30, after=n)
    s.step("p2 polls again", c, expect=[("member_joined", "p2")])
    s.close(c)


def regex_subscription(s: Scenario) -> None:
    """Two members subscribed to the regular expression `kx-.*`, resolved by the broker; a topic
    matching it is created and taken up at the next regex refresh."""
    c = [s.member(f"x{i}", "-", regex="kx-.*") for i in (1, 2)]
    for m in c:
        m.start()
    s.step("start x1 x2", c)
    s.broker.create_topics(dict([LATE_TOPIC]))
    s.step(f"{LATE_TOPIC[0]} created", c, expect=[("regex_resolved", None)], topic=LATE_TOPIC[0])
    s.close(c)


def static_members(s: Scenario) -> None:
    """Uniform, 2 static members (group.instance.id): one closes (a temporary leave, member epoch -2)
    and comes back within its session (no new epoch); the other closes and comes back after its
    session expired (fenced: a new epoch without it, then one with it)."""
    kw: dict[str, Any] = {"remote": "uniform"}
    s1 = s.member("s1", "k-static", instance_id="inst1", **kw).start()
    s2 = s.member("s2", "k-static", instance_id="inst2", **kw).start()
    s.step("start s1 s2", [s1, s2])
    s1b = s.member("s1b", "k-static", instance_id="inst1", hold=True, **kw).start()  # a JVM start outlasts a session
    s1.close()
    s1b.send("join")
    s.step("inst1 back within its session", [s1b, s2], same_epoch=True, member="inst1",
           audit_rows=["static_member_left_temporarily", "static_member_rejoined"])
    s2.close()
    s.step("inst2 fenced after its session", [s1b], expect=[("member_left_or_expired", "inst2")])
    s2b = s.member("s2b", "k-static", instance_id="inst2", **kw).start()
    s.step("inst2 back", [s1b, s2b], expect=[("member_joined", "inst2")])
    s.close([s1b, s2b])


def migration(s: Scenario) -> None:
    """Two classic members (range); a consumer-protocol member joins (the broker converts the group
    online to a consumer group), then leaves (the last consumer-protocol member gone: converted back
    to a classic group)."""
    c = [s.member(f"m{i}", "k-mig", protocol="classic", assignor="range") for i in (1, 2)]
    for m in c:
        m.start()
    s.step("classic m1 m2", c)
    k = s.member("m3", "k-mig", remote="range").start()
    s.step("m3 joins with the consumer protocol", [*c, k],
           expect=[("converted_to_consumer", None), ("member_joined", "m3")])
    k.close()
    # the broker converts the group back and rebalances it as a classic group at once
    s.step("m3 leaves", c, expect=[("converted_to_classic", None)], then_broker_reason="Downgrade group")
    s.close(c)


SCENARIOS: dict[str, tuple[str, Callable[[Scenario], None]]] = {
    "uniform-scale": ("k848-uniform", uniform_scale),
    "range-subscription": ("k848-range", range_subscription),
    "poll-timeout": ("k848-poll", poll_timeout),
    "regex": ("k848-regex", regex_subscription),
    "static": ("k848-static", static_members),
    "migration": ("k848-migration", migration),
}


def run_all(broker: Broker, names: list[str] | None = None) -> dict[str, Truth]:
    """Runs the scenarios (all by default) in parallel; {group: truth}."""
    return run_scenarios(broker, SCENARIOS, TOPICS, Scenario, names)
