"""The scenario format: topics, consumers and a timeline, as plain data (JSON) or built in Python.

A scenario file is one JSON object:

    {
      "name": "eager-scale-out",
      "description": "three range consumers, then two more join",
      "group": "sim-eager-scale-out",
      "seed": 7,
      "topics": {"orders": 6},
      "defaults": {"assignors": ["range"], "session_timeout_ms": 10000},
      "consumers": [{"name": "c1"}, {"name": "c2"}, {"name": "c3"}, {"name": "c4"}],
      "timeline": [
        {"at": 0, "do": "start", "consumers": ["c1", "c2"]},
        {"at": 20000, "do": "scale_out", "consumers": ["c3", "c4"]}
      ],
      "end_ms": 60000
    }

`Scenario.from_dict` validates everything up front and raises `ScenarioError` naming the bad key
or timeline step; `ScenarioBuilder` writes the same structure from Python with the same words.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from coordinator_audit.core.errors import ScenarioError

#: Timeline actions and the keys each one takes (besides "at" and "do").
ACTIONS: dict[str, dict[str, bool]] = {
    # action: {key: required}
    "start": {"consumer": False, "consumers": False},
    "crash": {"consumer": False, "consumers": False},
    "close": {"consumer": False, "consumers": False},
    "restart": {"consumer": False, "consumers": False, "downtime_ms": False, "crash": False, "set": False},
    "pause": {"consumer": True, "ms": True},
    "rolling_bounce": {"consumers": False, "interval_ms": False, "downtime_ms": False, "crash": False,
                       "set": False},
    "scale_out": {"consumers": True},
    "scale_in": {"consumers": True},
    "subscribe": {"consumer": False, "consumers": False, "topics": True},
    "set_partitions": {"topic": True, "partitions": True, "refresh_ms": False},
    "leader_crash_mid_sync": {},
    "coordinator_failover": {"downtime_ms": False},
    "commit_wrong_generation": {"consumer": True, "generation_delta": False},
    "rewind": {"consumer": True, "topic": True, "partition": True, "by": True},
    "rejoin": {"consumer": True, "reason": False},
    "spawn_duplicate": {"consumer": True},
    "delete_group": {},
}

#: Coordinator implementations the simulator can imitate (`CoordinatorConfig.flavor`).
FLAVORS = ("java", "scala")

#: Deliberate client bugs a consumer spec may carry under "misbehave".
ASSIGNOR_BUGS = ("duplicate_assignment", "unsafe_cooperative_move", "outside_subscription",
                 "ignore_static_order")
MISBEHAVE_KEYS = {"assignor": ASSIGNOR_BUGS, "stale_claims": (True, False)}

SUBSCRIPTION_VERSIONS = (0, 1, 3)


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """One consumer process's configuration (Java consumer names, snake_case, Kafka 3.x defaults)."""

    name: str
    topics: tuple[str, ...] = ()
    static: bool = False
    instance_id: str | None = None
    client_id: str | None = None
    client_host: str | None = None
    assignors: tuple[str, ...] = ("range", "cooperative-sticky")
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    retry_backoff_ms: int = 100
    records_per_sec: int = 50
    subscription_version: int = 3
    rack: str | None = None
    misbehave: tuple[tuple[str, Any], ...] = ()

    @property
    def group_instance_id(self) -> str | None:
        if self.instance_id is not None:
            return self.instance_id
        return self.name if self.static else None

    def bug(self, key: str) -> Any:
        return dict(self.misbehave).get(key)


