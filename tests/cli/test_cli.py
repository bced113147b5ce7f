"""The `coordinator-audit` command without Spark: its subcommands and `--help` at each level, the
exit status of usage errors, and every refusal `coordinator-audit run` makes before a Spark session
starts (`coordinator_audit.jobs.audit.preflight`; the session builder raises if one is asked for)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.sql.pandas.types import to_arrow_schema

from coordinator_audit import cli
from coordinator_audit.jobs import audit
from coordinator_audit.jobs.config import DEFAULT_OUTPUT_PATH, SPEC, load_config
from coordinator_audit.jobs.inputs import skipped_files
from coordinator_audit.udfs.schemas import RUNS_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
SAMPLE = SAMPLES / "sim_coop-scale-out.parquet"


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """`coordinator-audit run` must answer before it builds a session: building one fails the test."""
    def refuse(**_: object) -> None:
        raise AssertionError("a Spark session was started")
    monkeypatch.setattr(audit, "build_session", refuse)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(["run", *args])
    return code, capsys.readouterr().err


def test_python_dash_m_is_the_command_and_its_help_documents_the_exit_codes() -> None:
    done = subprocess.run([sys.executable, "-m", "coordinator_audit", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage: coordinator-audit" in done.stdout and "exit status:" in done.stdout
    for name in cli.SUBCOMMANDS:
        assert f"\n  {name} " in done.stdout, f"--help lists {name}"
    bare = subprocess.run([sys.executable, "-m", "coordinator_audit"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert bare.returncode == 2 and "usage: coordinator-audit" in bare.stderr


def test_every_subcommand_has_its_help_with_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for name in cli.SUBCOMMANDS:
        assert cli.main([name, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: coordinator-audit {name} "), out[:200]
        assert cli.EXIT_CODES in out, f"{name} --help documents the exit codes"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["audit"]) == 2
    assert "invalid choice: 'audit'" in capsys.readouterr().err
    assert cli.main(["query"]) == 2  # --tables is required
    assert "--tables" in capsys.readouterr().err
    assert cli.main(["compare", "one-path"]) == 2
    assert cli.main(["run", "--no-such-flag"]) == 2


def test_a_missing_extra_names_the_pip_command() -> None:
    line = cli.missing_extra(ModuleNotFoundError("No module named 'pyspark'", name="pyspark"), "run")
    assert line is not None and "pip install 'coordinator-audit[spark]'" in line and "'pyspark'" in line
    assert cli.missing_extra(ModuleNotFoundError("x", name="delta.tables"), "run") is not None
    assert "coordinator-audit[delta-spark]" in str(cli.missing_extra(ModuleNotFoundError("x", name="delta"), "run"))
    assert cli.missing_extra(ModuleNotFoundError("x", name="numpy"), "run") is None  # a base dependency


def test_one_default_output_path() -> None:
    assert SPEC["output"]["path"].default == DEFAULT_OUTPUT_PATH == "out/delta"
    toml = (ROOT / "conf" / "audit.toml").read_text()
    assert f'path = "{DEFAULT_OUTPUT_PATH}"' in toml
    assert f"--output {DEFAULT_OUTPUT_PATH} " in (ROOT / "scripts" / "run.sh").read_text()
    assert load_config(None, {"input.path": "x"}).output_path == DEFAULT_OUTPUT_PATH


def test_bad_config_and_missing_input_exit_2_before_spark(no_spark: None, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "--input", str(SAMPLE), "--output", str(tmp_path / "o"), "--shards", "0")
    assert code == 2 and "job.shards" in err, err
    code, err = _run(capsys, "--input", str(tmp_path / "nope"), "--output", str(tmp_path / "o"))
    assert code == 2 and f"input {tmp_path / 'nope'}: no such file or directory" in err, err
    code, err = _run(capsys, "--input", str(tmp_path / "nope"), "--format", "parquet", "--output", str(tmp_path / "o"))
    assert code == 2 and "no such file or directory" in err, err
    code, err = _run(capsys, "--input", str(SAMPLE), "--output", str(tmp_path / "o"), "--packages", "kafka")
    assert code == 2 and "'kafka' is not a Maven coordinate" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_an_output_folder_holding_other_files_is_refused(no_spark: None, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "generations").mkdir()  # a table's name, but no table of the job's
    (out / "generations" / "data.csv").write_text("x")
    code, err = _run(capsys, "--input", str(SAMPLE), "--output", str(out))
    assert code == 2, err
    assert err.strip() == (f"coordinator-audit run: --output {out}: holds 2 entries that are not one of this job's "
                           f"tables (generations, notes.txt); write to a new or empty folder, or pass --force-output "
                           f"to write there anyway")
    audit.preflight(load_config(None, {"input.path": str(SAMPLE), "output.path": str(out)}), force_output=True)
    # a folder of the job's own tables, and one not there yet, are fine
    (out / "notes.txt").unlink()
    (out / "generations" / "data.csv").unlink()
    (out / "generations" / "_delta_log").mkdir()
    (out / "generations" / "run_window=all").mkdir()
    (out / "_carried_rows").mkdir()
    (out / "whatif" / "_delta_log").mkdir(parents=True)  # `coordinator-audit whatif` writes its table there
    (out / "whatif" / "part-00000.parquet").write_bytes(b"")
    audit.preflight(load_config(None, {"input.path": str(SAMPLE), "output.path": str(out)}))
    audit.preflight(load_config(None, {"input.path": str(SAMPLE), "output.path": str(tmp_path / "new" / "o")}))


def test_an_output_inside_or_at_a_delta_table_is_refused(no_spark: None, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "lake" / "events"
    write_deltalake(str(table), pa.table({"x": [1]}))
    code, err = _run(capsys, "--input", str(SAMPLE), "--output", str(table / "audit"))
    assert code == 2 and f"--output {table / 'audit'}: lies inside the Delta table {table};" in err, err
    code, err = _run(capsys, "--input", str(SAMPLE), "--output", str(table))
    assert code == 2 and f"--output {table}: is a Delta table;" in err, err
    file = tmp_path / "a-file"
    file.write_text("")
    code, err = _run(capsys, "--input", str(SAMPLE), "--output", str(file))
    assert code == 2 and "is a file, not a folder" in err, err


def _runs_table(out: Path, run_id: str, until: datetime) -> None:
    """A `runs` table of one succeeded run over [start of the log, until), as the job writes it."""
    row = {f.name: None for f in RUNS_SCHEMA.fields}
    now = datetime(2026, 11, 22, tzinfo=UTC)
    row.update(run_id=run_id, status="succeeded", started_at=now, finished_at=now, duration_ms=1, input="x",
               input_format="parquet", until=until, records_in=0, duplicates_dropped=0, filtered_by_window=0,
               filtered_by_group=0, records_replayed=0, quarantined=0, skipped_other_type=0, table_rows=[],
               code_version="0", spark_version="4", writer="embedded", config_json="{}", resume="fresh",
               end_offsets=[(0, 10)], missing_offsets=[], run_window="open--20261121T234340Z")
    schema = to_arrow_schema(RUNS_SCHEMA, timezone="UTC").append(pa.field("run_window", pa.string(), False))
    write_deltalake(str(out / "runs"), pa.Table.from_pylist([row], schema=schema), partition_by=["run_window"])


def test_a_used_run_id_and_a_refused_window_exit_2_before_spark(no_spark: None, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    _runs_table(out, "night-1", datetime(2026, 11, 21, 23, 43, 40, tzinfo=UTC))
    code, err = _run(capsys, "--input", str(SAMPLE), "--output", str(out), "--run-id", "night-1",
                     "--since", "2026-11-21T23:43:40Z")
    assert code == 2 and "run id night-1: " in err and "already records a run with this id" in err, err
    code, err = _run(capsys, "--input", str(SAMPLE), "--output", str(out), "--until", "2026-11-21T23:43:30Z")
    assert code == 2 and "overlaps run night-1" in err, err
    assert len(err.strip().splitlines()) == 1


def test_skipped_files_are_every_file_the_formats_reader_leaves(tmp_path: Path) -> None:
    for name in ("a.parquet", "b.jsonl", "sub/c.parquet", "sub/d.json", "notes.txt", "_SUCCESS", ".hidden",
                 "_tmp/e.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert skipped_files(str(tmp_path), "parquet") == ["b.jsonl", "notes.txt", "sub/d.json"]
    assert skipped_files(str(tmp_path), "json") == ["a.parquet", "notes.txt", "sub/c.parquet"]
    assert skipped_files(str(tmp_path), "delta") == []
    assert skipped_files(str(tmp_path / "a.parquet"), "parquet") == []
    assert skipped_files(str(SAMPLES), "parquet") == sorted(
        p.name for p in SAMPLES.iterdir() if p.is_file() and not p.name.endswith(".parquet"))
