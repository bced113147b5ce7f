"""`python -m benchmarks` at a tiny size: the command runs and writes a coherent benchmark.json.
Figures are not asserted (performance lives in the benchmark's own output). The offset path alone,
the derived comparison and the scaling pass are left out to stay near a minute (the audit runs the
same offset path; the scaling points' assembly and fits are checked without Spark); the Delta input
runs at one point, the main input's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import harness, report
from benchmarks.peer import peer_decode
from coordinator_audit.core.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    encode,
)

pytestmark = pytest.mark.spark


def test_benchmark_command_tiny(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--records", "6000", "--groups", "6", "--no-scaling", "--skip", "offset_path,derived,kafka_input", "--replay-commits", "2000",
            "--single-group-commits", "3000", "--shards", "2", "--gen-workers", "1", "--cache-dir", str(tmp_path / "cache"),
            "--delta-factors", "4", "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path), "--in-process",
            "--whatif-groups", "3", "--whatif-product-groups", "4"]
    assert harness.main(argv) == 0
    printed = capsys.readouterr().out
    out_file = tmp_path / "out" / "benchmark.json"
    assert f"benchmark.json: {out_file}" in printed
    assert "audit_over_bare_scan" in printed and "replay share of the warm audit" in printed
    rep = json.loads(out_file.read_text())

    m = rep["measurements"]
    rows = rep["input"]["rows"]
    assert rows >= 6000
    # the what-if sweep over 3 simulated groups, against their audit
    w = m["whatif"]
    assert w["groups"] == 3 and w["swept"] + w["skipped"] == 3 and w["swept"] > 0
    assert w["sweep_cpu_seconds"] > w["audit_cpu_seconds"] > 0 and w["sweep_over_audit"] > 1
    assert "what-if sweep, one core: 3 simulated groups" in printed
    # and through the product's two commands, on 4 groups (the first 3 those above)
    assert w["product_groups"] == 4 and w["product_records"] > 0
    assert w["product_audit_wall_seconds"] > 0 and w["product_sweep_wall_seconds"] > 0
    assert w["product_total_line"].startswith("total over 4 group(s)")
    assert "what-if through the product, 4 groups" in printed
    table = report.markdown_table(rep)
    assert "| what-if: `coordinator-audit whatif --sweep` on the same (" in table
    assert m["bare_scan"]["first"]["records"] == m["bare_scan"]["last"]["records"] == rows
    # the read floors, measured after each Parquet bare scan: the Python read saw every record, the
    # JVM's commit summary every offset-commit record (the peer's commits, plus any tombstones)
    for run in ("first", "last"):
        floors = m["bare_scan"][run]
        assert floors["python_read"]["records"] == rows and floors["python_read"]["seconds"] > 0
        assert floors["jvm_commit_summary"]["commits"] >= m["peer"]["commits"] > 0
        assert 0 < floors["jvm_commit_summary"]["keys"] <= floors["jvm_commit_summary"]["commits"]
    # the audit read every record, and the peer found the same offset commits as the job
    assert m["audit"]["counts"]["records_in"] == rows
    assert m["audit"]["counts"]["quarantined"] == 0
    assert m["peer"]["commits"] == m["audit"]["counts"]["records_replayed"] - m["replay"]["non_commit_records"] > 0.9 * rows
    assert any(line.startswith("stage replay") for line in m["audit"]["stages"])
    # its stages' times, read from the job's own stage lines: the pass, the replay and the commit
    stages = m["audit"]["stage_seconds"]
    assert {"pass", "replay", "write"} <= set(stages) and all(v > 0 for v in stages.values())
    assert sum(stages.values()) <= m["audit"]["seconds"]
    assert m["audit"]["replay_stage_seconds"] == stages["replay"] and 0 < m["replay_share"]["stage_share"] < 1
    # the floor: the rows the audit wrote, written again as plain Parquet
    floor = m["audit"]["output_write"]
    assert floor["rows"] == sum(m["audit"]["table_rows"].values()) > 0 and floor["seconds"] > 0
    assert floor["rows_per_table"]["assignments"] == m["audit"]["table_rows"]["assignments"]
    assert floor["arrow_seconds"] > 0  # and by pyarrow, the embedded writer's floor (the output is local)
    # the job's replay-time line was read (milliseconds: a tiny run's merge may log 0.000 s)
    assert 0 <= m["replay_share"]["share"] < 1 and m["replay_share"]["audit_seconds"] == m["audit"]["seconds"]
    assert m["audit"]["replay_feed_seconds"] >= 0 and m["audit"]["replay_merge_seconds"] >= 0
    assert m["replay_share"]["cores"] == m["audit"]["cores"] > 0
    assert rep["figures"]["replay_share"] == m["replay_share"]["share"]
    assert m["replay"]["group_metadata_records"] > 0 and m["replay"]["commit_records"] > 0
    assert m["memory"]["single_group"]["commits"] == 3000
    assert m["memory"]["audit"]["driver_jvm_hwm_mib"] > 0
    assert "scaling" not in m and rep["targets"]["scaling_linear"]["met"] is None
    assert rep["targets"]["audit_marginal_over_bare_scan_marginal"]["met"] is None  # no scaling: not measured
    # the Delta input: the same records, read by Spark from a Delta table beside the Parquet input
    (point,) = m["delta_input"]["points"]
    assert point["input"] == rep["input"]["path"] + ".delta" and point["records"] == rows
    assert len(point["bare_scan"]["runs"]) == len(point["audit"]["runs"]) == 2
    assert m["delta_input"]["fits"] == {"bare_scan": {}, "audit": {}}  # one point: no slope
    for name in ("audit_over_bare_scan", "peer_over_audit"):
        assert rep["ratios"][name] > 0
    assert rep["ratios"]["offset_path_over_bare_scan"] is None  # skipped
    assert rep["ratios"]["derived_over_base"] is None and "derived" not in m  # skipped
    assert set(rep["targets"]) == set(report.TARGETS)
    assert rep["targets"]["audit_over_bare_scan"]["note"]  # below 20M: flagged as not the target's size
    assert rep["environment"]["loadavg_max_1min"] is not None

    # the inputs are keyed by their ScaleConfig: asking again reuses them without generating
    config = harness.scale_config(6000, 6, 0)
    again_path, again = harness.ensure_input(config, tmp_path / "cache")
    assert str(again_path) == rep["input"]["path"] and again == {k: rep["input"][k] for k in again}
    delta = harness.ensure_delta_input(again_path, again)
    assert str(delta) == point["input"]
    printed = capsys.readouterr().err
    assert "reused" in printed


def test_benchmark_flags() -> None:
    args = harness.parse_args(["--records", "8000", "--skip", "peer,replay", "--skip", "scaling"])
    assert args.skip == {"peer", "replay", "scaling"}
    assert args.scaling_base == 2000  # a quarter of --records: the 4x point is the main input
    assert args.scaling_factors == (1, 2, 4, 8) and args.delta_factors == (1, 2, 4)
    assert harness.parse_args(["--scaling-factors", "4,1,2"]).scaling_factors == (1, 2, 4)
    for bad in (["--skip", "nonsense"], ["--scaling-factors", "0,1"], ["--delta-factors", "x"]):
        with pytest.raises(SystemExit):
            harness.parse_args(bad)


def test_scaling_fit() -> None:
    fit = harness.scaling_fit([(1_000_000, 12.0), (2_000_000, 22.0), (4_000_000, 42.0), (8_000_000, 82.0)])
    assert fit["slope_s_per_million_records"] == pytest.approx(10.0)
    assert fit["intercept_s"] == pytest.approx(2.0)
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["marginal_ratio"] == pytest.approx(1.0)
    superlinear = harness.scaling_fit([(1_000_000, 10.0), (2_000_000, 20.0), (4_000_000, 80.0)])
    assert superlinear["marginal_ratio"] == pytest.approx(3.0)
    assert "marginal_ratio" not in harness.scaling_fit([(1_000_000, 10.0), (2_000_000, 20.0)])


def _ok(seconds: float, **extra: object) -> dict:
    return {"result": {"seconds": seconds, **extra}}


def test_scaling_points_and_figures_from_step_results() -> None:
    """Each point of each measurement is the best of its two runs (the main input's point reuses
    the main runs); a failed run leaves its point and the fit empty; the figures are the slopes'
    ratios and the audit's intercept."""
    main, p1, p2, p8 = Path("main"), Path("p1"), Path("p2"), Path("p8")
    points = [(1, p1, 1_000_000), (2, p2, 2_000_000), (4, main, 4_000_000), (8, p8, 8_000_000)]
    bare = {1: 0.6, 2: 0.7, 4: 0.9, 8: 1.3}  # 0.1 s per M records + 0.5 s
    offsets = {k: 1.0 + 0.15 * n / 1e6 for k, _, n in points}
    audit = {k: 5.0 + 0.3 * n / 1e6 for k, _, n in points}
    hwm = {1: 300.0, 2: 310.0, 4: 320.0, 8: 330.0}
    floor = {k: 0.2 + 0.25 * n / 1e6 for k, _, n in points}  # writing the output: 2.5x the bare scan's slope
    arrow = {k: 0.1 + 0.03 * n / 1e6 for k, _, n in points}  # by pyarrow: 0.3x
    py_read = {k: 0.3 + 0.28 * n / 1e6 for k, _, n in points}  # the read floors: 2.8x and 1.7x
    jvm_summary = {k: 0.4 + 0.17 * n / 1e6 for k, _, n in points}
    op_pass = {k: 0.8 + 0.09 * n / 1e6 for k, _, n in points}  # the offset path's pass 0.9x, its replay the rest
    au_pass, au_write = ({k: c + m * n / 1e6 for k, _, n in points} for c, m in ((1.0, 0.12), (0.5, 0.02)))

    def op_stages(k: int, extra: float) -> dict:
        return {"stage_seconds": {"pass": op_pass[k] + extra, "replay": offsets[k] - op_pass[k]}}

    def au_stages(k: int, extra: float) -> dict:  # replay 0.16 s per M records: 1.6x
        return {"stage_seconds": {"pass": au_pass[k], "write": au_write[k] + extra, "other": 0.1,
                                  "replay": audit[k] - au_pass[k] - au_write[k] - 0.1}}

    def bare_run(k: int, extra: float, **more: object) -> dict:
        return _ok(bare[k] + extra, python_read={"seconds": py_read[k] + extra},
                   jvm_commit_summary={"seconds": jvm_summary[k] + extra}, **more)
    results: dict = {}
    for k, p, _ in points:
        if p == main:
            results["bare_scan.first"] = bare_run(k, 0.2, records=4_000_000)
            results["bare_scan.last"] = bare_run(k, 0.0, records=4_000_000)
            results["offset_path"] = _ok(offsets[k], **op_stages(k, 0.0))
            results["scaling.4x.offset_path.2"] = _ok(offsets[k] + 1, **op_stages(k, 1.0))
            results["audit"] = _ok(audit[k] + 0.5, memory={"python_worker_peak_hwm_mib": hwm[k]}, **au_stages(k, 0.5),
                                   replay_stage_seconds=1.1, replay_feed_seconds=2.2, replay_merge_seconds=0.5,
                                   cores=2, output_write={"seconds": floor[k] + 0.1, "rows": 40,
                                                          "arrow_seconds": arrow[k] + 0.2})
            results["audit.again"] = _ok(audit[k], **au_stages(k, 0.0), replay_stage_seconds=1.0, replay_feed_seconds=2.0,
                                         replay_merge_seconds=0.4, cores=2,
                                         output_write={"seconds": floor[k], "rows": 40,
                                                       "arrow_seconds": arrow[k]})
            results["audit_base"] = results["audit_base.again"] = _ok(audit[k])
            continue
        for run in (1, 2):
            results[f"scaling.{k}x.bare_scan.{run}"] = bare_run(k, (run - 1) * 0.3)
            results[f"scaling.{k}x.offset_path.{run}"] = _ok(offsets[k] + (2 - run), **op_stages(k, 2 - run))
            results[f"scaling.{k}x.audit.{run}"] = _ok(audit[k] + run - 1, **au_stages(k, run - 1),
                                                       memory={"python_worker_peak_hwm_mib": hwm[k] - run},
                                                       output_write={"seconds": floor[k] + run - 1, "rows": 10 * k,
                                                                     "arrow_seconds": arrow[k] + 2 - run})
    rep: dict = {"measurements": {}, "parameters": {"skip": []}, "input": {"rows": 4_000_000}}
    harness._collect(rep, results, main, points, [])
    rep["ratios"] = report.ratios(rep)
    rep["figures"] = f = report.figures(rep)
    rep["targets"] = report.targets(rep)
    sc = rep["measurements"]["scaling"]
    assert [p["audit"]["runs"] for p in sc["points"]][2] == [audit[4] + 0.5, audit[4]]
    assert [p["bare_scan"]["seconds"] for p in sc["points"]] == [bare[k] for k, _, _ in points]
    assert sc["points"][3]["audit"]["python_worker_peak_hwm_mib"] == hwm[8] - 1
    assert f["bare_scan_marginal_s_per_million"] == pytest.approx(0.1)
    assert f["audit_marginal_over_bare_scan_marginal"] == pytest.approx(3.0)
    assert f["offset_path_marginal_over_bare_scan_marginal"] == pytest.approx(1.5)
    assert f["audit_fixed_seconds"] == pytest.approx(5.0)
    assert [p["output_write"]["seconds"] for p in sc["points"]] == pytest.approx([floor[k] for k, _, _ in points])
    assert [p["output_write"]["rows"] for p in sc["points"]] == [10, 20, 40, 80]
    assert f["output_write_marginal_over_bare_scan_marginal"] == pytest.approx(2.5)
    assert [p["output_write_arrow"]["seconds"] for p in sc["points"]] == pytest.approx([arrow[k] for k, _, _ in points])
    assert f["output_write_arrow_marginal_over_bare_scan_marginal"] == pytest.approx(0.3)
    assert "pyarrow writing them costs 0.3x" in rep["targets"]["audit_marginal_over_bare_scan_marginal"]["note"]
    assert [p["python_read"]["seconds"] for p in sc["points"]] == pytest.approx([py_read[k] for k, _, _ in points])
    assert f["python_read_marginal_over_bare_scan_marginal"] == pytest.approx(2.8)
    assert f["jvm_commit_summary_marginal_over_bare_scan_marginal"] == pytest.approx(1.7)
    assert f["python_worker_peak_rss_growth"] == pytest.approx((hwm[8] - 1) / (hwm[1] - 1))
    # the faster warm run's Python time feeding records, over its core-seconds
    assert f["replay_share"] == pytest.approx(2.0 / (audit[4] * 2))
    assert rep["measurements"]["replay_share"]["stage_share"] == pytest.approx(1.0 / audit[4])
    # each stage is the best of its own runs, fitted like the rest: which part of a ratio is whose
    assert [p["offset_path_pass"]["seconds"] for p in sc["points"]] == pytest.approx([op_pass[k] for k, _, _ in points])
    assert f["offset_path_pass_marginal_over_bare_scan_marginal"] == pytest.approx(0.9)
    assert f["offset_path_replay_marginal_over_bare_scan_marginal"] == pytest.approx(0.6)
    assert f["audit_pass_marginal_over_bare_scan_marginal"] == pytest.approx(1.2)
    assert f["audit_replay_marginal_s_per_million"] == pytest.approx(0.16)
    assert f["audit_write_marginal_over_bare_scan_marginal"] == pytest.approx(0.2)
    assert "audit_other" in sc["fits"] and "audit_other_marginal_s_per_million" not in f
    t = rep["targets"]
    assert t["audit_marginal_over_bare_scan_marginal"]["note"].endswith(
        "by stage, over the bare scan's marginal: pass 1.2x, replay 1.6x, write 0.2x")
    assert "by stage, over the bare scan's marginal: pass 0.9x, replay 0.6x" in t[
        "offset_path_marginal_over_bare_scan_marginal"]["note"]
    assert t["audit_marginal_over_bare_scan_marginal"]["met"] is False
    assert "floor of the native writer: Spark writing the audit's output rows alone costs 2.5x" in t["audit_marginal_over_bare_scan_marginal"]["note"]
    assert t["offset_path_marginal_over_bare_scan_marginal"]["met"] is True
    for name in ("audit_marginal_over_bare_scan_marginal", "offset_path_marginal_over_bare_scan_marginal"):
        note = t[name]["note"]
        assert "pyarrow in the Python workers, nothing else done costs 2.8x" in note
        assert "plainest commit summary (group by key, count, min/max offset; no decoding, no order) costs 1.7x" in note
    assert t["audit_fixed_seconds"]["met"] is True and t["python_worker_peak_bounded"]["met"] is True
    assert t["replay_share"]["met"] is True and t["delta_input_audit_fixed_seconds"]["met"] is None

    del results["scaling.2x.audit.2"]
    results["scaling.1x.offset_path.1"] = {"step": "scaling.1x.offset_path.1", "error": "Py4JError: boom",
                                           "session_alive": False}
    rep = {"measurements": {}, "parameters": {"skip": ["peer"]}, "input": {"rows": 4_000_000}}
    harness._collect(rep, results, main, points, [])
    sc = rep["measurements"]["scaling"]
    assert sc["points"][1]["audit"] == {"runs": [audit[2]], "seconds": None, "missing_runs": 1,
                                        "python_worker_peak_hwm_mib": hwm[2] - 1, "output_rows": None}
    assert sc["points"][0]["offset_path"]["errors"] == ["Py4JError: boom"]
    assert sc["fits"]["audit"] == {} and sc["fits"]["offset_path"] == {} and sc["fits"]["bare_scan"]