@dataclass(frozen=True, slots=True)
class Step:
    """One timeline entry: `do` at virtual time `at` (ms from the scenario start) with its arguments."""

    at: int
    do: str
    args: tuple[tuple[str, Any], ...] = ()
    index: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.args).get(key, default)

    def consumers(self) -> tuple[str, ...]:
        one = self.get("consumer")
        many = self.get("consumers")
        if one is not None:
            return (one,)
        return tuple(many or ())


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario. Times in the timeline are ms after `start_ms` (the log's first timestamp)."""

    name: str
    group: str
    topics: tuple[tuple[str, int], ...]
    consumers: tuple[ConsumerSpec, ...]
    timeline: tuple[Step, ...]
    end_ms: int
    description: str = ""
    seed: int = 0
    start_ms: int = 1700000000000
    network_ms: int = 1
    initial_rebalance_delay_ms: int = 3000
    offsets_partitions: int = 50
    drop_prefix: int = 0
    tags: tuple[str, ...] = ()
    flavor: str = "java"
    """The coordinator implementation whose log is written: "java" (Kafka 4.x, the default) or "scala" (<= 3.x)."""

    def consumer(self, name: str) -> ConsumerSpec:
        for spec in self.consumers:
            if spec.name == name:
                return spec
        raise ScenarioError(f"scenario {self.name!r}: no consumer named {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (round-trips through `from_dict`)."""
        out: dict[str, Any] = {"name": self.name, "group": self.group}
        if self.description:
            out["description"] = self.description
        for key in ("seed", "start_ms", "network_ms", "initial_rebalance_delay_ms", "offsets_partitions",
                    "drop_prefix"):
            value = getattr(self, key)
            if value != _SCENARIO_DEFAULTS[key]:
                out[key] = value
        if self.tags:
            out["tags"] = list(self.tags)
        if self.flavor != _SCENARIO_DEFAULTS["flavor"]:
            out["flavor"] = self.flavor
        out["topics"] = dict(self.topics)
        out["consumers"] = [_consumer_to_dict(c) for c in self.consumers]
        out["timeline"] = [{"at": s.at, "do": s.do,
                            **{k: _jsonable(dict(v) if k == "set" else v) for k, v in s.args}}
                           for s in self.timeline]
        out["end_ms"] = self.end_ms
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any], *, source: str = "scenario") -> Scenario:
        return _parse(data, source)

    @staticmethod
    def load(path: str | Path) -> Scenario:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ScenarioError(f"{p}: not valid JSON: {e}") from e
        return _parse(data, str(p))


_SCENARIO_DEFAULTS = {f.name: f.default for f in fields(Scenario)}
_CONSUMER_FIELDS = {f.name: f for f in fields(ConsumerSpec)}
_SCENARIO_KEYS = {"name", "group", "description", "seed", "start_ms", "network_ms",
                  "initial_rebalance_delay_ms", "offsets_partitions", "drop_prefix", "tags", "flavor", "topics",
                  "defaults", "consumers", "timeline", "end_ms"}


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def _consumer_to_dict(c: ConsumerSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, f in _CONSUMER_FIELDS.items():
        value = getattr(c, name)
        if name == "name" or value != f.default:
            if name == "misbehave":
                out[name] = dict(value)
            else:
                out[name] = _jsonable(value)
    return out


def _fail(where: str, message: str) -> ScenarioError:
    return ScenarioError(f"{where}: {message}")


def _int(where: str, value: Any, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"expected an integer, got {value!r}")
    if value < minimum:
        raise _fail(where, f"must be >= {minimum}, got {value}")
    return value


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, f"expected a non-empty string, got {value!r}")
    return value


