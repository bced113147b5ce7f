"""The answers read as an on-call engineer reads them: the broker's own cause of each rebalance (an
audit with `--server-log`) in `query timeline` and in the report's data, and the health thresholds
of the configuration (`[health]`) deciding `group_health.status`, whether the replay derives the
tables or a stage of their own does (with a server log)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from deltalake import DeltaTable

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.jobs import query, report
from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.config import load_config
from coordinator_audit.udfs.history import DEFAULT_HEALTH, HealthThresholds, flapping_score, health_status

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
STRICT = "[health]\nflapping_peak_hour_rebalances = 1\nflapping_rebalancing_share = 0.5\nunstable_score = 0.9\n"
"""Thresholds under which one rebalance in an hour is flapping."""


def _audit(spark, out: Path, *, server_log: bool, config: Path | None = None) -> Path:
    overrides = {"input.path": str(SAMPLES / "real_broker_3_9_0.parquet"), "output.path": str(out), "job.shards": 2,
                 "input.server_log": str(SAMPLES / "real_broker_3_9_0.server.log") if server_log else None}
    run_audit(spark, load_config(config, overrides))
    return out


@pytest.fixture(scope="module")
def broker_run(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Kafka 3.9 broker's log audited with its server.log (default thresholds)."""
    return _audit(spark, tmp_path_factory.mktemp("broker-run"), server_log=True)


def _health(out: Path) -> dict[tuple[str, str], tuple[float, str]]:
    rows = DeltaTable(str(out / "group_health")).to_pyarrow_table().to_pylist()
    return {(r["group_id"], r["day"]): (r["flapping_score"], r["status"]) for r in rows}