def test_fixed_group_points_share_the_main_point_and_fit_the_cost_per_record() -> None:
    """The `fixed_groups` series (--groups groups at every point) has steps of its own except at the
    main input's point, which both series share; its figures are its own slopes' ratios, and the
    targets' notes quote them beside the series that scales the groups."""
    main, p1, p2, p8 = Path("main"), Path("p1"), Path("p2"), Path("p8")
    scaled = [(1, p1, 1_000_000), (2, p2, 2_000_000), (4, main, 4_000_000), (8, p8, 8_000_000)]
    fixed = [(1, Path("f1"), 1_000_000), (2, Path("f2"), 2_000_000), (4, main, 4_000_000), (8, Path("f8"), 8_000_000)]
    steps = harness._spark_steps(harness.parse_args(["--records", "8000"]), main, scaled, [], fixed)
    names = [st["name"] for st in steps]
    assert len(names) == len(set(names))
    assert "fixed.4x.offset_path.2" not in names and "scaling.4x.offset_path.2" in names
    fixed_audits = [st for st in steps if st["name"].startswith("fixed.") and st["kind"] == "audit"]
    assert len(fixed_audits) == 6 and not any(st["output_write"] or st["sample_memory"] for st in fixed_audits)
    # only the fixed series asked for: the main point's extra run is still made, under the scaling name
    alone = [st["name"] for st in harness._spark_steps(harness.parse_args(["--records", "8000"]), main, [], [], fixed)]
    assert "scaling.4x.offset_path.2" in alone and "fixed.1x.audit.2" in alone

    bare = {1: 0.6, 2: 0.7, 4: 0.9, 8: 1.3}  # 0.1 s per M records
    offsets = {k: 6.0 + 0.2 * n / 1e6 for k, _, n in fixed}  # 2x
    audit = {k: 15.0 + 0.18 * n / 1e6 for k, _, n in fixed}  # 1.8x
    results: dict = {}
    for k, p, n in fixed:
        bare_run = _ok(bare[k], python_read={"seconds": 0.3 + 0.12 * n / 1e6}, jvm_commit_summary={"seconds": 1.0})
        if p == main:
            results.update({"bare_scan.first": bare_run, "bare_scan.last": bare_run, "offset_path": _ok(offsets[k]),
                            "scaling.4x.offset_path.2": _ok(offsets[k] + 1),
                            "audit": _ok(audit[k], table_rows={"generations": 30, "offset_commits": 70},
                                         output_write={"seconds": 1.0, "rows": 100}),
                            "audit.again": _ok(audit[k] + 1, table_rows={"generations": 30, "offset_commits": 70})})
            continue
        for run in (1, 2):
            results[f"fixed.{k}x.bare_scan.{run}"] = bare_run
            results[f"fixed.{k}x.offset_path.{run}"] = _ok(offsets[k] + run - 1)
            results[f"fixed.{k}x.audit.{run}"] = _ok(audit[k] + run - 1, table_rows={"generations": 30,
                                                                                    "offset_commits": 70})
    rep: dict = {"measurements": {}, "parameters": {"skip": []}, "input": {"rows": 4_000_000}}
    harness._collect(rep, results, main, [], [], fixed)
    rep["ratios"] = report.ratios(rep)
    rep["figures"] = f = report.figures(rep)
    rep["targets"] = report.targets(rep)
    fg = rep["measurements"]["fixed_groups"]
    assert "scaling" not in rep["measurements"]
    assert [p["audit"]["output_rows"] for p in fg["points"]] == [100] * 4
    assert "output_write" not in fg["fits"] and "output_write_arrow" not in fg["fits"]  # main point only: no fit
    assert f["fixed_groups_audit_marginal_over_bare_scan_marginal"] == pytest.approx(1.8)
    assert f["fixed_groups_offset_path_marginal_over_bare_scan_marginal"] == pytest.approx(2.0)
    assert f["fixed_groups_python_read_marginal_over_bare_scan_marginal"] == pytest.approx(1.2)
    assert f["fixed_groups_audit_fixed_seconds"] == pytest.approx(15.0)
    assert f["audit_marginal_over_bare_scan_marginal"] is None  # the target's own series did not run
    t = rep["targets"]
    assert "output held fixed (--groups groups at every point, `fixed_groups`): 1.8x" in (
        t["audit_marginal_over_bare_scan_marginal"]["note"])
    assert "`fixed_groups`): 2.0x" in t["offset_path_marginal_over_bare_scan_marginal"]["note"]
    assert t["audit_marginal_over_bare_scan_marginal"]["met"] is None