def _str_list(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise _fail(where, f"expected a list of strings, got {value!r}")
    return tuple(_str(f"{where}[{i}]", v) for i, v in enumerate(value))


def _parse_consumer(where: str, raw: Any, defaults: Mapping[str, Any], topics: Mapping[str, int]
                    ) -> ConsumerSpec:
    if not isinstance(raw, Mapping):
        raise _fail(where, f"expected an object, got {raw!r}")
    merged = {**defaults, **raw}
    kwargs: dict[str, Any] = {}
    for key, value in merged.items():
        at = f"{where}.{key}"
        if key not in _CONSUMER_FIELDS:
            raise _fail(at, f"unknown consumer key (known: {', '.join(sorted(_CONSUMER_FIELDS))})")
        if key in ("name", "instance_id", "client_id", "client_host", "rack"):
            kwargs[key] = None if value is None and key != "name" else _str(at, value)
        elif key in ("topics", "assignors"):
            kwargs[key] = _str_list(at, value)
        elif key in ("static", "auto_commit"):
            if not isinstance(value, bool):
                raise _fail(at, f"expected true/false, got {value!r}")
            kwargs[key] = value
        elif key == "misbehave":
            kwargs[key] = _parse_misbehave(at, value)
        elif key == "subscription_version":
            if value not in SUBSCRIPTION_VERSIONS:
                raise _fail(at, f"must be one of {SUBSCRIPTION_VERSIONS}, got {value!r}")
            kwargs[key] = value
        else:
            kwargs[key] = _int(at, value, minimum=1 if key.endswith("_ms") and key != "retry_backoff_ms" else 0)
    if "name" not in kwargs:
        raise _fail(where, "missing key 'name'")
    spec = ConsumerSpec(**kwargs)
    if not spec.topics:
        spec = replace(spec, topics=tuple(sorted(topics)))
    for t in spec.topics:
        if t not in topics:
            raise _fail(f"{where}.topics", f"topic {t!r} is not declared in 'topics'")
    if not spec.assignors:
        raise _fail(f"{where}.assignors", "needs at least one assignor")
    if spec.heartbeat_interval_ms >= spec.session_timeout_ms:
        raise _fail(f"{where}.heartbeat_interval_ms", "must be lower than session_timeout_ms")
    return spec


def _parse_misbehave(where: str, value: Any) -> tuple[tuple[str, Any], ...]:
    if not isinstance(value, Mapping):
        raise _fail(where, f"expected an object, got {value!r}")
    out = []
    for key, v in value.items():
        if key not in MISBEHAVE_KEYS:
            raise _fail(f"{where}.{key}", f"unknown misbehaviour (known: {', '.join(MISBEHAVE_KEYS)})")
        if v not in MISBEHAVE_KEYS[key]:
            raise _fail(f"{where}.{key}", f"must be one of {MISBEHAVE_KEYS[key]}, got {v!r}")
        out.append((key, v))
    return tuple(sorted(out))


def _parse_step(index: int, raw: Any, names: set[str], topics: Mapping[str, int]) -> Step:
    where = f"timeline[{index}]"
    if not isinstance(raw, Mapping):
        raise _fail(where, f"expected an object, got {raw!r}")
    if "do" not in raw:
        raise _fail(where, "missing key 'do'")
    action = raw["do"]
    if action not in ACTIONS:
        raise _fail(f"{where}.do", f"unknown action {action!r} (known: {', '.join(ACTIONS)})")
    where = f"timeline[{index}] ({action})"
    if "at" not in raw:
        raise _fail(where, "missing key 'at'")
    at = _int(f"{where}.at", raw["at"])
    allowed = ACTIONS[action]
    args: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("at", "do"):
            continue
        if key not in allowed:
            raise _fail(f"{where}.{key}", f"unknown key for {action!r} (known: {', '.join(allowed) or 'none'})")
        args[key] = value
    for key, required in allowed.items():
        if required and key not in args:
            raise _fail(where, f"missing key {key!r}")
    if "consumer" in args:
        _check_name(f"{where}.consumer", args["consumer"], names)
    if "consumers" in args:
        args["consumers"] = _str_list(f"{where}.consumers", args["consumers"])
        for i, n in enumerate(args["consumers"]):
            _check_name(f"{where}.consumers[{i}]", n, names)
    if action in ("start", "crash", "close", "restart", "subscribe") and not (
            "consumer" in args or "consumers" in args):
        raise _fail(where, "needs 'consumer' or 'consumers'")
    for key in ("ms", "downtime_ms", "interval_ms", "refresh_ms", "by"):
        if key in args:
            args[key] = _int(f"{where}.{key}", args[key], minimum=1 if key in ("ms", "by") else 0)
    if "partitions" in args:
        args["partitions"] = _int(f"{where}.partitions", args["partitions"], minimum=1)
    if "partition" in args:
        args["partition"] = _int(f"{where}.partition", args["partition"])
    if "topic" in args and args["topic"] not in topics:
        raise _fail(f"{where}.topic", f"topic {args['topic']!r} is not declared in 'topics'")
    if action == "set_partitions" and args["partitions"] < topics[args["topic"]]:
        raise _fail(f"{where}.partitions", "Kafka can only add partitions to a topic")
    if "topics" in args:
        args["topics"] = _str_list(f"{where}.topics", args["topics"])
        for t in args["topics"]:
            if t not in topics:
                raise _fail(f"{where}.topics", f"topic {t!r} is not declared in 'topics'")
    if "crash" in args and not isinstance(args["crash"], bool):
        raise _fail(f"{where}.crash", "expected true/false")
    if "generation_delta" in args:
        delta = args["generation_delta"]
        if isinstance(delta, bool) or not isinstance(delta, int) or delta == 0:
            raise _fail(f"{where}.generation_delta", "expected a non-zero integer")
    if "set" in args:
        s = args["set"]
        if not isinstance(s, Mapping):
            raise _fail(f"{where}.set", "expected an object of consumer keys")
        for k in s:
            if k not in _CONSUMER_FIELDS or k == "name":
                raise _fail(f"{where}.set.{k}", "not a consumer key that a restart can change")
        args["set"] = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in s.items()))
    return Step(at=at, do=action, args=tuple(sorted(args.items())), index=index)


