"""The replay's input handed from task to task as local files (`coordinator_audit.udfs.handoff`, `Scan.replay`).

Without Spark: a group's rows all land in one bucket, whatever the process (no salted hash); the
writer hands off exactly the rows of the kinds it is given, and its reports lead back to them;
a bucket's replay input is sorted, filtered and counted as the Spark path does it.
With Spark: the scan's rows read back from the files equal those it keeps without a handoff; whole
audits, fresh and resumed (carried state handed off too), with a group filter, give the same
tables through the files as through Spark's shuffle; the run's scratch directory is gone after it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaProtocolError
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from coordinator_audit.jobs import nightly
from coordinator_audit.jobs import offsets_path as op
from coordinator_audit.jobs.audit import Capabilities, run_audit, saved_states
from coordinator_audit.jobs.config import load_config
from coordinator_audit.udfs import handoff as H
from coordinator_audit.udfs.replay import (
    STATE_WINDOWS_TYPE,
    hand_off_states,
    handed_input,
    saved_states_table,
)
from coordinator_audit.udfs.scan import KIND_PARTIAL, KIND_RANGE, KIND_SIDE, SCAN_FIELDS
from coordinator_audit.udfs.schemas import GROUP_STATE_SCHEMA
from tests.spark.test_spark_nightly import _scale_log

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
_SCAN = pa.schema([pa.field(name, t) for name, t, _ in SCAN_FIELDS])


def _scan_rows(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=_SCAN)


def test_a_groups_bucket_does_not_depend_on_the_process() -> None:
    groups = [f"group-{i}" for i in range(200)] + [None, "é-ünïcode"]
    here = H.bucket_of(pa.array(groups), 7).tolist()
    code = ("import pyarrow as pa; from coordinator_audit.udfs.handoff import bucket_of; "
            f"print(bucket_of(pa.array({groups!r}), 7).tolist())")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == str(here)
    assert here[-2] == 0  # no group: bucket 0
    assert set(here) == set(range(7))  # 200 groups reach every bucket
    chunked = H.bucket_of(pa.chunked_array([groups[:50], groups[50:]]), 7).tolist()
    assert chunked == here


def test_the_writer_hands_off_the_chosen_kinds_and_its_reports_lead_back_to_them(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(H, "FLUSH_ROWS", 64)  # several flushes: several record batches per bucket
    spec = H.Handoff(str(tmp_path / "pass"), 4)
    writer = H.HandoffWriter(spec, 3, columns=_SCAN.names, kinds=(KIND_SIDE, KIND_PARTIAL))
    sent: list[dict] = []
    for b in range(10):
        rows = [{"_kind": (KIND_SIDE, KIND_PARTIAL, KIND_RANGE)[i % 3], "group_id": f"g{(b * 7 + i) % 13}",
                 "partition": i % 2, "offset": b * 100 + i} for i in range(30)]
        rest = writer.add(_scan_rows(rows))
        assert rest.column("_kind").to_pylist() == [KIND_RANGE] * 10
        sent += [r for r in rows if r["_kind"] != KIND_RANGE]
    reports = writer.close()
    assert sum(r[3] for r in reports) == len(sent) == 200
    assert all(Path(r[0]).name.startswith("part-00003-") for r in reports)
    parts = H.parts_by_bucket(reports)
    got: list[dict] = []
    for bucket, files in parts.items():
        table = H.read_bucket(files)
        assert table is not None
        assert set(H.bucket_of(table.column("group_id"), 4).tolist()) == {bucket}
        got += table.select(["_kind", "group_id", "partition", "offset"]).to_pylist()
    key = ("_kind", "group_id", "partition", "offset")
    assert sorted(tuple(r[k] for k in key) for r in got) == sorted(tuple(r[k] for k in key) for r in sent)
    assert len(reports) > len(parts)  # more than one record batch per bucket
    for path, _, index, rows in reports:  # a report is one record batch of its Arrow IPC file
        with pa.OSFile(path) as source:
            assert pa.ipc.open_file(source).get_batch(index).num_rows == rows
    (path,) = {r[0] for r in reports}
    units = pa.record_batch({"path": [path], "batches": [[r[2] for r in reports]]})
    back = pa.Table.from_batches(list(H.read_files([units]))).select(list(key)).to_pylist()
    assert sorted(tuple(r[k] for k in key) for r in back) == sorted(tuple(r[k] for k in key) for r in sent)


def test_a_writer_of_every_row_reports_them_all_and_one_of_some_kinds_refuses(tmp_path) -> None:
    rows = [{"_kind": KIND_SIDE, "group_id": f"g{i % 5}", "partition": 0, "offset": i} for i in range(40)]
    reports = H.HandoffWriter(H.Handoff(str(tmp_path / "all"), 3), 0, columns=_SCAN.names).write_all(
        [_scan_rows(rows[:25]), _scan_rows(rows[25:])])
    assert sum(r[3] for r in reports) == 40 and len(H.parts_by_bucket(reports)) == 3
    chosen = H.HandoffWriter(H.Handoff(str(tmp_path / "some"), 3), 0, columns=_SCAN.names, kinds=(KIND_SIDE,))
    with pytest.raises(ValueError, match="takes only some kinds"):
        chosen.write_all([_scan_rows(rows)])


def test_a_buckets_input_is_sorted_filtered_and_counted_as_spark_does_it() -> None:
    rows = pa.Table.from_batches([_scan_rows([
        {"_kind": KIND_SIDE, "group_id": "b", "partition": 1, "offset": 50, "chunk": 7, "records_in": 4,
         "key": b"k", "value": b"v", "timestamp_ms": 5},
        {"_kind": KIND_PARTIAL, "group_id": "b", "partition": 1, "offset": 40, "topic": "t", "partition_key": 0,
         "commits": 2},
        {"_kind": KIND_SIDE, "group_id": None, "partition": 0, "offset": 9, "chunk": 7, "records_in": 0},
        {"_kind": KIND_SIDE, "group_id": "a", "partition": 0, "offset": 3, "chunk": 8, "records_in": 1},
        {"_kind": KIND_SIDE, "group_id": "skip-me", "partition": 0, "offset": 1, "chunk": 7, "records_in": 0},
    ])])
    states = pa.table({"group_id": ["b"], "state": [b"{}"], "value": pa.nulls(1, pa.binary()),
                       "state_windows": pa.array([[]], STATE_WINDOWS_TYPE)})
    consts = {(7, 1): 100}  # chunk 8 has none: its side records' count stays unknown
    out = handed_input(rows, states, consts=consts, group_ok=lambda g: not g.startswith("skip"))
    assert out is not None
    got = out.select(["group_id", "partition", "offset", "_kind", "missing", "state", "commits"]).to_pylist()
    assert [(r["group_id"], r["partition"], r["offset"]) for r in got] == [
        ("a", 0, 3), ("b", -1, -1), ("b", 1, 40), ("b", 1, 50)]  # a filter drops the null group, as Spark's rlike
    assert [r["_kind"] for r in got] == [None, None, KIND_PARTIAL, None]
    assert [r["missing"] for r in got] == [None, None, None, 50 - 4 + 100]
    assert got[1]["state"] == b"{}" and got[2]["commits"] == 2
    everything = handed_input(rows, None)
    assert everything is not None and everything.column("group_id").to_pylist()[0] is None  # null group first


@pytest.mark.spark
def test_rows_read_back_from_the_files_equal_the_kept_ones(spark, tmp_path) -> None:
    df = spark.read.option("pathGlobFilter", "*.parquet").parquet(str(SAMPLES))
    kept = op.scan_log(df, reader="arrow", chunk_rows=300)
    handed = op.scan_log(df, reader="arrow", chunk_rows=300, handoff_root=str(tmp_path), shards=3)
    assert kept.handoff is None and handed.handoff is not None and handed.handoff.buckets == 3
    assert handed.parts and set(handed.parts) <= {0, 1, 2}
    assert handed.counts == kept.counts and handed.chunks == kept.chunks
    for part in ("side", "stretches"):
        a, b = getattr(kept, part)(), getattr(handed, part)()
        assert sorted(map(repr, a.collect())) == sorted(map(repr, b.collect()))
    directory = handed.handoff.directory
    assert any(Path(directory).iterdir())
    kept.unpersist()
    handed.unpersist()
    assert not Path(directory).exists()


def _tables(out: Path) -> dict[str, Counter]:
    tables = {}
    for name in ("generations", "assignments", "rebalance_causes", "violations", "offset_commits", "quarantine",
                 "group_state", "partition_ownership", "rebalances", "group_health"):
        arrow = DeltaTable(str(out / name)).to_pyarrow_table()
        arrow = arrow.select([c for c in arrow.column_names if c not in ("run_id", "run_window")])
        tables[name] = Counter(repr(tuple(r.values())) for r in arrow.to_pylist())
    return tables


@pytest.mark.spark
def test_audits_through_the_files_and_through_spark_are_the_same(spark, tmp_path, monkeypatch, capfd) -> None:
    log = _scale_log(tmp_path / "log" / "log.parquet", 5)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the run's scratch directory goes here
    assert Capabilities.of(spark) == Capabilities(local_files=True, local_tasks=True)  # (local[2])
    outputs = {}
    for how in ("auto", "spark"):  # spark: the routes of a session whose tasks do not all run here
        out = tmp_path / how
        base = {"input.path": str(log), "input.format": "parquet", "output.path": str(out), "job.shards": 3,
                "groups.include": ["*1", "*2", "*3", "*5"]}
        caps = Capabilities(local_files=True, local_tasks=how == "auto")
        # two windows: the second resumes from the first's saved states (handed off too)
        first = run_audit(spark, load_config(None, {**base, "window.until": _middle(log)}), capabilities=caps)
        capfd.readouterr()
        second = run_audit(spark, load_config(None, {**base, "window.since": _middle(log)}), capabilities=caps)
        assert second.resume == "resume" and first.counts["records_replayed"] > 0
        # through the files, the driver reads the saved states itself and hands them off
        read_by_driver = re.search(r"saved states: those of (\d+) groups read by the driver", capfd.readouterr().err)
        assert (read_by_driver is not None) == (how == "auto")
        if read_by_driver is not None:
            assert int(read_by_driver.group(1)) == len(outputs.setdefault("states", _states(out)))
        outputs[how] = _tables(out)
    assert outputs["auto"] == outputs["spark"]
    assert sum(len(rows) for rows in outputs["auto"].values()) > 1000
    assert list(scratch.iterdir()) == []  # every run deleted its scratch directory


@pytest.mark.spark
def test_saved_states_the_driver_cannot_read_are_read_by_spark(spark, tmp_path, monkeypatch, capfd) -> None:
    """A `group_state` table delta-rs cannot read (e.g. a reader feature it lacks) falls back to
    Spark's read, with a line that says why, and the same tables."""
    log = SAMPLES / "real_broker_3_9_0.parquet"
    outputs = {}
    for unreadable in (False, True):
        if unreadable:
            def refuse(location: str, base: object) -> None:
                raise DeltaProtocolError("the table has reader features this reader lacks: deletionVectors")
            monkeypatch.setattr(nightly, "read_state_batches", refuse)
        out = tmp_path / f"unreadable-{unreadable}"
        for window in ({"window.until": "2026-11-21T23:43:40Z"}, {"window.since": "2026-11-21T23:43:40Z"}):
            capfd.readouterr()
            run_audit(spark, load_config(None, {"input.path": str(log), "input.format": "parquet",
                                                "output.path": str(out), "job.shards": 2, **window}))
        err = capfd.readouterr().err
        assert ("the driver cannot read group_state (DeltaProtocolError" in err) is unreadable
        assert ("read by the driver" in err) is not unreadable
        outputs[unreadable] = _tables(out)
    assert outputs[True] == outputs[False]


