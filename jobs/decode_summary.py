"""Decode every record of a Kafka-source Parquet file of `__consumer_offsets` and print a summary
per record type (the interim run command until the Spark audit job exists).

    python -m jobs.decode_summary data/samples/real_broker_3_9_0.parquet [--show N]

Input: the Spark Kafka source's columns; `key` (binary), `value` (binary, null = tombstone),
`partition` (int) and `offset` (int) are required; an optional boolean `is_control` column marks
transaction markers. Read with pyarrow in batches; no Spark.

Output: per record type, the record count, tombstones, distinct groups and the key/value versions
seen; for `consumer` group metadata, the protocols and the Subscription/Assignment versions of the
members; then every quarantined record (bytes that do not decode) with its partition, offset and
the decoder's reason. Exit status 0 when the file was read (even with quarantined records), 2 for
a missing file or a wrong schema.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coordinator_core.consumer_protocol import decode_assignment, decode_subscription
from coordinator_core.errors import RecordDecodeError
from coordinator_core.records import GroupMetadataValue, decode

REQUIRED_COLUMNS = {"key": "binary", "value": "binary", "partition": "integer", "offset": "integer"}


class InputError(Exception):
    """The input file is missing or is not a Kafka-source Parquet file."""


@dataclass
class TypeSummary:
    records: int = 0
    tombstones: int = 0
    groups: set[str] = field(default_factory=set)
    key_versions: Counter[int] = field(default_factory=Counter)
    value_versions: Counter[int] = field(default_factory=Counter)


@dataclass
class DecodeSummary:
    """Accumulates the decoded records of one file."""

    by_type: dict[str, TypeSummary] = field(default_factory=lambda: defaultdict(TypeSummary))
    quarantined: list[tuple[int, int, str]] = field(default_factory=list)
    protocols: Counter[str] = field(default_factory=Counter)
    subscription_versions: Counter[int] = field(default_factory=Counter)
    assignment_versions: Counter[int] = field(default_factory=Counter)
    embedded_errors: list[tuple[int, int, str]] = field(default_factory=list)
    trailing_bytes: int = 0
    total: int = 0

    def add(self, key: bytes | None, value: bytes | None, partition: int, offset: int, *,
            is_control: bool = False) -> None:
        self.total += 1
        where = f"partition {partition} offset {offset}"
        try:
            rec = decode(key, value, is_control=is_control)  # type: ignore[arg-type]
        except RecordDecodeError as e:
            self.quarantined.append((partition, offset, str(e.at(where))))
            return
        summary = self.by_type[rec.record_type_name]
        summary.records += 1
        summary.key_versions[rec.key_version] += 1
        if rec.value_version is None:
            summary.tombstones += 1
        else:
            summary.value_versions[rec.value_version] += 1
        group = getattr(rec.key, "group", None) or getattr(rec.key, "group_id", None)
        if group is not None:
            summary.groups.add(group)
        if rec.key_trailing or rec.value_trailing:
            self.trailing_bytes += 1
        if isinstance(rec.value, GroupMetadataValue) and rec.value.protocol_type == "consumer":
            self._add_members(rec.value, partition, offset)

    def _add_members(self, value: GroupMetadataValue, partition: int, offset: int) -> None:
        if value.protocol is not None:
            self.protocols[value.protocol] += 1
        for m in value.members:
            for what, data, decoder, versions in (
                ("subscription", m.subscription, decode_subscription, self.subscription_versions),
                ("assignment", m.assignment, decode_assignment, self.assignment_versions),
            ):
                if what == "assignment" and not data:
                    continue  # a member the leader left out of the assignment
                try:
                    versions[decoder(data).version] += 1  # type: ignore[operator]
                except RecordDecodeError as e:
                    self.embedded_errors.append(
                        (partition, offset, f"member {m.member_id!r} {what}: {e}"))

    def render(self, *, show: int = 20) -> str:
        def versions(c: Counter[int]) -> str:
            return ", ".join(f"v{v}: {n}" for v, n in sorted(c.items())) or "-"

        lines = [f"{self.total} records, {self.total - len(self.quarantined)} decoded, "
                 f"{len(self.quarantined)} quarantined", ""]
        lines.append(f"{'record type':<40} {'records':>8} {'tombstones':>10} {'groups':>7}  key versions / value versions")
        for name in sorted(self.by_type):
            s = self.by_type[name]
            lines.append(f"{name:<40} {s.records:>8} {s.tombstones:>10} {len(s.groups):>7}  "
                         f"{versions(s.key_versions)} / {versions(s.value_versions)}")
        if self.protocols or self.subscription_versions:
            lines += ["", "consumer group metadata records by protocol: " + (", ".join(f"{p}: {n}" for p, n in sorted(
                self.protocols.items())) or "-"),
                      f"  member subscriptions {versions(self.subscription_versions)}; "
                      f"assignments {versions(self.assignment_versions)}"]
        if self.trailing_bytes:
            lines.append(f"records with bytes after their last field (ignored by Kafka): {self.trailing_bytes}")
        for title, items in (("quarantined records", self.quarantined),
                             ("embedded consumer-protocol bytes that do not decode", self.embedded_errors)):
            if items:
                lines += ["", f"{title} ({len(items)}):"]
                lines += [f"  partition {p} offset {o}: {reason}" for p, o, reason in items[:show]]
                if len(items) > show:
                    lines.append(f"  ... and {len(items) - show} more (--show to list more)")
        return "\n".join(lines)


def _check_schema(path: Path) -> tuple[list[str], bool]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(f"{path}: not a Parquet file ({e})") from e
    problems = []
    for name, kind in REQUIRED_COLUMNS.items():
        if name not in schema.names:
            problems.append(f"missing column {name!r}")
            continue
        t = schema.field(name).type
        ok = (pa.types.is_binary(t) or pa.types.is_large_binary(t)) if kind == "binary" else pa.types.is_integer(t)
        if not ok:
            problems.append(f"column {name!r} is {t}, expected {kind}")
    has_control = "is_control" in schema.names
    if has_control and not pa.types.is_boolean(schema.field("is_control").type):
        problems.append(f"column 'is_control' is {schema.field('is_control').type}, expected bool")
    if problems:
        raise InputError(f"{path}: not a Kafka-source __consumer_offsets file: " + "; ".join(problems)
                         + f" (columns: {', '.join(schema.names)})")
    return [*REQUIRED_COLUMNS, *(["is_control"] if has_control else [])], has_control


def summarize(path: Path) -> DecodeSummary:
    """Decodes every record of the Parquet file at `path`."""
    import pyarrow.parquet as pq

    columns, has_control = _check_schema(path)
    summary = DecodeSummary()
    for batch in pq.ParquetFile(path).iter_batches(columns=columns, batch_size=65536):
        data = batch.to_pydict()
        controls: Iterable[bool | None] = data["is_control"] if has_control else [False] * batch.num_rows
        for key, value, partition, offset, control in zip(data["key"], data["value"], data["partition"],
                                                          data["offset"], controls, strict=True):
            summary.add(key, value, partition, offset, is_control=bool(control))
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.decode_summary", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="Kafka-source Parquet file of __consumer_offsets records")
    parser.add_argument("--show", type=int, default=20, help="how many quarantined records to list (default 20)")
    args = parser.parse_args(argv)
    try:
        summary = summarize(args.path)
    except InputError as e:
        print(f"decode_summary: {e}", file=sys.stderr)
        return 2
    print(f"{args.path}:")
    print(summary.render(show=args.show))
    return 0


if __name__ == "__main__":
    sys.exit(main())
