"""The broker's own account of classic-group rebalances, read from its `server.log`.

Both group coordinators log each rebalance at INFO, in Kafka's layout `[yyyy-MM-dd HH:mm:ss,SSS]
LEVEL message (logger)`:

* Scala (Kafka <= 3.x, `kafka.coordinator.group.GroupCoordinator`, prefix `[GroupCoordinator 1]: `):
  GroupCoordinator#prepareRebalance "Preparing to rebalance group G in state S with old generation
  N (__consumer_offsets-P) (reason: R)", GroupCoordinator#onCompleteJoin "Stabilized group G
  generation N (__consumer_offsets-P) with M members" or "Group G with generation N is now empty
  (__consumer_offsets-P)", GroupCoordinator#removeMemberAndUpdateGroup "Member
  MemberMetadata(memberId=X, ...) has left group G through explicit `LeaveGroup`; client reason:
  C", GroupCoordinator#onExpireHeartbeat "Member X in group G has failed, removing it from the
  group".
* Java (Kafka >= 3.7 opt-in, 4.x only, `org.apache.kafka.coordinator.group.GroupMetadataManager`,
  prefix `[GroupCoordinator id=1 topic=__consumer_offsets partition=P] `): the same four messages
  from GroupMetadataManager#prepareRebalance, #completeClassicGroupJoin (ending in a period, no
  partition), and "[Group G] Member X has left group through explicit `LeaveGroup` request; client
  reason: C" (GroupMetadataManager#classicGroupLeaveToClassicGroup).

The reason R of "Preparing to rebalance" is what the coordinator passed to prepareRebalance:
"Adding new member X with group instance id I; client reason: C", "removing member X on heartbeat
expiration" (a crash: the session timed out), "Removing member X on LeaveGroup; client reason: C"
(Scala) / "explicit `LeaveGroup` request for (X) members." (Java) (a clean leave; the consumer's
"consumer poll timeout has expired." when max.poll.interval.ms ran out), "Leader X re-joining group
during S", "Updating metadata for member X during S", "Updating metadata for static member X with
instance id I" (a static member rejoined with new metadata), ...

KIP-848 consumer groups (Java coordinator, 4.x), GroupMetadataManager, each line prefixed `[GroupId G] `:
"Member X joins the consumer group using the consumer protocol." (or "... the classic protocol."),
"Member X fenced from the group because R." (#scheduleConsumerGroupSessionTimeout: R "the member
session expired" (4.4) or "its session expired" (4.0); #scheduleConsumerGroupRebalanceTimeout: "it
failed to transition from epoch N within Mms"), "Member X left the consumer group." and "Static Member
X with instance id I left the consumer group." (#consumerGroupLeave), then "Bumped group epoch to N
with metadata hash H." (or "Bumped group epoch to N."): the member lines since the group's previous
bump are why epoch N came (the log of `__consumer_offsets` cannot tell a fence from a leave: the
same tombstones; these lines can). A static member's "temporarily left" makes no new epoch.

`broker_account(lines)` pairs each rebalance's first "Preparing" line (old generation N-1) with the
line that ended it (generation N stabilized, or emptied) and returns one `BrokerGeneration` per
(group, generation). Lines of other loggers, and GroupCoordinator lines that say nothing about a
rebalance's start or end, are not used; a "Preparing"/"Stabilized"/"is now empty" line that does not
parse raises `BrokerLogError` naming the file and line (a format this module does not know must not
silently lose a generation's account). Log times are read in UTC unless told otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from coordinator_audit.core.errors import CoordinatorAuditError

__all__ = [
    "BrokerGeneration",
    "BrokerLogError",
    "LogLine",
    "broker_account",
    "classify_reason",
    "parse_lines",
    "read_server_log",
    "server_log_files",
]


class BrokerLogError(CoordinatorAuditError):
    """A GroupCoordinator line that should describe a rebalance does not parse; names file and line."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One GroupCoordinator log line: when (epoch ms), the message body after the coordinator's
    prefix, and where it was read (file, 1-based line number)."""

    timestamp_ms: int
    body: str
    source: str
    line_number: int


@dataclass(frozen=True, slots=True)
class BrokerGeneration:
    """The broker's account of how generation `generation_id` of `group_id` came to be.

    `rebalance_started_at` is the first "Preparing to rebalance" line with old generation
    `generation_id - 1` (None when the log does not reach back to it); `stabilized_at` the
    "Stabilized group" line (or "is now empty" for a generation that ended the rebalance Empty:
    `broker_state` tells which). `broker_cause` classifies `broker_reason` (`classify_reason`).
    A consumer group's epoch (`broker_state` "consumer") has the member lines before its bump as
    reason, their cause, and the first of them (or the bump) as start; no stabilization."""

    group_id: str
    generation_id: int
    broker_reason: str | None
    broker_cause: str | None
    broker_client_reason: str | None
    rebalance_started_at: int | None
    stabilized_at: int | None
    rebalance_duration_ms: int | None
    broker_state: str
    broker_member_count: int | None


_LINE = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] (?P<level>[A-Z]+) (?P<msg>.*)$")
_PREFIX = re.compile(r"^\[GroupCoordinator (?:\d+|id=\d+[^\]]*)\]:? ")
_LOGGER = re.compile(r" \((?:kafka\.coordinator\.group\.GroupCoordinator|org\.apache\.kafka\.coordinator\.group\.[\w.$]+)\)$")

_PARTITION = r"(?: \(__consumer_offsets-\d+\))?"
_PREPARING = re.compile(r"^Preparing to rebalance group (?P<group>.+?) in state (?P<state>\w+) with old generation "
                        r"(?P<gen>-?\d+)" + _PARTITION + r" \(reason: (?P<reason>.*)\)\.?$")
_STABILIZED = re.compile(r"^Stabilized group (?P<group>.+?) generation (?P<gen>\d+)" + _PARTITION
                         + r" with (?P<members>\d+) members\.?$")
_EMPTY = re.compile(r"^Group (?P<group>.+?) with generation (?P<gen>\d+) is now empty" + _PARTITION + r"\.?$")
_LEFT_SCALA = re.compile(r"^Member MemberMetadata\(memberId=(?P<member>[^,]+), .*\) has left group (?P<group>.+?) "
                         r"through explicit `LeaveGroup`; client reason: (?P<client>.*)$")
_LEFT_JAVA = re.compile(r"^\[Group (?P<group>.+?)\] (?:Member|Pending member) (?P<member>\S+) has left group through "
                        r"explicit `LeaveGroup` request; client reason: (?P<client>.*)$")
_CLIENT_REASON = re.compile(r"; client reason: (?P<client>.*)$")
_GROUP_ID = re.compile(r"^\[GroupId (?P<group>.+?)\] (?P<rest>.*)$")
_BUMPED = re.compile(r"^Bumped group epoch to (?P<epoch>\d+)(?: with metadata hash -?\d+)?\.$")
_CONSUMER_MEMBER: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^Member \S+ joins the consumer group using the (?:consumer|classic) protocol\.$"), "member_joined"),
    (re.compile(r"^Member \S+ fenced from the group because (?:the member|its) session expired\.$"),
     "member_session_expired"),
    (re.compile(r"^Member \S+ fenced from the group because it failed to transition from epoch"),
     "member_rebalance_timeout"),
    (re.compile(r"^Member \S+ fenced from the group because "), "member_fenced"),
    (re.compile(r"^Static Member \S+ with instance id .+ temporarily left the consumer group\.$"), ""),
    (re.compile(r"^(?:Static )?Member \S+ (?:with instance id .+ )?left the consumer group\.$"), "member_left"),
)
"""A consumer group's member lines and the cause each names ("": no epoch follows from it)."""