def _check_name(where: str, value: Any, names: set[str]) -> None:
    if value not in names:
        raise _fail(where, f"unknown consumer {value!r} (declared: {', '.join(sorted(names))})")


def _parse(data: Mapping[str, Any], source: str) -> Scenario:
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{source}: a scenario is a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in _SCENARIO_KEYS:
            raise _fail(f"{source}.{key}", f"unknown scenario key (known: {', '.join(sorted(_SCENARIO_KEYS))})")
    for key in ("name", "group", "topics", "consumers", "timeline", "end_ms"):
        if key not in data:
            raise _fail(source, f"missing key {key!r}")
    name = _str(f"{source}.name", data["name"])
    where = f"scenario {name!r}"
    group = _str(f"{where}.group", data["group"])
    raw_topics = data["topics"]
    if not isinstance(raw_topics, Mapping) or not raw_topics:
        raise _fail(f"{where}.topics", "expected a non-empty object of topic -> partition count")
    topics = {_str(f"{where}.topics", t): _int(f"{where}.topics.{t}", n, minimum=1) for t, n in raw_topics.items()}
    defaults = data.get("defaults", {})
    if not isinstance(defaults, Mapping):
        raise _fail(f"{where}.defaults", "expected an object of consumer keys")
    if "name" in defaults:
        raise _fail(f"{where}.defaults.name", "a default cannot name a consumer")
    raw_consumers = data["consumers"]
    if not isinstance(raw_consumers, list) or not raw_consumers:
        raise _fail(f"{where}.consumers", "expected a non-empty list")
    consumers = tuple(_parse_consumer(f"{where}.consumers[{i}]", c, defaults, topics)
                      for i, c in enumerate(raw_consumers))
    names = [c.name for c in consumers]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise _fail(f"{where}.consumers", f"duplicate consumer names {sorted(dup)}")
    instances = [c.group_instance_id for c in consumers if c.group_instance_id]
    dup = {n for n in instances if instances.count(n) > 1}
    if dup:
        raise _fail(f"{where}.consumers", f"duplicate group instance ids {sorted(dup)}")
    raw_timeline = data["timeline"]
    if not isinstance(raw_timeline, list) or not raw_timeline:
        raise _fail(f"{where}.timeline", "expected a non-empty list of steps")
    timeline = tuple(_parse_step(i, s, set(names), topics) for i, s in enumerate(raw_timeline))
    for prev, cur in itertools.pairwise(timeline):
        if cur.at < prev.at:
            raise _fail(f"{where}.timeline[{cur.index}].at",
                        f"steps must be in time order ({cur.at} < {prev.at} of step {prev.index})")
    end_ms = _int(f"{where}.end_ms", data["end_ms"], minimum=1)
    if end_ms < timeline[-1].at:
        raise _fail(f"{where}.end_ms", f"ends ({end_ms}) before the last step ({timeline[-1].at})")
    kwargs: dict[str, Any] = {}
    for key in ("seed", "start_ms", "network_ms", "initial_rebalance_delay_ms", "offsets_partitions",
                "drop_prefix"):
        if key in data:
            kwargs[key] = _int(f"{where}.{key}", data[key], minimum=1 if key == "offsets_partitions" else 0)
    if "tags" in data:
        kwargs["tags"] = _str_list(f"{where}.tags", data["tags"])
    if "flavor" in data:
        if data["flavor"] not in FLAVORS:
            raise _fail(f"{where}.flavor", f"expected one of {', '.join(FLAVORS)}, got {data['flavor']!r}")
        kwargs["flavor"] = data["flavor"]
    description = data.get("description", "")
    if not isinstance(description, str):
        raise _fail(f"{where}.description", "expected a string")
    return Scenario(name=name, group=group, topics=tuple(topics.items()), consumers=consumers,
                    timeline=timeline, end_ms=end_ms, description=description, **kwargs)