def test_steps_cover_every_point_twice() -> None:
    main, p1, p2, p8 = Path("main"), Path("p1"), Path("p2"), Path("p8")
    points = [(1, p1, 1000), (2, p2, 2000), (4, main, 4000), (8, p8, 8000)]
    steps = harness._spark_steps(harness.parse_args(["--records", "8000"]), main, points,
                                 [(1, Path("d1"), 1000), (4, Path("d4"), 4000)])
    names = [st["name"] for st in steps]
    assert len(names) == len(set(names))
    for k, p, _ in points:
        for kind in ("bare_scan", "offset_path", "audit"):
            runs = harness._point_runs(k, kind, main=p == main, derived=True)
            assert len(runs) == harness.RUNS_PER_POINT and set(runs) <= set(names), (k, kind)
    # every audit step writes under a name that is a valid run id (bench-<out>)
    outs = [st["out"] for st in steps if st["kind"] == "audit"]
    # audit_first, audit, the derived comparison (3), 3 scaling points x 2, 2 Delta points x 2
    assert len(outs) == 15 and all(c.isalnum() or c in "-_" for o in outs for c in o)
    assert len(set(outs)) == len(outs)
    assert [st["name"] for st in steps if st.get("derived_tables") is False] == ["audit_base", "audit_base.again"]
    assert {st["path"] for st in steps if st.get("format") == "delta"} == {"d1", "d4"}
    # without the derived comparison the main point's second audit is a run of its own
    steps = harness._spark_steps(harness.parse_args(["--records", "8000", "--skip", "derived"]), main, points)
    assert "scaling.4x.audit.2" in [st["name"] for st in steps]
    # the derived tables' cost: best audit with them over best audit without
    rep: dict = {"measurements": {}, "parameters": {"skip": []}}
    harness._collect(rep, {"audit": _ok(12.0), "audit_base": _ok(10.5, stages=[]),
                           "audit_base.again": _ok(10.0, stages=[]), "audit.again": _ok(11.5)}, main, [])
    d = rep["measurements"]["derived"]
    assert (d["best_with"], d["best_without"], d["with_seconds"]) == (11.5, 10.0, [12.0, 11.5])
    assert rep["measurements"]["replay_share"] == {"share": None, "note": "the job logged no replay time"}


