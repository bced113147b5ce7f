"""A real Kafka broker (scripts/kafka.sh) and real consumers (java/GroupMember.java) for the broker tier.

Everything started here stops by itself: the broker runs under `timeout` (scripts/kafka.sh), every
consumer JVM under `timeout --kill-after`, and `Broker.stop`/`Member.stop` are called in finally
blocks by the fixtures. Consumers report what they saw through their rebalance listener (one JSON
event per line); `Member.events` is that ground truth.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.kafka_input import KafkaBroker

ROOT = Path(__file__).resolve().parents[2]
JAVA_SRC = Path(__file__).resolve().parent / "java" / "GroupMember.java"
CLASSES = ROOT / ".cache" / "kafka-tier" / "classes"
MEMBER_MAX_SECONDS = 300  # a consumer JVM never outlives this, whatever happens to the test


def kafka_lib(major: int) -> Path:
    """The broker's (and kafka-clients') jars for Kafka `major` (4, 44 or 3), resolved by scripts/jars.sh."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "jars.sh"), f"kafka{major}"], capture_output=True,
                          text=True, check=False, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/jars.sh kafka{major} failed ({proc.returncode}):\n{proc.stdout[-1000:]}"
                           f"{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@functools.cache
def member_classpath(major: int = 4) -> str:
    """GroupMember compiled (once per source and kafka-clients version) against Kafka `major`'s
    kafka-clients (4 or 44: Kafka 4.4)."""
    lib = kafka_lib(major)
    digest = hashlib.sha1(JAVA_SRC.read_bytes() + str(lib).encode()).hexdigest()[:12]
    out = CLASSES / digest
    if not (out / "GroupMember.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["javac", "-nowarn", "-cp", f"{lib}/*", "-d", str(out), str(JAVA_SRC)],
                              capture_output=True, text=True, check=False, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"javac GroupMember.java failed:\n{proc.stderr}")
    return f"{out}:{lib}/*"


JAVA_OPTS = ["-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]


class Broker(KafkaBroker):
    """A running single-node KRaft broker (`benchmarks.kafka_input.KafkaBroker`: `scripts/kafka.sh`),
    with what the broker tier's tests ask of it. Its consumers run the kafka-clients of its own
    version (Kafka 4.1 clients for a 3.x broker)."""

    @property
    def classpath(self) -> str:
        return member_classpath(self.major if self.major != 3 else 4)

    @property
    def server_log(self) -> Path:
        return self.directory / "logs"

    def create_topics(self, topics: dict[str, int]) -> None:
        spec = ",".join(f"{name}:{n}" for name, n in topics.items())
        proc = subprocess.run(
            ["timeout", "--kill-after=5", "120", "java", *JAVA_OPTS, "-cp", self.classpath, "GroupMember",
             "--create-topics", self.bootstrap, spec], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"creating topics {spec} failed:\n{proc.stderr[-3000:]}")


@dataclass
class Member:
    """One consumer JVM of a group; `events` fills from its stdout as it runs. `protocol`
    "consumer" (KIP-848) takes the server-side assignor `remote` and, with `regex`, subscribes to a
    pattern the broker resolves instead of `topics`; with `hold` the JVM starts but joins only on
    `send("join")`."""

    broker: Broker
    group: str
    client_id: str
    topics: str
    assignor: str = "range"
    instance_id: str | None = None
    session_ms: int = 6000
    max_poll_ms: int = 30000
    protocol: str = "classic"
    remote: str | None = None
    regex: str | None = None
    hold: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    java_pid: int | None = None
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _stderr: list[str] = field(default_factory=list)
    _eof: bool = False

    def start(self) -> Member:
        cmd = ["timeout", "--kill-after=5", str(MEMBER_MAX_SECONDS), "java", *JAVA_OPTS,
               "-cp", self.broker.classpath, "GroupMember", self.broker.bootstrap, self.group, self.client_id,
               self.topics, self.assignor, self.instance_id or "-", str(self.session_ms), str(self.max_poll_ms),
               f"protocol={self.protocol}", *([f"remote={self.remote}"] if self.remote else []),
               *([f"regex={self.regex}"] if self.regex else []), *(["hold=1"] if self.hold else [])]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        started = self.wait_for(lambda e: e["event"] in ("started", "holding"), 60, what="start")
        self.java_pid = int(started["pid"])
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            event["client_id"] = self.client_id
            with self._lock:
                self.events.append(event)
                self._lock.notify_all()
        with self._lock:
            self._eof = True
            self._lock.notify_all()

    def _read_err(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-50]

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float, *, after: int = 0,
                 what: str = "event") -> dict[str, Any]:
        """The first event from index `after` on matching `pred`; AssertionError after `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                for e in self.events[after:]:
                    if pred(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:
                    raise AssertionError(f"{self.client_id}: no {what} within {timeout} s; events "
                                         f"{self.events[after:]}; stderr {''.join(self._stderr)[-2000:]}")
                self._lock.wait(min(left, 0.5))

    def send(self, command: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def close(self, timeout: float = 60) -> None:
        """KafkaConsumer#close: LeaveGroup for a dynamic member, none for a static one (KIP-345)."""
        n = len(self.events)
        self.send("close")
        self.wait_for(lambda e: e["event"] == "closed", timeout, after=n, what="close")
        self._reap()

    def kill(self) -> None:
        """SIGKILL to the consumer JVM: no LeaveGroup, the broker expires the session."""
        assert self.java_pid is not None
        os.kill(self.java_pid, signal.SIGKILL)
        self._reap()

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.stop()

    def stop(self) -> None:
        """Whatever state it is in: gone within seconds (used in finally blocks)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.java_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.java_pid, signal.SIGKILL)
        self.proc.kill()
        self.proc.wait(timeout=30)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def last_assignment(self) -> dict[str, Any] | None:
        with self._lock:
            for e in reversed(self.events):
                if e["event"] == "assigned":
                    return e
        return None


def settle(members: list[Member], *, min_generation: int = 0, quiet: float = 2.0, timeout: float = 60.0) -> int:
    """Waits until every member has been assigned in one same generation, at least `min_generation`,
    and nothing has happened for `quiet` seconds; returns that generation."""
    deadline = time.monotonic() + timeout
    while True:
        last = [m.last_assignment() for m in members]
        gens = {e["generation"] if e else None for e in last}
        newest = max((e2["t"] for m in members for e2 in m.events[-1:]), default=0)
        if len(gens) == 1 and None not in gens and all(m.events[-1]["event"] == "assigned" for m in members) \
                and time.time() * 1000 - newest >= quiet * 1000 and next(iter(gens)) >= min_generation:
            return int(gens.pop())  # type: ignore[arg-type]
        if time.monotonic() > deadline:
            raise AssertionError(f"group of {[m.client_id for m in members]} did not settle within {timeout} s: "
                                 f"last events {[m.events[-3:] for m in members]}")
        time.sleep(0.2)
