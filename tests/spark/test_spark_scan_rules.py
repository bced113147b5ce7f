"""The single pass's kernel is held to the offset-commit rules of `coordinator_audit.core.audit.offsets`:
its partial summaries, given their windows and merged in log order with `OffsetSummary.merge`
(what the replay's `GroupAuditor.merge_stretch` does), equal the summaries the core folds record
by record, for any cut of the log into chunks, whether each chunk closes its stretches or the task
carries them from chunk to chunk; and the replay of the kernel's rows, whatever stretches it holds
back, gives the pure audit's offset_commits rows, offset_regression violations and open offset
windows, however its input is cut into batches (Spark-free)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import example, given, settings
from hypothesis import strategies as st

from coordinator_audit.core.audit import GroupAuditor
from coordinator_audit.core.audit.offsets import OffsetSummary
from coordinator_audit.udfs.replay import (
    COUNT_FIELDS,
    COUNTS_TABLE,
    STATE_TABLE,
    handed_input,
    make_replay_fn,
    wide_column,
)
from coordinator_audit.udfs.scan import HANDED_KINDS, KIND_PARTIAL, TaskKeys, scan_chunk
from tests.spark.test_spark_offsets_path import T, _commit, _gm, _gm_tombstone, _member, _tombstone
from tests.spark.test_spark_replay import _expected, _wide_rows, _windows
from tests.spark.test_spark_scan import _batch

GROUPS = ("g", "h")
TPS = (("t", 0), ("t", 1), ("u", 0))

_commit_event = st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(TPS), st.integers(0, 4))
_event = st.one_of(  # mostly commits, with small offsets: repeats and backwards steps are frequent
    _commit_event, _commit_event, _commit_event,
    st.tuples(st.just("tombstone"), st.sampled_from(GROUPS), st.sampled_from(TPS)),
    st.tuples(st.just("gm"), st.sampled_from(GROUPS), st.sampled_from(("Stable", "Stable", "Empty", "Dead"))),
    # records of the group the pass does not summarise: a commit whose value is cut short, a key of
    # another record type
    st.tuples(st.just("bad"), st.sampled_from(GROUPS), st.sampled_from(TPS)),
    st.tuples(st.just("other"), st.sampled_from(GROUPS)),
)


def _records(events: list[tuple]) -> tuple[list[tuple[bytes, bytes | None]], list[tuple]]:
    """Encoded records and, per record, (kind, group, topic-partition, offset, window state)."""
    records, meta = [], []
    gen = 0
    for e in events:
        if e[0] == "commit":
            _, g, (t, p), o = e
            records.append(_commit(g, t, p, o, T + len(records) * 10))
        elif e[0] == "tombstone":
            _, g, (t, p) = e
            records.append(_tombstone(g, t, p))
        elif e[0] == "bad":
            _, g, (t, p) = e
            key, value = _commit(g, t, p, 1, T)
            records.append((key, value[:8]))
        elif e[0] == "other":
            # a key of a record type with no known layout: skipped and counted (a known type whose
            # value does not decode, such as a ConsumerGroupMetadata value cut short, is quarantined)
            records.append((b"\x00\x63" + len(e[1]).to_bytes(2, "big") + e[1].encode(), b"\x00\x00"))
        else:
            _, g, state = e
            gen += 1
            members = [_member("m1", [0, 1])] if state == "Stable" else []
            records.append(_gm_tombstone(g) if state == "Dead" else _gm(g, gen, members))
        meta.append(e)
    return records, meta


def _core(meta: list[tuple]) -> dict[tuple, OffsetSummary]:
    """The core's fold: per (group, topic-partition, window opening offset), record by record."""
    window: dict[str, tuple[int | None, bool]] = {g: (None, False) for g in GROUPS}
    out: dict[tuple, OffsetSummary] = {}
    for offset, e in enumerate(meta):
        if e[0] == "gm":
            window[e[1]] = (offset, e[2] == "Stable")
            continue
        if e[0] in ("bad", "other"):  # quarantined, skipped: no commit
            continue
        g, tp = e[1], e[2]
        start, stable = window[g]
        s = out.setdefault((g, tp, start), OffsetSummary(0, offset))
        if e[0] == "commit":
            s.commit(e[3], T + offset * 10, offset, stable)
        else:
            s.tombstone(offset)
    return out