# (pattern of a prepareRebalance reason, cause); first match wins.
_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^removing member \S+ on heartbeat expiration"), "member_session_expired"),
    (re.compile(r"^Removing member \S+ on LeaveGroup|^explicit `LeaveGroup` request for"), "member_left"),
    (re.compile(r"^Removing \S+ on pending sync request expiration"), "member_sync_expired"),
    (re.compile(r"^Adding new member \S+ with group instance id (?:None|null);"), "member_joined"),
    (re.compile(r"^Adding new member \S+ with group instance id "), "static_member_joined"),
    (re.compile(r"^Updating metadata for static member|^Group's selectedProtocol will change because static member"),
     "static_member_rejoined"),
    (re.compile(r"^Leader \S+ re-joining group during|^Updating metadata for member|^Member \S+ is joining group during"),
     "member_rejoined"),
    (re.compile(r"^Freshly-loaded group"), "group_loaded_over_capacity"),
)


def classify_reason(reason: str | None, client_reason: str | None = None) -> str | None:
    """The cause named by a prepareRebalance reason (see `_CAUSES`), refined by the client's reason:
    a LeaveGroup sent because max.poll.interval.ms ran out (AbstractCoordinator#maybeLeaveGroup
    "consumer poll timeout has expired.") is `member_poll_timeout`; a rejoin to revoke partitions
    (ConsumerCoordinator#onJoinComplete, KIP-429) is `cooperative_follow_up`. "other" for an
    unknown reason, None without one."""
    if reason is None:
        return None
    client = client_reason or ""
    for pattern, cause in _CAUSES:
        if pattern.search(reason):
            if cause == "member_left" and "poll timeout" in client:
                return "member_poll_timeout"
            if cause == "member_rejoined" and "revoke partitions" in client:
                return "cooperative_follow_up"
            return cause
    return "other"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _epoch_ms(text: str, tz: timezone) -> int:
    dt = datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=tz)
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def parse_lines(lines: Iterable[str], *, source: str = "<lines>", utc_offset_minutes: int = 0) -> Iterator[LogLine]:
    """The GroupCoordinator lines among `lines` (any server.log content; continuation lines of
    stack traces and other loggers' lines are passed over)."""
    tz = timezone(timedelta(minutes=utc_offset_minutes))
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if "GroupCoordinator" not in line:
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        msg = m.group("msg")
        logger = _LOGGER.search(msg)
        prefix = _PREFIX.match(msg)
        if logger is None or prefix is None:
            continue
        body = msg[prefix.end():logger.start()]
        yield LogLine(_epoch_ms(m.group("ts"), tz), body, source, number)