def _states(out: Path) -> list[str]:
    """The groups of the first window's `group_state` rows (the ones the second window resumes)."""
    rows = DeltaTable(str(out / "group_state")).to_pyarrow_table(columns=["group_id", "run_window"]).to_pylist()
    return sorted(r["group_id"] for r in rows if not r["run_window"].endswith("--open"))


@pytest.mark.spark
def test_saved_states_the_driver_reads_are_those_spark_selects(spark) -> None:
    """`saved_states_table` (the driver's Arrow read) against `coordinator_audit.jobs.audit.saved_states` (Spark) on
    the same `group_state` rows: a state without windows, windows without a state (a group seen
    only through offset commits), neither (left out), null windows, and a group filter."""
    windows_type = GROUP_STATE_SCHEMA["offset_windows"].dataType
    window = {f.name: None for f in windows_type.elementType.fields}
    window |= {"group_id": "g", "topic": "t", "partition": 0, "generation_id": 3, "window_state": "Stable", "window_start_offset": 7,
              "window_end_offset": None, "commits": 2, "tombstones": 0, "first_offset": 10, "last_offset": 12,
              "first_commit_timestamp": 100, "last_commit_timestamp": 200, "regressions": 0, "source_partition": 4,
              "first_source_offset": 8, "last_source_offset": 9, "last_commit_source_offset": 9}
    rows = [("g-1", '{"format":2}', b"\x00\x03v1", [window]), ("g-2", None, None, [window, {**window, "partition": 1}]),
            ("g-3", None, None, []), ("h-1", '{"format":1,"x":"\u00e9"}', None, []), ("h-2", None, None, None),
            ("g-4", "{}", b"", None)]
    df = spark.createDataFrame(
        rows, StructType([StructField("group_id", StringType()), StructField("auditor_state", StringType()),
                          StructField("window_value", BinaryType()), StructField("offset_windows", windows_type)]))
    table = df.toArrow()
    for groups in ((), ("g-*",), ("h-1", "g-2")):
        by_spark = saved_states(df, groups).toArrow()
        by_driver = saved_states_table(table, groups)
        assert by_driver.sort_by("group_id").to_pylist() == by_spark.sort_by("group_id").to_pylist()
        expected = {(): ["g-1", "g-2", "g-4", "h-1"], ("g-*",): ["g-1", "g-2", "g-4"], ("h-1", "g-2"): ["g-2", "h-1"]}
        assert sorted(by_driver.column("group_id").to_pylist()) == expected[groups]
    assert saved_states_table(table).sort_by("group_id").column("state").to_pylist()[1] == b""
    # the saved GroupMetadata record's value (kept apart from a state of format 2) rides along
    assert saved_states_table(table).sort_by("group_id").column("value").to_pylist() == [b"\x00\x03v1", None, b"", None]