def _kernel(records: list[tuple[bytes, bytes | None]], meta: list[tuple], cuts: list[int], *, carry: bool = False,
            max_keys: int = TaskKeys.MAX_KEYS) -> tuple[dict[tuple, OffsetSummary], int]:
    """The kernel over the chunks `cuts` makes, one task (shared `TaskKeys`), stitched as the job
    does, and how many partial rows it gave; `carry`: stretches stay open from chunk to chunk (as
    in a job's task), else each chunk closes its own; `max_keys`: when the task forgets its keys."""
    batch = _batch(records)
    keys = TaskKeys(max_keys=max_keys)
    partials = []
    bounds = [0, *sorted(set(cuts)), len(records)]
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        if hi > lo:
            out = scan_chunk(pa.Table.from_batches([batch.slice(lo, hi - lo)]), chunk=i, keys=keys, final=not carry)
            partials += [r for r in out.to_pylist() if r["_kind"] == KIND_PARTIAL]
    for b in keys.flush():
        partials += b.to_pylist()
    openings = {g: [o for o, e in enumerate(meta) if e[0] == "gm" and e[1] == g] for g in GROUPS}
    reached_at = {o: e[2] == "Stable" for o, e in enumerate(meta) if e[0] == "gm"}
    out: dict[tuple, OffsetSummary] = {}
    for r in sorted(partials, key=lambda r: r["offset"]):
        before = [o for o in openings[r["group_id"]] if o < r["offset"]]
        start = before[-1] if before else None
        stable = reached_at.get(start, False) if start is not None else False
        s = OffsetSummary.from_list([
            r["commits"], r["tombstones"], r["first_offset"],
            r["last_offset"] if r["commits"] else OffsetSummary(0, 0).last_offset,
            r["first_commit_timestamp"], r["last_commit_timestamp"], r["regressions"] if stable else 0,
            r["offset"], r["last_source_offset"], r["last_commit_source_offset"], r["partition"]])
        key = (r["group_id"], (r["topic"], r["partition_key"]), start)
        out[key] = out[key].merge(s, stable=stable) if key in out else s
    return out, len(partials)


def _stretches(meta: list[tuple]) -> set[tuple]:
    """(group, topic-partition, offset of the group's side record before them) of the commits and
    tombstones: the stretches the kernel gives."""
    last_side: dict[str, int | None] = dict.fromkeys(GROUPS)
    out = set()
    for offset, e in enumerate(meta):
        if e[0] in ("commit", "tombstone"):
            out.add((e[1], e[2], last_side[e[1]]))
        else:
            last_side[e[1]] = offset
    return out


@settings(max_examples=300, deadline=None)
# a chunk holding only a GroupMetadata record still ends the stretches carried into it
@example([("commit", "g", ("t", 0), 3), ("gm", "g", "Stable"), ("commit", "g", ("t", 0), 1)], [1, 2])
# a commit that does not decode, or a record of another type, ends its group's stretches: the replay
# reads it after the stretch before it, and before the one after it
@example([("commit", "g", ("t", 0), 3), ("bad", "g", ("t", 1)), ("commit", "g", ("t", 0), 4),
          ("other", "g"), ("commit", "g", ("t", 0), 5)], [])
@given(st.lists(_event, min_size=1, max_size=60), st.lists(st.integers(0, 60), max_size=6))
def test_kernel_partials_merged_are_the_core_fold(events, cuts) -> None:
    """The contract between the offset-commit rules' scalar definition (`OffsetSummary.commit`,
    `tombstone`, `merge`) and their columnar form (the kernel's `summarise`): on random commit
    sequences cut anywhere into chunks, the kernel's stretches merged in log order are the core's
    record-by-record fold, per group, topic-partition and window."""
    records, meta = _records(events)
    core = _core(meta)
    assert _kernel(records, meta, cuts)[0] == core
    carried, stretches = _kernel(records, meta, cuts, carry=True)
    assert carried == core
    # carried over the chunks, a topic-partition's commits between two records of its group that the
    # pass sends to the replay are one stretch, however the log is cut
    assert stretches == len(_stretches(meta))
    # a task that forgets its keys between chunks closes its open stretches first
    assert _kernel(records, meta, cuts, carry=True, max_keys=0)[0] == core


