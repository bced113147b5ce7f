"""`coordinator-audit compare`: two outputs compared table by table as stored, on every column but
`run_id`/`run_window` (N nightly runs against one run), the run bookkeeping tables left out; and
`benchmarks.output_hash`, which hashes the same rows. Small Delta tables written with delta-rs: no
Spark needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from benchmarks.output_hash import output_hashes
from coordinator_audit.jobs import compare

ROOT = Path(__file__).resolve().parents[2]
OWNERSHIP = pa.schema([("group_id", pa.string()), ("valid_to", pa.int64()), ("labels", pa.map_(pa.string(), pa.int32())),
                       ("run_id", pa.string()), ("run_window", pa.string())])


def _output(base: Path, rows: list[tuple], *, runs: int = 1, windows: int = 1) -> Path:
    """An output: `partition_ownership` with `rows` (group, valid_to, labels) spread over `windows`
    windows, and `runs` rows in `runs` and `group_state` (bookkeeping, not compared)."""
    data = {"group_id": [r[0] for r in rows], "valid_to": [r[1] for r in rows], "labels": [r[2] for r in rows],
            "run_id": [f"run-{i % windows}" for i in range(len(rows))],
            "run_window": [f"w{i % windows}" for i in range(len(rows))]}
    write_deltalake(str(base / "partition_ownership"), pa.table(data, schema=OWNERSHIP), partition_by=["run_window"])
    ids = pa.table({"run_id": [f"run-{i}" for i in range(runs)], "run_window": [f"w{i}" for i in range(runs)]})
    write_deltalake(str(base / "runs"), ids)
    write_deltalake(str(base / "group_state"), ids)
    return base


ROWS = [("g1", 5, [("a", 1), ("b", 2)]), ("g1", None, []), ("g2", 7, [("c", 3)])]


def test_equal_outputs_differ_only_in_runs_and_windows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nights = _output(tmp_path / "nights", ROWS, runs=3, windows=3)
    one = _output(tmp_path / "one", [ROWS[2], ROWS[0], (ROWS[1][0], None, [])], runs=1)
    results = compare.compare_outputs(nights, one)
    assert [(r.table, r.rows_a, r.rows_b, r.equal) for r in results] == [("partition_ownership", 3, 3, True)]
    assert compare.main([str(nights), str(one)]) == 0
    out = capsys.readouterr().out
    assert "partition_ownership" in out and "equal" in out and "all tables equal" in out
    assert "runs (one row per run)" in out  # says what it leaves out


def test_a_row_stored_twice_or_changed_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = _output(tmp_path / "one", ROWS)
    twice = _output(tmp_path / "twice", [*ROWS, ROWS[1]], windows=2)  # an open row written by two nights
    assert compare.main([str(twice), str(one)]) == 1
    out = capsys.readouterr().out
    assert "4 rows" in out and "3 rows" in out and "DIFFERS" in out
    assert 'only in A: {"group_id": "g1", "labels": [], "valid_to": null}' in out and "only in B" not in out
    changed = _output(tmp_path / "changed", [ROWS[0], ("g1", 9, []), ROWS[2]])
    [result] = compare.compare_outputs(changed, one)
    assert not result.equal and result.only_a == ('{"group_id": "g1", "labels": [], "valid_to": 9}',)
    assert result.only_b == ('{"group_id": "g1", "labels": [], "valid_to": null}',)


def test_a_table_on_one_side_differs_and_a_non_output_is_a_usage_error(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    one = _output(tmp_path / "one", ROWS)
    more = _output(tmp_path / "more", ROWS)
    write_deltalake(str(more / "rebalances"), pa.table({"group_id": ["g1"], "run_id": ["r"], "run_window": ["w"]}))
    assert compare.main([str(more), str(one)]) == 1
    assert "rebalances" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert compare.main([str(tmp_path / "empty"), str(one)]) == 2
    assert "is no audit output" in capsys.readouterr().err
    assert compare.main([str(one)]) == 2


def test_the_command_and_output_hash_read_the_same_rows(tmp_path: Path) -> None:
    nights = _output(tmp_path / "nights", ROWS, windows=2)
    one = _output(tmp_path / "one", ROWS)
    done = subprocess.run([sys.executable, "-m", "coordinator_audit", "compare", str(nights), str(one)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # output_hash keeps run_window (a code change must not move a row to another window): it differs
    hashes = output_hashes(nights)["partition_ownership"], output_hashes(one)["partition_ownership"]
    assert hashes[0][0] == hashes[1][0] == 3 and hashes[0][2] != hashes[1][2]
    assert output_hashes(_output(tmp_path / "again", ROWS)) == output_hashes(one)
