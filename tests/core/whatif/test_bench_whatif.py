"""`benchmarks/bench_whatif.py` on three groups: the sweep on one core and with a pool of two workers
(whose outcomes it holds equal to the one process's), against the audit, and what it prints."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from benchmarks import bench_whatif


def test_the_sweep_against_the_audit_on_one_core_and_with_workers(capsys: pytest.CaptureFixture[str]) -> None:
    f = bench_whatif.measure(groups=3, seed=0, repeat=1, workers=2)
    assert f["swept"] + f["skipped"] == 3 and f["swept"] > 0
    assert f["sweep_cpu_seconds"] > f["audit_cpu_seconds"] > 0 and f["sweep_over_audit"] > 1
    assert f["workers"] == 2 and f["sweep_pool_wall_seconds"] > 0
    assert f["sweep_pool_cpu_seconds"] > f["sweep_cpu_seconds"] / 2  # the workers' CPU counts
    assert f["sweep_pool_over_audit"] == f["sweep_pool_wall_seconds"] / f["audit_cpu_seconds"]
    assert f["sweep_pool_seconds_for_5000_groups"] == pytest.approx(f["sweep_pool_wall_seconds"] * 5000 / 3)
    bench_whatif.print_figures(f)
    printed = capsys.readouterr().out
    assert "sweep / audit, one core each: " in printed
    assert "sweep with 2 workers: wall " in printed and "the same outcomes" in printed
    assert "CPU of the workers and this process " in printed
    assert "5,000 such groups: audit " in printed and "with 2 workers" in printed
    one = bench_whatif.measure(groups=3, seed=0, repeat=1, workers=1)
    assert one["sweep_pool_wall_seconds"] is None and one["sweep_pool_seconds_for_5000_groups"] is None
    bench_whatif.print_figures(one)
    assert "workers" not in capsys.readouterr().out


def test_the_products_input_holds_every_groups_records_in_log_order(tmp_path) -> None:
    groups = bench_whatif.make_groups(6, seed=0)
    n = bench_whatif.write_input(groups, tmp_path)
    t = pq.read_table(tmp_path / "records.parquet").to_pylist()
    assert n == len(t) == sum(len(records) for _, records in groups)
    by_partition: dict[int, list[dict]] = {}
    for r in t:
        by_partition.setdefault(r["partition"], []).append(r)
    for rows in by_partition.values():  # numbered from 0, in time order
        assert [r["offset"] for r in rows] == list(range(len(rows)))
        assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    # each group's records kept in its own log order
    key_order = {(r["partition"], r["key"], r["value"]): r["offset"] for r in t}
    for _, records in groups:
        offsets = [key_order[(p, k, v)] for p, _, _, k, v in records]
        assert offsets == sorted(offsets)
