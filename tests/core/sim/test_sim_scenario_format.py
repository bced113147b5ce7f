"""The scenario format: validation names the bad key or step; builder and JSON say the same thing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_audit.core.errors import ScenarioError
from coordinator_audit.core.sim.clock import EventQueue
from coordinator_audit.core.sim.log import LogWriter, drop_prefix
from coordinator_audit.core.sim.scenario import ACTIONS, Scenario, ScenarioBuilder

LIBRARY = Path(__file__).resolve().parents[3] / "coordinator_audit" / "core" / "sim" / "scenarios"


def _base(**over):
    d = {"name": "t", "group": "g", "topics": {"a": 2}, "consumers": [{"name": "c1"}],
         "timeline": [{"at": 0, "do": "start", "consumer": "c1"}], "end_ms": 1000}
    d.update(over)
    return d


@pytest.mark.parametrize(("data", "fragment"), [
    (_base(timeline=[{"at": 0, "do": "explode"}]), "timeline[0].do: unknown action 'explode'"),
    (_base(timeline=[{"at": 0, "do": "start", "consumer": "zz"}]), "timeline[0] (start).consumer: unknown consumer 'zz'"),
    (_base(timeline=[{"at": 0, "do": "pause", "consumer": "c1"}]), "timeline[0] (pause): missing key 'ms'"),
    (_base(timeline=[{"at": 0, "do": "start", "consumer": "c1", "bogus": 1}]), "timeline[0] (start).bogus: unknown key"),
    (_base(timeline=[{"at": 5, "do": "start", "consumer": "c1"}, {"at": 1, "do": "crash", "consumer": "c1"}]),
     "timeline[1].at: steps must be in time order"),
    (_base(consumers=[{"name": "c1", "topics": ["nope"]}]), "consumers[0].topics: topic 'nope' is not declared"),
    (_base(consumers=[{"name": "c1", "sesion_timeout_ms": 5}]), "consumers[0].sesion_timeout_ms: unknown consumer key"),
    (_base(consumers=[{"name": "c1", "misbehave": {"assignor": "evil"}}]), "consumers[0].misbehave.assignor: must be one of"),
    (_base(consumers=[{"name": "c1"}, {"name": "c1"}]), "duplicate consumer names"),
    (_base(timeline=[{"at": 0, "do": "set_partitions", "topic": "a", "partitions": 1}]), "can only add partitions"),
    (_base(end_ms=-1), "end_ms: must be >= 1"),
    (_base(extra=1), "scenario.extra: unknown scenario key"),
    ({"name": "t"}, "missing key 'group'"),
])
def test_bad_scenarios_name_the_key(data, fragment):
    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict(data)
    assert fragment in str(e.value)


def test_builder_and_json_agree():
    built = (ScenarioBuilder("demo", group="g", topics={"t": 4}).defaults(assignors=["range"])
             .consumer("c1").consumer("c2", static=True)
             .at(0).start("c1", "c2").at(5000).pause("c1", 2000).at(9000).crash("c2").end(20000).build())
    again = Scenario.from_dict(json.loads(json.dumps(built.to_dict())))
    assert again == built
    assert built.consumer("c2").group_instance_id == "c2"
    assert [s.do for s in built.timeline] == ["start", "pause", "crash"]


def test_library_is_valid_and_covers_every_action():
    scenarios = [Scenario.load(p) for p in sorted(LIBRARY.glob("*.json"))]
    assert len(scenarios) >= 30
    used = {step.do for s in scenarios for step in s.timeline}
    assert used == set(ACTIONS)
    for s in scenarios:
        assert Scenario.from_dict(s.to_dict()) == s


def test_event_queue_orders_by_time_then_scheduling():
    q = EventQueue(100)
    seen = []
    q.schedule(105, lambda t: seen.append(("b", t)))
    q.schedule(101, lambda t: seen.append(("a", t)))
    q.schedule(105, lambda t: seen.append(("c", t)))
    dropped = q.schedule(103, lambda t: seen.append(("x", t)))
    q.cancel(dropped)
    q.schedule(101, lambda t: q.after(2, lambda u: seen.append(("nested", u))))
    assert q.run_until(200) == 5
    assert seen == [("a", 101), ("nested", 103), ("b", 105), ("c", 105)]
    assert q.now == 200
    with pytest.raises(ScenarioError, match="before the current time"):
        q.schedule(150, lambda t: None)


def test_log_writer_offsets_are_contiguous_per_partition():
    log = LogWriter()
    log.append(3, 10, b"k", b"v")
    log.append(7, 10, b"k", None)
    log.append(3, 11, b"k2", b"v")
    assert [(r.partition, r.offset) for r in log] == [(3, 0), (7, 0), (3, 1)]
    with pytest.raises(ScenarioError, match="goes back in time"):
        log.append(3, 5, b"k", b"v")
    with pytest.raises(ScenarioError, match="non-empty key"):
        log.append(3, 20, b"", b"v")
    assert [r.offset for r in drop_prefix(log.records, 1)] == [0, 1]
