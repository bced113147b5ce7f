"""Hashes of the pure-Python audit's output, to check that a refactoring changes no table: prints one
line per input (records, rows by kind, a SHA-256 of every row, the saved state and the counts);
asserts nothing.

Run from the project root: `.venv/bin/python benchmarks/audit_row_hash.py [--tree DIR] [--records N]
[--groups M]`. `--tree DIR` audits with another version's `coordinator_audit.core` (a directory holding it,
e.g. `git archive <commit> coordinator_audit.core | tar -x -C DIR`): equal lines mean identical output.

Inputs: every `data/samples/*.parquet` log, a generated scale log (`coordinator_audit.core.sim.scale`, N
records of M groups), and the same log perturbed with a fixed seed (offset commits stepping back,
offset tombstones, undecodable values, group tombstones), so that regressions, tombstones and
quarantine are hashed too. Each group is audited in one pass, and again saved at its middle
(`to_dict` through JSON) and resumed (`from_dict`); both are hashed.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import random
import struct
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

Record = tuple[int, int, int, bytes, bytes | None]


def _by_group(records: list[Record]) -> dict[bytes, list[Record]]:
    """Records by the group id every record key of `__consumer_offsets` starts with."""
    out: dict[bytes, list[Record]] = {}
    for r in records:
        k = r[3]
        out.setdefault(k[4:4 + int.from_bytes(k[2:4], "big")] if len(k) >= 4 else b"", []).append(r)
    return out


def digest(records: list[Record]) -> tuple[str, int, dict[str, int]]:
    from coordinator_audit.core.audit import GroupAuditor

    h = hashlib.sha256()
    n = 0
    kinds: collections.Counter[str] = collections.Counter()
    for _, rs in sorted(_by_group(records).items()):
        one = GroupAuditor()
        rows: list[Any] = [*one.feed(rs), *one.finish()]
        for part in (repr(rows), json.dumps(one.to_dict()), repr(one.counts)):
            h.update(part.encode())
        n += len(rows)
        kinds.update(getattr(r, "kind", None) or type(r).__name__ for r in rows)
        k = len(rs) // 2
        first = GroupAuditor()
        resumed_rows = list(first.feed(rs[:k]))
        state = json.dumps(first.to_dict())
        second = GroupAuditor.from_dict(json.loads(state))
        resumed_rows += [*second.feed(rs[k:]), *second.finish()]
        for part in (state, repr(resumed_rows), json.dumps(second.to_dict())):
            h.update(part.encode())
    return h.hexdigest()[:16], n, dict(sorted(kinds.items()))


def _sample(path: Path) -> list[Record]:
    import pyarrow.parquet as pq

    t = pq.read_table(path).to_pydict()
    ts = [int(x.timestamp() * 1000) if x is not None else 0 for x in t["timestamp"]]
    return sorted(zip(t["partition"], t["offset"], ts, t["key"], t["value"], strict=True), key=lambda r: (r[0], r[1]))


def _scale(records: int, groups: int) -> list[Record]:
    from coordinator_audit.core.sim.scale import ScaleConfig, generate

    out: list[Record] = []
    for b in generate(ScaleConfig(records=records, groups=groups)):
        out.extend(zip(b.partition, b.offset, b.timestamp_ms, b.key, b.value, strict=True))
    return sorted(out, key=lambda r: (r[0], r[1]))


def _perturbed(records: list[Record]) -> list[Record]:
    rng = random.Random(7)
    out: list[Record] = []
    for p, o, ts, k, v in records:
        x = rng.random()
        commit = k[:2] in (b"\x00\x00", b"\x00\x01")
        if commit and v is not None and x < 0.05:  # back to half the offset: a regression in a Stable window
            v = v[:2] + struct.pack(">q", struct.unpack_from(">q", v, 2)[0] // 2) + v[10:]
        elif commit and x < 0.07:
            v = None  # an offset tombstone
        elif commit and v is not None and x < 0.075:
            v = v[:5]  # undecodable: quarantined
        elif k[:2] == b"\x00\x02" and x < 0.03:
            v = None  # a group tombstone
        out.append((p, o, ts, k, v))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="the directory whose coordinator_audit.core is audited")
    ap.add_argument("--records", type=int, default=400_000, help="records of the generated scale log")
    ap.add_argument("--groups", type=int, default=100, help="groups of the generated scale log")
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    import coordinator_audit.core

    print(f"coordinator_audit.core from {Path(coordinator_audit.core.__file__).parent}")
    inputs: list[tuple[str, list[Record]]] = [(p.name, _sample(p)) for p in sorted((ROOT / "data/samples").glob("*.parquet"))]
    scale = _scale(args.records, args.groups)
    inputs += [(f"scale ({args.records:,} records, {args.groups} groups)", scale),
               ("scale, perturbed", _perturbed(scale))]
    for name, records in inputs:
        sha, n, kinds = digest(records)
        print(f"{name}: {len(records):,} records, {n:,} rows, sha256 {sha}; {kinds}")


if __name__ == "__main__":
    main()
