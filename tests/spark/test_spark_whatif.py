"""`coordinator_audit.jobs.whatif` on the audit's Delta tables as the job stores them (the real Kafka 3.9
sample, audited once by the session's `derived_run`): the actual configuration's reproduction, what
happened (the actual row, from the audited rows) against an alternative's costs, the sweep, and the
`whatif` table it writes (one group's rows replaced on a rerun, a table of an earlier version's
columns extended)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from coordinator_audit.jobs import whatif

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def tables(derived_run: Path, tmp_path: Path) -> Path:
    """A copy of the audited tables (the test writes `whatif` beside them)."""
    out = tmp_path / "tables"
    shutil.copytree(derived_run, out)
    return out


def _whatif(tables: Path) -> list[dict]:
    return DeltaTable(str(tables / "whatif")).to_pyarrow_table().to_pylist()


def test_an_alternative_for_the_crash_group(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the members' timeouts come from the assignments table (grp-s02's consumers ran with 6 s sessions)
    stored = DeltaTable(str(tables / "assignments")).to_pyarrow_table(filters=[("group_id", "=", "grp-s02")])
    assert set(zip(stored["session_timeout_ms"].to_pylist(), stored["rebalance_timeout_ms"].to_pylist(),
                   strict=True)) == {(6000, 300000)}
    args = ["--tables", str(tables), "--group", "grp-s02", "--assignor", "cooperative-sticky", "--static"]
    assert whatif.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("group grp-s02: the actual configuration reproduces 5 of 5 audited generations")
    assert "  actual, replayed " in out
    rows = _whatif(tables)
    assert [(r["configuration"], r["is_actual"]) for r in rows] == [("actual", True),
                                                                     ("cooperative-sticky static", False)]
    actual, alt = rows
    assert actual["assignor"] == "range" and not actual["static_membership"] and actual["session_timeout_ms"] == 6000
    # the actual row is what happened (the audited rows); the replay of it stands beside, on every row
    assert actual["observed_rebalances"] == actual["rebalances"] == actual["reproduction_rebalances"] == 4
    assert actual["unowned_partition_ms"] > 0 and actual["reproduction_unowned_partition_ms"] > 0
    assert {k: alt[k] for k in alt if k.startswith("reproduction_")} == {
        k: actual[k] for k in actual if k.startswith("reproduction_")}
    assert alt["assignor"] == "cooperative-sticky" and alt["static_membership"]
    assert actual["members_stopped"] > 0 and alt["members_stopped"] == 0  # no eager revocation
    assert "timeout" not in actual["assumptions"]
    # a rerun replaces the group's rows; another group's rows stay
    assert whatif.main(args) == 0
    assert whatif.main(["--tables", str(tables), "--group", "grp-s07"]) == 0
    rows = _whatif(tables)
    assert sorted((r["group_id"], r["configuration"]) for r in rows) == [
        ("grp-s02", "actual"), ("grp-s02", "cooperative-sticky static"), ("grp-s07", "actual")]


def test_the_sweep_in_a_fresh_interpreter(tables: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "coordinator_audit", "whatif", "--tables", str(tables), "--group",
                           "grp-s07", "--sweep"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "reproduces 7 of 7 audited generations" in done.stdout
    rows = _whatif(tables)
    assert len(rows) == 1 + 8  # the actual configuration, every assignor with static membership off and on
    assert {(r["assignor"], r["static_membership"]) for r in rows if not r["is_actual"]} == {
        (a, s) for a in whatif.ASSIGNOR_CHOICES for s in (False, True)}
    # the sweep's replay of the actual assignor with dynamic members is the actual configuration's replay
    same = next(r for r in rows if r["configuration"] == "cooperative-sticky dynamic")
    actual = next(r for r in rows if r["is_actual"])
    assert {k: same[k] for k in ("rebalances", "unowned_partition_ms", "partitions_moved")} == {
        k: actual[f"reproduction_{k}"] for k in ("rebalances", "unowned_partition_ms", "partitions_moved")}


def test_unknown_group_is_a_clear_error(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert whatif.main(["--tables", str(tables), "--group", "no-such-group", "--no-write"]) == 2
    assert "group 'no-such-group': not in" in capsys.readouterr().err
    assert not (tables / "whatif").exists()


def test_every_group_and_the_total(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert whatif.main(["--tables", str(tables), "--static"]) == 0
    out = capsys.readouterr().out
    rows = _whatif(tables)
    groups = sorted({r["group_id"] for r in rows})
    assert {"grp-s01", "grp-s02", "grp-s05", "grp-s07"} <= set(groups)
    for g in groups:
        assert f"group {g}: the actual configuration reproduces" in out
    assert f"total over {len(groups)} group(s)" in out
    total = out[out.index("total over"):].splitlines()
    actual = next(line for line in total if line.strip().startswith("actual"))
    assert int(actual.split()[1]) == sum(r["rebalances"] for r in rows if r["is_actual"])
    # beside what happened, the night's configuration as the replays measured it
    replayed = next(line for line in total if line.strip().startswith("actual, replayed"))
    assert int(replayed.split()[2]) == sum(r["reproduction_rebalances"] for r in rows if r["is_actual"])
    assert int(replayed.split()[-2]) == sum(r["reproduction_static_replacements"] for r in rows if r["is_actual"])


def test_the_workers_give_what_one_process_gives(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # every group of the tables swept by two worker processes: the same printout, in the same group
    # order, and the same rows in the whatif table as in one process
    def swept(workers: str) -> tuple[str, list[dict]]:
        assert whatif.main(["--tables", str(tables), "--sweep", "--workers", workers]) == 0
        rows = sorted(_whatif(tables), key=lambda r: (r["group_id"], r["configuration"]))
        return capsys.readouterr().out, [{k: v for k, v in r.items() if k != "computed_at"} for r in rows]

    alone = swept("1")
    assert swept("2") == alone
    printed, rows = alone
    groups = sorted({r["group_id"] for r in rows})
    assert len(groups) > 1 and len(rows) == 9 * len(groups)
    heads = [line.split(":")[0] for line in printed.splitlines() if line.startswith("group ")]
    assert heads == sorted(set(heads)) and {f"group {g}" for g in groups} <= set(heads)


def test_tables_without_the_timeout_columns(tables: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # assignments written before the audit kept the members' timeouts: the flags stand in, and say so
    old = DeltaTable(str(tables / "assignments")).to_pyarrow_table()
    shutil.rmtree(tables / "assignments")
    write_deltalake(str(tables / "assignments"), old.drop_columns(["session_timeout_ms", "rebalance_timeout_ms"]))
    args = ["--tables", str(tables), "--group", "grp-s02", "--no-write"]
    assert whatif.main([*args, "--observed-session-timeout-ms", "6000"]) == 0
    out = capsys.readouterr().out
    assert "reproduces 5 of 5 audited generations" in out
    assert "keep no session timeout: session.timeout.ms 6000 assumed" in out
    assert "keep no rebalance timeout: max.poll.interval.ms 300000 assumed" in out


def test_a_whatif_table_of_an_earlier_version_gains_the_new_columns(tables: Path) -> None:
    # a table written without the replay's own costs: a rerun for one group adds them, null on the others' rows
    assert whatif.main(["--tables", str(tables), "--group", "grp-s07"]) == 0
    old = DeltaTable(str(tables / "whatif")).to_pyarrow_table()
    shutil.rmtree(tables / "whatif")
    write_deltalake(str(tables / "whatif"), old.drop_columns([c for c in old.column_names
                                                              if c.startswith("reproduction_") and c not in (
                                                                  "reproduction_score", "reproduction_time_error_ms")]))
    assert whatif.main(["--tables", str(tables), "--group", "grp-s02"]) == 0
    rows = {r["group_id"]: r for r in _whatif(tables) if r["is_actual"]}
    assert rows["grp-s02"]["reproduction_rebalances"] == 4 and rows["grp-s07"]["reproduction_rebalances"] is None