def test_peer_decode_reads_the_documented_layouts() -> None:
    for version in (0, 1, 2, 3):
        epoch = 5 if version == 3 else -1
        expire = 1_700_000_100_000 if version == 1 else -1
        value_in = OffsetCommitValue(42, epoch, "meta", 1_700_000_000_000, expire)
        key, value = encode(CoordinatorRecord.of(OffsetCommitKey("g", "orders", 7), value_in, value_version=version))
        got = peer_decode(key, value)
        assert got is not None
        assert got[:9] == (1, "g", "orders", 7, 42, epoch, "meta", 1_700_000_000_000,
                           expire if version == 1 else None)
    key, _ = encode(CoordinatorRecord.of(OffsetCommitKey("g", "orders", 7), OffsetCommitValue(1, 0, "", 0)))
    assert peer_decode(key, None)[:5] == (1, "g", "orders", 7, None)
    key, value = encode(CoordinatorRecord.of(GroupMetadataKey("g"),
                                             GroupMetadataValue("consumer", 9, "range", "m-1", 0, ())))
    got = peer_decode(key, value)
    assert got is not None and got[0] == 2 and got[1] == "g" and got[9:] == (9, "consumer", "range", "m-1")


def test_idle_input_keeps_the_active_groups_after_the_cut_without_holes(tmp_path: Path) -> None:
    """`bench_idle.write_input`: every record before the cut, only the active groups' after it, each
    partition's offsets numbered again from its first without a hole, the records in log order."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from benchmarks.bench_idle import write_input

    def key(group: str) -> bytes:
        return b"\x00\x01" + len(group).to_bytes(2, "big") + group.encode() + b"\x00\x01t\x00\x00\x00\x00"

    groups = ["a", "b", "c", "d"]
    rows = [(p, 100 + i, 1_000 * i, key(groups[(i + p) % 4])) for p in (0, 1) for i in range(20)]
    source = tmp_path / "src"
    source.mkdir()
    pq.write_table(pa.table({"partition": pa.array([r[0] for r in rows], pa.int32()),
                             "offset": pa.array([r[1] for r in rows], pa.int64()),
                             "timestamp": pa.array([r[2] for r in rows], pa.timestamp("ms", "UTC")),
                             "key": pa.array([r[3] for r in rows], pa.binary()),
                             "value": pa.array([b"v%d" % i for i in range(len(rows))], pa.binary())}),
                   source / "part-0.parquet")
    assert write_input(source, tmp_path / "out", cut_ms=10_000, share=0.5, files=3) == (2, 4)
    out = ds.dataset(str(tmp_path / "out"), format="parquet").to_table().to_pylist()
    for p in (0, 1):
        mine = [r for r in out if r["partition"] == p]
        assert [r["offset"] for r in mine] == list(range(100, 100 + len(mine)))  # no hole
        before = [r for r in rows if r[0] == p and r[2] < 10_000]
        after = [r for r in rows if r[0] == p and r[2] >= 10_000 and r[3] in (key("a"), key("b"))]
        assert [r["key"] for r in mine] == [r[3] for r in before + after]  # log order kept
        assert len(mine) < 20
