"""`jobs.benchmark` at a tiny size: the command runs and writes a coherent benchmark.json. Figures
are not asserted (performance lives in the benchmark's own output). The offset path alone and the
scaling pass are left out to stay under a minute (the audit runs the same offset path; the scaling
points' assembly is checked without Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import benchmark

pytestmark = pytest.mark.spark


def test_benchmark_command_tiny(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--records", "6000", "--groups", "6", "--no-scaling", "--skip", "offset_path,derived", "--replay-commits", "2000",
            "--single-group-commits", "3000", "--shards", "2", "--gen-workers", "1", "--cache-dir", str(tmp_path / "cache"),
            "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path), "--in-process"]
    assert benchmark.main(argv) == 0
    printed = capsys.readouterr().out
    out_file = tmp_path / "out" / "benchmark.json"
    assert f"benchmark.json: {out_file}" in printed
    assert "audit_over_bare_scan" in printed
    report = json.loads(out_file.read_text())

    m = report["measurements"]
    rows = report["input"]["rows"]
    assert rows >= 6000
    assert m["bare_scan"]["first"]["records"] == m["bare_scan"]["last"]["records"] == rows
    # the audit read every record, and the peer found the same offset commits as the job's SQL path
    assert m["audit"]["counts"]["records_in"] == rows
    assert m["audit"]["counts"]["quarantined"] == 0
    assert m["peer"]["commits"] == m["audit"]["counts"]["records_replayed"] - m["replay"]["non_commit_records"] > 0.9 * rows
    assert any(line.startswith("stage replay") for line in m["audit"]["stages"])
    assert m["replay"]["group_metadata_records"] > 0 and m["replay"]["commit_records"] > 0
    assert m["memory"]["single_group"]["commits"] == 3000
    assert m["memory"]["audit"]["driver_jvm_hwm_mib"] > 0
    assert "scaling" not in m and report["targets"]["scaling_linear"]["met"] is None
    for name in ("audit_over_bare_scan", "peer_over_audit"):
        assert report["ratios"][name] > 0
    assert report["ratios"]["offset_path_over_bare_scan"] is None  # skipped
    assert report["ratios"]["derived_over_base"] is None and "derived" not in m  # skipped
    assert set(report["targets"]) == set(benchmark.TARGETS)
    assert report["targets"]["audit_over_bare_scan"]["note"]  # below 20M: flagged as not the target's size

    # the inputs are keyed by their ScaleConfig: asking again reuses them without generating
    config = benchmark.scale_config(6000, 6, 0)
    again_path, again = benchmark.ensure_input(config, tmp_path / "cache")
    assert str(again_path) == report["input"]["path"] and again == {k: report["input"][k] for k in again}


def test_benchmark_flags() -> None:
    args = benchmark.parse_args(["--records", "8000", "--skip", "peer,replay", "--skip", "scaling"])
    assert args.skip == {"peer", "replay", "scaling"}
    assert args.scaling_base == 2000  # a quarter of --records: the 4x point is the main input
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--skip", "nonsense"])
    fit = benchmark.scaling_fit([(1_000_000, 12.0), (2_000_000, 22.0), (4_000_000, 42.0)])
    assert fit["slope_s_per_million_records"] == pytest.approx(10.0)
    assert fit["intercept_s"] == pytest.approx(2.0)
    assert fit["marginal_ratio"] == pytest.approx(1.0)
    # the scaling points are assembled from the step results, each the best of its runs; the 4x
    # point's runs are the main audit and one more
    report: dict = {"measurements": {"audit": {"seconds": 40.0}}}
    main, p1, p2 = Path("main"), Path("p1"), Path("p2")
    results = {"scaling.1x": {"step": "scaling.1x", "result": {"seconds": 12.0}},
               "scaling.1x.again": {"step": "scaling.1x.again", "result": {"seconds": 13.0}},
               "scaling.2x": {"step": "scaling.2x", "error": "Py4JError: boom", "session_alive": False},
               "scaling.4x.again": {"step": "scaling.4x.again", "result": {"seconds": 38.5}}}
    benchmark._collect(report, results, main, [(1, p1, 1000), (2, p2, 2000), (4, main, 4000)])
    points = report["measurements"]["scaling"]["points"]
    assert [(p["seconds"], p["reused_main"]) for p in points] == [(12.0, False), (None, False), (38.5, True)]
    assert points[0]["runs"] == [12.0, 13.0] and points[2]["runs"] == [40.0, 38.5]
    assert points[1]["error"] == "Py4JError: boom" and report["measurements"]["scaling"]["fit"] == {}
    # every audit step writes under a name that is a valid run id (bench-<out>)
    steps = benchmark._spark_steps(benchmark.parse_args(["--records", "8000"]), main,
                                   [(1, p1, 1000), (2, p2, 2000), (4, main, 4000)])
    outs = [st["out"] for st in steps if st["kind"] == "audit"]
    # audit_first, audit, the derived comparison (audit_base, audit_base.again, audit.again), 5 scaling runs
    assert len(outs) == 10 and all(c.isalnum() or c in "-_" for o in outs for c in o)
    assert len(set(outs)) == len(outs)
    without = [st["name"] for st in steps if st.get("derived_tables") is False]
    assert without == ["audit_base", "audit_base.again"]
    # the derived tables' cost: best audit with them over best audit without
    report = {"measurements": {"audit": {"seconds": 12.0}}}
    benchmark._collect(report, {"audit_base": {"result": {"seconds": 10.5, "stages": []}},
                                "audit_base.again": {"result": {"seconds": 10.0, "stages": []}},
                                "audit.again": {"result": {"seconds": 11.5}}}, main, [])
    d = report["measurements"]["derived"]
    assert (d["best_with"], d["best_without"], d["with_seconds"]) == (11.5, 10.0, [12.0, 11.5])
    superlinear = benchmark.scaling_fit([(1_000_000, 10.0), (2_000_000, 20.0), (4_000_000, 80.0)])
    assert superlinear["marginal_ratio"] == pytest.approx(3.0)


def test_peer_decode_reads_the_documented_layouts() -> None:
    from coordinator_core.records import (
        CoordinatorRecord,
        GroupMetadataKey,
        GroupMetadataValue,
        OffsetCommitKey,
        OffsetCommitValue,
        encode,
    )

    for version in (0, 1, 2, 3):
        epoch = 5 if version == 3 else -1
        expire = 1_700_000_100_000 if version == 1 else -1
        value_in = OffsetCommitValue(42, epoch, "meta", 1_700_000_000_000, expire)
        key, value = encode(CoordinatorRecord.of(OffsetCommitKey("g", "orders", 7), value_in, value_version=version))
        got = benchmark.peer_decode(key, value)
        assert got is not None
        assert got[:9] == (1, "g", "orders", 7, 42, epoch, "meta", 1_700_000_000_000,
                           expire if version == 1 else None)
    key, _ = encode(CoordinatorRecord.of(OffsetCommitKey("g", "orders", 7), OffsetCommitValue(1, 0, "", 0)))
    assert benchmark.peer_decode(key, None)[:5] == (1, "g", "orders", 7, None)
    key, value = encode(CoordinatorRecord.of(GroupMetadataKey("g"),
                                             GroupMetadataValue("consumer", 9, "range", "m-1", 0, ())))
    got = benchmark.peer_decode(key, value)
    assert got is not None and got[0] == 2 and got[1] == "g" and got[9:] == (9, "consumer", "range", "m-1")