def test_timeline_gives_the_brokers_cause(broker_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """grp-s02: consumer c3 was killed (the broker expired its session), c1 closed cleanly: the
    audit alone says `member_left_or_expired` for both, the broker's log tells them apart."""
    assert query.main(["--tables", str(broker_run), "timeline", "--group", "grp-s02"]) == 0
    lines = {int(m[1]): line for line in capsys.readouterr().out.splitlines()
             if (m := re.search(r"  generation (\d+) (?:completed|emptied)", line))}
    assert "member_left_or_expired by grp-s02-c3-" in lines[3]
    assert "broker: member_session_expired: a member's session expired: it crashed or stalled" in lines[3]
    assert "on heartbeat expiration" in lines[3]
    assert "broker: member_left: a member left cleanly (LeaveGroup)" in lines[4]
    # the first generation: no `? -> 1`, the unknown count said in words
    assert "3 -> 2 members" in lines[3] and "?" not in lines[1]
    assert "1 member after (before: unknown, the first generation the tables hold)" in lines[1]


def test_report_data_carries_the_brokers_cause(broker_run: Path) -> None:
    page = report.build_report(str(broker_run))
    data = json.loads(re.search(r"<script type='application/json' id='report-data'>(.*?)</script>", page,
                                re.S)[1].replace("<\\/", "</"))
    strings, g = data["strings"], data["groups"]["grp-s02"]
    by_gen = {r[0]: (strings[r[16]] if r[16] is not None else None, r[17]) for r in g["r"]}
    assert by_gen[3][0] == "member_session_expired" and "heartbeat expiration" in by_gen[3][1]
    assert by_gen[4][0] == "member_left"
    assert dict((strings[i] if isinstance(i, int) else i, n) for i, n in g["bc"]) == {
        "member_joined": 2, "member_session_expired": 1, "member_left": 2}
    assert data["broker_causes"]["member_session_expired"].startswith("a member's session expired")
    # members by short label, the full id kept for the hover
    labels = {m[0]: m[1] for m in g["m"]}
    assert all(re.fullmatch(r"grp-s02-c\d #[0-9a-f]{4}", label) for label in labels.values()), labels
    assert all(mid.startswith(label.split(" #")[0] + "-" + label.split(" #")[1]) for mid, label in labels.items())
    # no epoch milliseconds in the causes' details any more
    causes = DeltaTable(str(broker_run / "rebalance_causes")).to_pyarrow_table().to_pylist()
    assert not [c["detail"] for c in causes if re.search(r"\b1\d{12}\b", c["detail"])]
    assert any(re.search(r"last commit at offset \d+ \(2026-11-21T23:4\d:\d\d\.\d{3}Z\)", c["detail"]) for c in causes)


@pytest.mark.parametrize("server_log", [False, True], ids=["derived-in-replay", "derived-stage"])
def test_configured_thresholds_decide_the_status(spark, broker_run: Path, derived_run: Path, server_log: bool,
                                                 tmp_path: Path) -> None:
    """The same log under stricter `[health]` thresholds: higher scores, days turned flapping; the
    report states the thresholds the run used."""
    config = tmp_path / "audit.toml"
    config.write_text(STRICT, encoding="utf-8")
    strict = _health(_audit(spark, tmp_path / "out", server_log=server_log, config=config))
    default = {k: v for k, v in _health(broker_run if server_log else derived_run).items() if k in strict}
    assert strict.keys() == default.keys() and len(strict) == 4
    s01 = ("grp-s01", "2026-11-21")
    assert default[s01] == (0.5, "unstable") and strict[s01] == (3.0, "flapping")
    changed = {k for k in strict if strict[k][1] != default[k][1]}
    assert len(changed) >= 3 and all(strict[k][0] > default[k][0] for k in changed)
    page = report.build_report(str(tmp_path / "out"))
    assert "peak rebalances per hour / 1, share of the observed day spent rebalancing / 0.5" in page
    assert "0.9 or more unstable" in page


def test_member_labels_are_short_and_distinct() -> None:
    uuid = "3f9a1c2e-0b1d-4e5f-8a9b-0c1d2e3f4a5b"
    labels = query.member_labels([
        (f"consumer-1-{uuid}", "consumer-1", None),
        (f"consumer-1-{uuid[:4]}ffff-0000-4000-8000-000000000000", "consumer-1", None),  # same first 4 digits
        (f"consumer-2-{uuid}", None, None),  # the client id read off the member id
        (f"app-7-{uuid}", "app-7", "pod-7"),  # static: its instance id
        ("member-from-another-client", None, None)])
    assert list(labels.values()) == ["consumer-1 #3f9a1c2e", "consumer-1 #3f9affff", "consumer-2 #3f9a1c2e",
                                     "pod-7 #3f9a1c2e", "member-from-another-client"]
    assert query.member_labels([(f"consumer-1-{uuid}", "consumer-1", None)]) == {
        f"consumer-1-{uuid}": "consumer-1 #3f9a"}
    assert query.members_change(3, 1, 4) == "3 -> 1 member"
    assert query.members_change(None, 2, 7) == "2 members after (before: unknown, count before not recorded)"


def test_health_keys_are_read_and_checked(tmp_path: Path) -> None:
    config = tmp_path / "audit.toml"
    config.write_text(STRICT, encoding="utf-8")
    health = load_config(config, {"input.path": "x"}).health
    assert health == HealthThresholds(peak_hour_rebalances=1.0, rebalancing_share=0.5,
                                      unowned_share=DEFAULT_HEALTH.unowned_share, unstable_score=0.9)
    assert load_config(None, {"input.path": "x"}).health == DEFAULT_HEALTH
    assert flapping_score(peak_hour_rebalances=3, rebalancing_ms=0, unowned_partition_ms=0, partitions=1,
                          observed_ms=3_600_000, health=health) == 3.0
    assert [health_status(s, health) for s in (0.5, 0.9, 1.0)] == ["healthy", "unstable", "flapping"]
    for bad, message in (("flapping_unowned_share = 0", "expected a positive number, got 0"),
                         ("unstable_score = 1.5", "must be at most 1.0"),
                         ("flapping_peak_hour_rebalances = 'six'", "expected a positive number"),
                         ("peak = 3", "unknown key")):
        config.write_text(f"[health]\n{bad}\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(config, {"input.path": "x"})