@pytest.mark.spark
def test_saved_states_are_read_and_handed_off_piece_by_piece(spark, tmp_path) -> None:
    """`nightly.read_state_batches` gives the base run's `group_state` rows (not another run's, not
    another window's) at most `batch_rows` at a time, and `hand_off_states` over those pieces puts
    the same rows in each bucket as over the whole table: the driver never holds them all."""
    windows_type = GROUP_STATE_SCHEMA["offset_windows"].dataType
    window = {f.name: None for f in windows_type.elementType.fields} | {"topic": "t", "partition": 0, "commits": 1}
    rows = [(f"g-{i}", '{"format":2}' if i % 3 else None, bytes([i % 256]), [window] * (i % 4), run, label)
            for run, label in (("r1", "w1"), ("r2", "w2"), ("r3", "w2")) for i in range(300)]
    df = spark.createDataFrame(rows, StructType([
        StructField("group_id", StringType()), StructField("auditor_state", StringType()),
        StructField("window_value", BinaryType()), StructField("offset_windows", windows_type),
        StructField("run_id", StringType()), StructField("run_window", StringType())]))
    location = str(tmp_path / "group_state")
    for run in ("r1", "r2", "r3"):
        write_deltalake(location, df.where(f"run_id = '{run}'").toArrow(), mode="append", partition_by=["run_window"])
    base = nightly.ChainRun("r2", "w2", None, None, None, {}, datetime.now(UTC))
    pieces = list(nightly.read_state_batches(location, base, batch_rows=32))
    assert len(pieces) >= 300 // 32 and all(p.num_rows <= 32 for p in pieces)
    whole = pa.concat_tables(pieces)
    assert sorted(whole.column("group_id").to_pylist()) == sorted(f"g-{i}" for i in range(300))
    assert set(whole.column("run_id").to_pylist()) == {"r2"}
    one = hand_off_states(saved_states_table(whole), H.Handoff(str(tmp_path / "one"), 4))
    many = hand_off_states((saved_states_table(p) for p in pieces), H.Handoff(str(tmp_path / "many"), 4))
    assert set(one) == set(many)
    for bucket in one:
        a, b = H.read_bucket(one[bucket]), H.read_bucket(many[bucket])
        assert a is not None and b is not None
        assert a.sort_by("group_id").to_pylist() == b.sort_by("group_id").to_pylist()
    assert sum(len(batches) for parts in many.values() for _, batches in parts) > len(many)  # written as it came