def server_log_files(path: str | Path) -> list[Path]:
    """`path` itself when a file; for a directory, its `server.log*` files (rotated ones included),
    oldest name first (`server.log` last). BrokerLogError when there is none."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted((f for f in p.iterdir() if f.is_file() and f.name.startswith("server.log")),
                       key=lambda f: (f.name == "server.log", f.name))
        if files:
            return files
        raise BrokerLogError(f"server log {path}: the directory holds no server.log* file")
    raise BrokerLogError(f"server log {path}: no such file or directory")


def read_server_log(path: str | Path, *, utc_offset_minutes: int = 0) -> list[LogLine]:
    """Every GroupCoordinator line of the file or directory `path` (`server_log_files`), in time order
    (stable: lines of one millisecond keep their file order)."""
    out: list[LogLine] = []
    for f in server_log_files(path):
        with f.open(encoding="utf-8", errors="replace") as fh:
            out.extend(parse_lines(fh, source=str(f), utc_offset_minutes=utc_offset_minutes))
    out.sort(key=lambda line: line.timestamp_ms)
    return out


def _fail(line: LogLine, what: str) -> BrokerLogError:
    return BrokerLogError(f"server log {line.source}:{line.line_number}: {what} line does not parse: {line.body!r}")


def broker_account(lines: Iterable[LogLine]) -> list[BrokerGeneration]:
    """One `BrokerGeneration` per (group, generation) the lines show ending a rebalance (module
    docstring), in log order. A generation whose start is not in the lines has no reason or start."""
    # group -> (old generation, started_at, reason) of the rebalance in progress
    pending: dict[str, tuple[int, int, str]] = {}
    left: dict[tuple[str, str], str] = {}  # (group, member) -> client reason of its LeaveGroup
    out: list[BrokerGeneration] = []
    consumer: dict[str, list[tuple[LogLine, str, str]]] = {}  # group -> member lines since its last bump
    for line in lines:
        body = line.body
        if body.startswith("[GroupId "):
            _consumer_line(line, consumer, out)
        elif body.startswith("Preparing to rebalance group "):
            m = _PREPARING.match(body)
            if m is None:
                raise _fail(line, "a 'Preparing to rebalance'")
            group, old = m.group("group"), int(m.group("gen"))
            if group not in pending or pending[group][0] != old:
                pending[group] = (old, line.timestamp_ms, m.group("reason"))
        elif body.startswith("Stabilized group ") or " is now empty" in body:
            m = _STABILIZED.match(body)
            state = "Stable"
            if m is None:
                m = _EMPTY.match(body)
                state = "Empty"
            if m is None:
                raise _fail(line, "a 'Stabilized group' / 'is now empty'")
            group, gen = m.group("group"), int(m.group("gen"))
            members = int(m.group("members")) if state == "Stable" else 0
            started: int | None = None
            reason: str | None = None
            if group in pending and pending[group][0] == gen - 1:
                _, started, reason = pending.pop(group)
            client = _client_reason(reason, group, left)
            out.append(BrokerGeneration(
                group, gen, reason, classify_reason(reason, client), client, started, line.timestamp_ms,
                None if started is None else line.timestamp_ms - started, state, members))
        else:
            m = _LEFT_JAVA.match(body) or _LEFT_SCALA.match(body)
            if m is not None:
                left[(m.group("group"), m.group("member"))] = m.group("client")
    return out


def _client_reason(reason: str | None, group: str, left: dict[tuple[str, str], str]) -> str | None:
    """The client's own reason: in the prepareRebalance reason (Scala, and Java joins), else, for a
    Java LeaveGroup ("explicit `LeaveGroup` request for (X) members."), from X's "has left group" line."""
    if reason is None:
        return None
    m = _CLIENT_REASON.search(reason)
    if m is not None:
        return m.group("client")
    j = re.match(r"^explicit `LeaveGroup` request for \((?P<members>.*)\) members\.?$", reason)
    if j is not None:
        reasons = [left[(group, member.strip())] for member in j.group("members").split(",")
                   if (group, member.strip()) in left]
        return "; ".join(reasons) if reasons else None
    return None


def _consumer_line(line: LogLine, pending: dict[str, list[tuple[LogLine, str, str]]],
                   out: list[BrokerGeneration]) -> None:
    """A KIP-848 consumer group's line (module docstring): a member line is held for the group's
    next epoch; "Bumped group epoch" gives that epoch's `BrokerGeneration` (its reason the held
    member lines, joined by "; ", its cause the first one's; started when the first of them was
    logged, else at the bump; no stabilization line: the records tell when the group reached it)."""
    m = _GROUP_ID.match(line.body)
    if m is None:
        return
    group, rest = m.group("group"), m.group("rest")
    if rest.startswith("Bumped group epoch to "):
        b = _BUMPED.match(rest)
        if b is None:
            raise _fail(line, "a 'Bumped group epoch'")
        held = pending.pop(group, [])
        reason = "; ".join(text for _, text, _ in held) or None
        started = held[0][0].timestamp_ms if held else line.timestamp_ms
        out.append(BrokerGeneration(group, int(b.group("epoch")), reason, held[0][2] if held else None, None,
                                    started, None, None, "consumer", None))
        return
    for pattern, cause in _CONSUMER_MEMBER:
        if pattern.search(rest):
            if cause:
                pending.setdefault(group, []).append((line, rest, cause))
            return