class ScenarioBuilder:
    """Writes a scenario from Python with the file format's vocabulary.

    >>> s = (ScenarioBuilder("demo", group="g", topics={"t": 4})
    ...      .consumer("c1").consumer("c2", static=True)
    ...      .at(0).start("c1", "c2").at(30000).crash("c2").end(90000).build())
    """

    def __init__(self, name: str, *, group: str | None = None, topics: Mapping[str, int] | None = None,
                 **options: Any) -> None:
        self._data: dict[str, Any] = {"name": name, "group": group or f"sim-{name}",
                                      "topics": dict(topics or {}), "consumers": [], "timeline": [], **options}
        self._now = 0

    def defaults(self, **keys: Any) -> ScenarioBuilder:
        self._data.setdefault("defaults", {}).update(keys)
        return self

    def consumer(self, name: str, **keys: Any) -> ScenarioBuilder:
        self._data["consumers"].append({"name": name, **keys})
        return self

    def consumers(self, names: Iterable[str], **keys: Any) -> ScenarioBuilder:
        for n in names:
            self.consumer(n, **keys)
        return self

    def at(self, ms: int) -> ScenarioBuilder:
        self._now = ms
        return self

    def step(self, do: str, **args: Any) -> ScenarioBuilder:
        self._data["timeline"].append({"at": self._now, "do": do, **args})
        return self

    def _who(self, names: tuple[str, ...]) -> dict[str, Any]:
        return {"consumer": names[0]} if len(names) == 1 else {"consumers": list(names)}

    def start(self, *names: str) -> ScenarioBuilder:
        return self.step("start", **self._who(names))

    def crash(self, *names: str) -> ScenarioBuilder:
        return self.step("crash", **self._who(names))

    def close(self, *names: str) -> ScenarioBuilder:
        return self.step("close", **self._who(names))

    def restart(self, *names: str, **args: Any) -> ScenarioBuilder:
        return self.step("restart", **self._who(names), **args)

    def pause(self, name: str, ms: int) -> ScenarioBuilder:
        return self.step("pause", consumer=name, ms=ms)

    def rolling_bounce(self, *names: str, **args: Any) -> ScenarioBuilder:
        return self.step("rolling_bounce", **({"consumers": list(names)} if names else {}), **args)

    def scale_out(self, *names: str) -> ScenarioBuilder:
        return self.step("scale_out", consumers=list(names))

    def scale_in(self, *names: str) -> ScenarioBuilder:
        return self.step("scale_in", consumers=list(names))

    def subscribe(self, name: str, topics: Iterable[str]) -> ScenarioBuilder:
        return self.step("subscribe", consumer=name, topics=list(topics))

    def set_partitions(self, topic: str, partitions: int, **args: Any) -> ScenarioBuilder:
        return self.step("set_partitions", topic=topic, partitions=partitions, **args)

    def leader_crash_mid_sync(self) -> ScenarioBuilder:
        return self.step("leader_crash_mid_sync")

    def coordinator_failover(self, **args: Any) -> ScenarioBuilder:
        return self.step("coordinator_failover", **args)

    def commit_wrong_generation(self, name: str, **args: Any) -> ScenarioBuilder:
        return self.step("commit_wrong_generation", consumer=name, **args)

    def rewind(self, name: str, topic: str, partition: int, by: int) -> ScenarioBuilder:
        return self.step("rewind", consumer=name, topic=topic, partition=partition, by=by)

    def rejoin(self, name: str, **args: Any) -> ScenarioBuilder:
        return self.step("rejoin", consumer=name, **args)

    def spawn_duplicate(self, name: str) -> ScenarioBuilder:
        return self.step("spawn_duplicate", consumer=name)

    def delete_group(self) -> ScenarioBuilder:
        return self.step("delete_group")

    def end(self, ms: int) -> ScenarioBuilder:
        self._data["end_ms"] = ms
        return self

    def to_dict(self) -> dict[str, Any]:
        copied: dict[str, Any] = json.loads(json.dumps(self._data))
        return copied

    def build(self) -> Scenario:
        return Scenario.from_dict(self.to_dict(), source=f"builder {self._data['name']!r}")


__all__ = ["ACTIONS", "ASSIGNOR_BUGS", "ConsumerSpec", "Scenario", "ScenarioBuilder", "Step"]
