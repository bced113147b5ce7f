"""The benchmark's `kafka_input` measurement at a tiny size, for real: a broker per point, loaded
with that point's records, then the bare scan and the audit read through the job's Kafka path. The
loaded log must be the input, record for record; the audit through Kafka must find what the audit
of the same records in Parquet found. Figures are not asserted (the benchmark prints them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import harness

pytestmark = pytest.mark.kafka


def test_benchmark_kafka_input_tiny(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--records", "6000", "--groups", "6", "--no-scaling", "--kafka-factors", "2,4",
            "--skip", "bare_scan,offset_path,peer,replay,memory,derived,delta_input", "--shards", "2",
            "--gen-workers", "1", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"),
            "--work-dir", str(tmp_path), "--in-process"]
    assert harness.main(argv) == 0
    printed = capsys.readouterr().out
    assert "Kafka input (--kafka-bootstrap, Spark's Kafka source)" in printed
    rep = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    m = rep["measurements"]
    section = m["kafka_input"]
    assert "error" not in section, section.get("error")
    small, main = section["points"]
    assert main["records"] == rep["input"]["rows"] and small["records"] < main["records"]
    for point in (small, main):
        assert point["broker"].startswith("4.")
        assert point["load"]["records"] == point["records"] and point["load"]["partitions"] == 50
        assert len(point["bare_scan"]["runs"]) == len(point["audit"]["runs"]) == 2
        assert point["bare_scan"]["seconds"] > 0 and point["audit"]["seconds"] > 0
        # its floor: every record handed to the Python workers and counted there
        assert point["python_read"]["records"] == point["records"] and point["python_read"]["seconds"] > 0
    # the audit through Kafka read every record once and wrote what the Parquet audit wrote
    assert main["audit"]["counts"]["records_in"] == main["records"]
    assert main["audit"]["counts"]["quarantined"] == 0
    assert main["audit"]["table_rows"] == m["audit"]["table_rows"]
    assert main["audit"]["counts"]["records_replayed"] == m["audit"]["counts"]["records_replayed"]
    assert section["fits"]["audit"]["slope_s_per_million_records"] is not None
    assert rep["figures"]["kafka_input_audit_fixed_seconds"] == section["fits"]["audit"]["intercept_s"]
    assert rep["targets"]["kafka_input_audit_marginal_over_bare_scan_marginal"]["met"] is not None
    assert rep["figures"]["kafka_input_python_read_marginal_over_bare_scan_marginal"] is not None
    assert "handing its records to the Python workers" in rep["targets"][
        "kafka_input_audit_marginal_over_bare_scan_marginal"]["note"]
    # every broker is stopped and its log removed with the work directory
    assert not list(tmp_path.glob("coordinator-audit-bench-kafka-*"))
