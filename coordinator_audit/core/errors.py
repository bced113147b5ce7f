"""The one exception hierarchy of coordinator_audit.core.

Protocol outcomes (a JoinGroup rejected with UNKNOWN_MEMBER_ID, ...) are responses carrying an
`Errors` code, never exceptions. Exceptions are for bad input bytes and broken invariants.
"""

from __future__ import annotations


class CoordinatorAuditError(Exception):
    """Base class of every exception raised by coordinator_audit.core."""


class RecordDecodeError(CoordinatorAuditError, ValueError):
    """Bytes that do not decode: names what was being read, the field and the byte position.

    `where` is filled by callers that know the record's log position (partition/offset).
    """

    def __init__(self, message: str, *, schema: str = "", field: str = "", position: int | None = None,
                 where: str = "") -> None:
        self.schema = schema
        self.field = field
        self.position = position
        self.where = where
        self.reason = message
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        if self.where:
            parts.append(self.where)
        if self.schema:
            parts.append(self.schema + (f".{self.field}" if self.field else ""))
        elif self.field:
            parts.append(self.field)
        if self.position is not None:
            parts.append(f"byte {self.position}")
        prefix = ", ".join(parts)
        return f"{prefix}: {self.reason}" if prefix else self.reason

    def at(self, where: str) -> RecordDecodeError:
        """Returns a copy that also names the record's log position (e.g. 'partition 12 offset 345')."""
        return RecordDecodeError(self.reason, schema=self.schema, field=self.field,
                                 position=self.position, where=where)


class RecordEncodeError(CoordinatorAuditError, ValueError):
    """A record that cannot be written at the requested version (a field out of range, ...)."""


class IllegalStateTransition(CoordinatorAuditError):
    """A group state change that Kafka's valid-previous-state table forbids."""

    def __init__(self, group_id: str, current: object, target: object) -> None:
        self.group_id = group_id
        self.current = current
        self.target = target
        super().__init__(f"group {group_id!r} cannot move from {current} to {target}")


class CoordinatorInvariantError(CoordinatorAuditError):
    """An internal invariant of the coordinator port broke (Kafka would throw IllegalStateException)."""


class ScenarioError(CoordinatorAuditError, ValueError):
    """A simulator scenario that is malformed: names the key/step that is wrong."""


class ConfigError(CoordinatorAuditError, ValueError):
    """A configuration value that is missing, unknown or out of range: names the key."""


class AssignorError(CoordinatorAuditError):
    """A partition assignor failed where Kafka's Java assignor throws (bad input or a broken internal
    invariant); `java_exception` names the exception the Java client raises at the same point."""

    def __init__(self, message: str, *, java_exception: str = "IllegalStateException") -> None:
        self.java_exception = java_exception
        super().__init__(f"{message} (Java: {java_exception})")