def _middle(log: Path) -> str:
    ts = pq.read_table(log, columns=["timestamp"]).column("timestamp")
    mm = pc.min_max(ts).as_py()
    middle = mm["min"] + (mm["max"] - mm["min"]) / 2
    return middle.replace(microsecond=0, tzinfo=UTC).isoformat()


@pytest.mark.spark
def test_the_offset_path_through_the_files_equals_it_through_spark(spark) -> None:
    df = spark.read.option("pathGlobFilter", "*.parquet").parquet(str(SAMPLES))
    got = {}
    # the pass fed through Spark hands its rows off when told about how many records it reads (the
    # Kafka source's offset ranges), and keeps them in its checkpoint when not
    for how, options in (("files", {}), ("files, no handoff", {"handoff_root": None}),
                         ("spark fed", {"reader": "spark"}),
                         ("spark fed, handed off", {"reader": "spark", "records_hint": 5_000_000})):
        rows, violations, scan = op.offset_path(df, chunk_rows=300, **options)
        assert (scan.handoff is not None) == (how in ("files", "spark fed, handed off")), how
        assert scan.reader == ("spark" if how.startswith("spark") else "arrow")
        got[how] = (sorted(map(repr, rows.collect())), sorted(map(repr, violations.collect())))
        scan.unpersist()
        if scan.handoff is not None:
            assert not Path(scan.handoff.directory).exists()
    assert len(got["files"][0]) > 100
    assert got["files"] == got["files, no handoff"] == got["spark fed"] == got["spark fed, handed off"]


@pytest.mark.spark
def test_input_out_of_log_order_drops_the_handoff_and_goes_through_spark(spark, tmp_path) -> None:
    log = pq.read_table(SAMPLES / "real_broker_3_9_0.parquet")
    shuffled = log.take(pa.array(list(reversed(range(log.num_rows)))))
    (tmp_path / "shuffled").mkdir()
    pq.write_table(shuffled, tmp_path / "shuffled" / "log.parquet")
    root = tmp_path / "root"
    root.mkdir()
    rows, _, scan = op.offset_path(spark.read.parquet(str(tmp_path / "shuffled")), chunk_rows=100,
                                   handoff_root=str(root))
    assert scan.reordered and scan.handoff is None and list(root.iterdir()) == []  # its files are gone
    ordered, _, kept = op.offset_path(spark.read.parquet(str(SAMPLES / "real_broker_3_9_0.parquet")),
                                      chunk_rows=100, handoff_root=str(root))
    assert kept.handoff is not None and not kept.reordered
    assert sorted(map(repr, rows.collect())) == sorted(map(repr, ordered.collect()))
    scan.unpersist()
    kept.unpersist()
    assert list(root.iterdir()) == []
