"""Random scenarios from a seed: small groups living through a few membership events each.

`random_scenario(seed)` draws 2-5 consumers (dynamic or static, one assignor family), starts some
of them and then applies 2-4 events (crash, close, restart, scale-out, leader or member rejoin,
subscription change), sometimes close enough together to land in one rebalance, sometimes a
session timeout apart. The same seed gives the same scenario; the runner's ground truth comes
with it, so a test can hold the audit against many group histories nobody wrote by hand.
"""

from __future__ import annotations

import random
from typing import Any

from coordinator_audit.core.sim.scenario import FLAVORS, Scenario

__all__ = ["random_scenario"]

_ASSIGNORS = (["range"], ["roundrobin"], ["sticky"], ["cooperative-sticky"], ["range", "cooperative-sticky"])
_EVENTS = ("crash", "close", "restart", "scale_out", "rejoin", "subscribe")


def random_scenario(seed: int, *, flavor: str = "java") -> Scenario:
    """The scenario of `seed`, written by the coordinator flavour `flavor` ("java" or "scala")."""
    if flavor not in FLAVORS:
        raise ValueError(f"flavor must be one of {FLAVORS}, got {flavor!r}")
    rng = random.Random(f"random-scenario-{seed}")
    n = rng.randint(2, 5)
    names = [f"c{i}" for i in range(1, n + 1)]
    static = rng.random() < 0.25
    initial = names[: rng.randint(1, n)] if n > 2 else names
    topics = {"orders": rng.choice((4, 6, 8)), "audit": 2}
    timeline: list[dict[str, Any]] = [{"at": 0, "do": "start", "consumers": initial}]
    running, waiting = list(initial), [c for c in names if c not in initial]
    at = 20_000
    for _ in range(rng.randint(2, 4)):
        kind = rng.choice(_EVENTS)
        if kind == "scale_out" and not waiting:
            kind = "restart"
        if kind in ("crash", "close") and len(running) < 2:
            kind = "rejoin"
        if kind == "scale_out":
            who = waiting.pop(0)
            running.append(who)
            timeline.append({"at": at, "do": "scale_out", "consumers": [who]})
        elif kind in ("crash", "close"):
            who = rng.choice(running)
            running.remove(who)
            timeline.append({"at": at, "do": kind, "consumers": [who]})
        elif kind == "restart":
            timeline.append({"at": at, "do": "restart", "consumer": rng.choice(running),
                             "downtime_ms": rng.choice((0, 200, 1000, 4000)), "crash": rng.random() < 0.4})
        elif kind == "rejoin":
            timeline.append({"at": at, "do": "rejoin", "consumer": rng.choice(running)})
        else:
            timeline.append({"at": at, "do": "subscribe", "consumers": [rng.choice(running)],
                             "topics": rng.choice((["orders", "audit"], ["orders"]))})
        at += rng.choice((500, 2_000, 15_000, 25_000))
    data = {
        "name": f"random-{seed}", "group": f"sim-random-{seed}", "seed": seed, "flavor": flavor,
        "description": f"random scenario {seed}", "tags": ["random"], "topics": topics,
        "defaults": {"session_timeout_ms": 10_000, "assignors": rng.choice(_ASSIGNORS), "static": static},
        "consumers": [{"name": c} for c in names], "timeline": timeline, "end_ms": at + 40_000,
    }
    return Scenario.from_dict(data, source=f"random scenario {seed}")
