"""`python -m benchmarks.report --table`: a benchmark.json becomes docs/benchmarks.md's one table, with the
machine, the command (which parses back to the run's parameters) and the input it came from."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from benchmarks import harness, report

ARGV = ["--records", "6000", "--groups", "6", "--no-scaling", "--skip", "peer,kafka_input", "--shards", "2",
        "--conf", "spark.sql.shuffle.partitions=3", "--delta-factors", "4", "--out", "/tmp/x", "--in-process"]


def _synthetic() -> dict[str, Any]:
    args = harness.parse_args(ARGV)
    params = {k: (str(v) if isinstance(v, Path) else sorted(v) if isinstance(v, set) else v)
              for k, v in vars(args).items()}
    rep: dict[str, Any] = {
        "parameters": params,
        "environment": {"python": "3.12.1", "platform": "Linux-test", "cpus": 2, "cpu_model": "Test CPU 9000",
                        "loadavg_start": [0.5, 0.4, 0.3], "loadavg_end": [1.5, 1.0, 0.5], "spark": "4.1.1",
                        "master": "local[2]"},
        "input": {"path": "/cache/input", "rows": 6012, "bytes": 123456,
                  "config": {"records": 6000, "groups": 6, "seed": 0}},
        "measurements": {
            "bare_scan": {"first": {"seconds": 0.5}, "last": {"seconds": 0.4}},
            "offset_path": {"seconds": 0.9},
            "audit_first": {"seconds": 4.0},
            "audit": {"seconds": 2.0, "stage_seconds": {"pass": 0.6, "replay": 1.1, "write": 0.2}},
            "replay_share": {"share": 0.05},
            "delta_input": {"fits": {"audit": {"slope_s_per_million_records": 0.25, "intercept_s": 1.5},
                                     "bare_scan": {"slope_s_per_million_records": 0.05, "intercept_s": 0.1}},
                            "points": []},
        },
        "bare_scan_seconds": 0.4,
    }
    rep["ratios"] = report.ratios(rep)
    rep["figures"] = report.figures(rep)
    rep["targets"] = report.targets(rep)
    return rep


def _rows(markdown: str) -> dict[str, list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header, body = lines[0], lines[1:]
    assert [c.strip() for c in header.strip("|").split("|")] == ["figure", "value", "x bare scan", "target", "met"]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in body)}


def test_command_line_parses_back_to_the_run_parameters() -> None:
    rep = _synthetic()
    command = report.command_line(rep["parameters"])
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "benchmarks"]
    again = vars(harness.parse_args(words[3:]))
    for key in ("records", "groups", "scaling", "shards", "conf", "delta_factors", "scaling_factors", "seed"):
        assert json.loads(json.dumps(again[key])) == json.loads(json.dumps(rep["parameters"][key])), key
    assert sorted(again["skip"]) == rep["parameters"]["skip"]
    assert "--out" not in words and "--in-process" not in words  # where it wrote is not how it measured
    assert "--scaling-base" not in words  # its default follows --records


def test_generator_writes_one_table_from_a_benchmark_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _synthetic()
    source = tmp_path / "benchmark.json"
    source.write_text(json.dumps(rep))
    out = tmp_path / "docs" / "benchmarks.md"
    assert report.main(["--table", str(out), str(source)]) == 0
    text = out.read_text()
    assert "Test CPU 9000" in text and "2 CPUs" in text and "Spark 4.1.1" in text and "0.5 at the start" in text
    assert "6,012 records of 6 groups" in text
    assert f"`{report.command_line(rep['parameters'])}`" in text
    assert text.count("| figure |") == 1, "one table"
    rows = _rows(text)
    assert rows["bare scan (Parquet, the floor)"][:2] == [f"0.40 s ({6012 / 0.4:,.0f} records/s)", "1.00"]
    assert rows["audit, warm (every Delta table written)"][1] == "5.00"
    assert rows["warm audit: stage replay"][:2] == ["1.10 s", "2.75"]
    assert rows["Delta input: audit"][0] == "0.250 s per M records, intercept 1.50 s"
    # every target with a value, as report.targets judged it; none without
    for name, t in rep["targets"].items():
        assert (name in rows) == (t["value"] is not None), name
    audit = rep["targets"]["audit_over_bare_scan"]
    assert rows["audit_over_bare_scan"][1:] == ["", f"{audit['target']}; {audit['note']}", "no"]
    assert "below 20M records" in audit["note"]
    assert rows["replay_share"][3] == "yes"
    assert "hand-written peer (Python UDF + groupBy)" not in rows  # skipped: no row


def test_generator_names_a_missing_benchmark_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--table", str(tmp_path / "t.md"), str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err and not (tmp_path / "t.md").exists()