@settings(max_examples=200, deadline=None)
# a chunk boundary splits t-0's stretch in two: the second merges into the first, held back or not
@example([("commit", "g", ("t", 0), 1), ("commit", "g", ("t", 1), 2), ("commit", "g", ("t", 0), 0)], [2], False, 9)
# t-0 held back merged, t-1 held back, then t-1's next stretch in the next batch merges them all: in
# log order, so the open windows keep the order of the auditor's summaries
@example([("commit", "g", ("t", 0), 1), ("commit", "g", ("t", 1), 2), ("commit", "g", ("t", 0), 3),
          ("commit", "g", ("t", 1), 4)], [2, 3], False, 3)
# t-1 merged at once (a regression candidate), t-0 held back, then t-0's next stretch in the next
# batch merges it: the window's summaries are put back in log order
@example([("commit", "g", ("t", 0), 5), ("commit", "g", ("t", 1), 5), ("commit", "g", ("t", 1), 3),
          ("commit", "g", ("t", 0), 6)], [3], False, 3)
# a held-back stretch, then a GroupMetadata record that closes its window (in the same batch and not)
@example([("gm", "g", "Stable"), ("commit", "g", ("t", 0), 3), ("gm", "g", "Empty"), ("tombstone", "g", ("t", 0))],
         [], True, 2)
@given(st.lists(_event, min_size=1, max_size=60), st.lists(st.integers(0, 60), max_size=6), st.booleans(),
       st.integers(1, 12))
def test_the_replay_of_the_kernels_rows_is_the_pure_audit(events, cuts, carry, batch_rows) -> None:
    records, meta = _records(events)
    batch = _batch(records)
    keys = TaskKeys()
    bounds = [0, *sorted(set(cuts)), len(records)]
    outputs = [scan_chunk(pa.Table.from_batches([batch.slice(lo, hi - lo)]), chunk=i, keys=keys, final=not carry)
               for i, (lo, hi) in enumerate(itertools.pairwise(bounds)) if hi > lo]
    rows = pa.concat_tables([*outputs, *(pa.Table.from_batches([b]) for b in keys.flush())])
    rows = rows.filter(pc.is_in(rows.column("_kind"), pa.array(HANDED_KINDS)))
    table = handed_input(rows, None)
    assert table is not None
    out = pa.Table.from_batches(list(make_replay_fn(batch_rows=batch_rows)(iter(table.to_batches(batch_rows)))))

    log = [(e[1], 0, o, T + o, *records[o]) for o, e in enumerate(meta)]
    expected, got = _expected(log), _wide_rows(out)
    assert got["offset_commits"] == expected["offset_commits"]
    assert got["violations"] == expected["violations"]
    # every malformed commit quarantined with its reason, none taken for a repeat of the stretch around it
    assert got["quarantine"] == expected["quarantine"]
    assert sum(1 for _ in got["quarantine"].elements()) == sum(1 for e in meta if e[0] == "bad")
    replayed = [dict(zip(["group_id", *COUNT_FIELDS], c, strict=True)) for c in got[COUNTS_TABLE].elements()]
    assert sum(c["duplicates"] for c in replayed) == 0
    assert sum(c["skipped_other_type"] for c in replayed) == sum(1 for e in meta if e[0] == "other")
    windows = {}
    for group in dict.fromkeys(e[1] for e in meta):
        auditor = GroupAuditor(group)
        list(auditor.feed([r[1:] for r in log if r[0] == group]))
        windows[group] = _windows(auditor)
    states = {r[wide_column(STATE_TABLE, "group_id")]: r[wide_column(STATE_TABLE, "offset_windows")]
              for r in out.to_pylist() if r["_table"] == STATE_TABLE}
    assert states == windows  # in the order of the auditor's summaries too
