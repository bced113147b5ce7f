"""The report of tables holding a `whatif` table (`coordinator_audit.jobs.whatif` run on the real Kafka 3.9
sample audited by the session's `derived_run`), opened in headless Chromium: each group's section sets
the actual configuration's row (its reproduction score, its assumptions) beside each alternative's,
every cost with its difference from the actual, as the `whatif` rows hold them; an alternative of a
group its configuration does not reproduce exactly is flagged as not trustworthy; the index names the
alternative that saves. No console error, no network request."""

from __future__ import annotations

import shutil
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from coordinator_audit.jobs import report, whatif
from tools.report_screenshots import open_report

pytestmark = [pytest.mark.spark, pytest.mark.browser]

SCALES = {"rebalances": 1, "unowned_partition_ms": 1000, "longest_unowned_ms": 1000, "partitions_moved": 1,
          "members_stopped": 1}


def _shown(v: int, scale: int) -> str:
    """A cost as the page shows it: a count, or seconds to one decimal (JavaScript's toFixed: half away from zero)."""
    return str(v) if scale == 1 else str(Decimal(v / scale).quantize(Decimal("0.1"), ROUND_HALF_UP))


@pytest.fixture()
def tables(derived_run: Path, tmp_path: Path) -> Path:
    """A copy of the audited tables with what-ifs of three groups written beside them."""
    out = tmp_path / "tables"
    shutil.copytree(derived_run, out)
    for args in (["--group", "grp-s02", "--assignor", "cooperative-sticky", "--static"],  # saves and costs
                 ["--group", "grp-s01", "--assignor", "cooperative-sticky"],  # stops no member, costs nothing more
                 ["--group", "sim-bug-duplicate-assignment", "--static"]):  # reproduced in 2 of 3 generations
        assert whatif.main(["--tables", str(out), *args]) == 0
    return out


def _stored(tables: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in DeltaTable(str(tables / "whatif")).to_pyarrow_table().to_pylist():
        out.setdefault(r["group_id"], []).append(r)
    return out


def test_actual_and_alternative_side_by_side(tables: Path, chromium: str, tmp_path: Path) -> None:
    stored = _stored(tables)
    page_file = tmp_path / "report.html"
    assert report.main(["--tables", str(tables), "--out", str(page_file)]) == 0

    s02 = open_report(chromium, page_file, group="grp-s02")
    assert s02.errors == [] and s02.requests == []
    rows = stored["grp-s02"]
    actual = next(r for r in rows if r["is_actual"])
    assert actual["reproduction_score"] == 1.0 and actual["assumptions"] == "none"
    assert [r["configuration"] for r in s02.whatif_rows] == ["actual", "actual, replayed", "cooperative-sticky static"]
    replayed = s02.whatif_rows[1]  # the night's configuration as the replay measured it: the reproduction_* columns
    assert replayed["class"] == "replayed" and replayed["text"][-1] == "the same configuration, as the replay measures it"
    for cost, scale in SCALES.items():
        text, value, diff = replayed["costs"][cost]
        v, d = actual[f"reproduction_{cost}"], actual[f"reproduction_{cost}"] - actual[cost]
        assert int(value) == v and int(diff) == d
        assert text == f"{_shown(v, scale)} ({'+' if d >= 0 else ''}{_shown(d, scale)})"
    for shown in (s02.whatif_rows[0], *s02.whatif_rows[2:]):
        row = next(r for r in rows if r["configuration"] == shown["configuration"])
        assert shown["text"][1].startswith(f"{row['assignor']}, {'static' if row['static_membership'] else 'dynamic'}"
                                           f", session {row['session_timeout_ms']} ms")
        for cost, scale in SCALES.items():
            text, value, diff = shown["costs"][cost]
            assert int(value) == row[cost]
            if row["is_actual"]:
                assert diff is None and text == _shown(row[cost], scale)
            else:
                d = row[cost] - actual[cost]
                assert int(diff) == d
                assert text == f"{_shown(row[cost], scale)} ({'+' if d >= 0 else ''}{_shown(d, scale)})"
    alt = s02.whatif_rows[2]
    assert alt["class"] == "alternative" and "trusted (score 1.00)" in alt["text"][-1]
    assert int(alt["costs"]["members_stopped"][2]) < 0 and int(alt["costs"]["unowned_partition_ms"][2]) > 0
    assert s02.whatif_rows[0]["text"][-1] == (f"what happened; replayed, it reproduces "
                                              f"{actual['generations_reproduced']} of "
                                              f"{actual['generations_observed']} (score 1.00)")
    assert ("The night's own configuration reproduces 5 of 5 audited generations (score 1.00"
            in s02.section_text and "Assumed: none." in s02.section_text)

    # the index: the alternative that saves (costs no more anywhere), nothing for a trade-off, none without a what-if
    assert s02.index_whatif["grp-s02"] == "nothing saves"
    s01 = next(r for r in stored["grp-s01"] if not r["is_actual"])
    s01_actual = next(r for r in stored["grp-s01"] if r["is_actual"])
    assert s01["members_stopped"] < s01_actual["members_stopped"]
    assert s02.index_whatif["grp-s01"].startswith(f"{s01['configuration']}: ")
    assert f"members stopped -{s01_actual['members_stopped'] - s01['members_stopped']}" in s02.index_whatif["grp-s01"]
    assert s02.index_whatif["grp-s05"] == "" and s02.index_whatif["sim-eager-rolling-bounce"] == ""
    assert s02.index_whatif["sim-bug-duplicate-assignment"].endswith("(not trustworthy: score 0.67)")

    # a group whose own configuration is not reproduced exactly: its alternatives are flagged
    dup = open_report(chromium, page_file, group="sim-bug-duplicate-assignment")
    assert dup.errors == [] and dup.requests == []
    score = next(r for r in stored["sim-bug-duplicate-assignment"] if r["is_actual"])["reproduction_score"]
    assert score < 1.0
    assert [r["class"] for r in dup.whatif_rows] == ["actual", "replayed", "alternative untrusted"]
    assert dup.whatif_rows[2]["text"][-1] == f"not trustworthy (score {score:.2f})"
    assert "the alternatives are not trustworthy" in dup.section_text

    # a group without a what-if says how to get one
    s05 = open_report(chromium, page_file, group="grp-s05")
    assert s05.errors == [] and s05.whatif_rows == []
    assert "No what-if for this group (coordinator-audit whatif --tables ... --group grp-s05)" in s05.section_text
