"""The report of 5,000 groups (`coordinator_audit.jobs.report.SIZE_BOUND_5000_GROUPS`): a log of small
simulated groups (`tools.report_screenshots.small_groups_log`, the coordinator port through the
scenario runner) audited by the job into Delta tables, reported, and opened in headless Chromium:
under the stated size, plotly.js inlined once and no figure pre-rendered, no console error, no
network request; the index lists and searches every group, and opening one draws it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coordinator_audit.jobs import report
from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.config import load_config
from tools.report_screenshots import open_report, small_groups_log

pytestmark = [pytest.mark.spark, pytest.mark.browser, pytest.mark.slow]

GROUPS = 5000


@pytest.fixture(scope="module")
def many_groups(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = small_groups_log(tmp_path_factory.mktemp("small-groups-log"), groups=GROUPS)
    out = tmp_path_factory.mktemp("small-groups-tables")
    run_audit(spark, load_config(None, {"input.path": str(log), "input.format": "parquet", "output.path": str(out),
                                        "job.shards": 2}))
    return out


def test_report_of_5000_groups_is_bounded_and_draws_a_group_when_opened(many_groups: Path, chromium: str,
                                                                        tmp_path: Path) -> None:
    page_file = tmp_path / "report.html"
    assert report.main(["--tables", str(many_groups), "--out", str(page_file)]) == 0
    size = page_file.stat().st_size
    assert size < report.SIZE_BOUND_5000_GROUPS, f"{size:,} bytes"
    html = page_file.read_text(encoding="utf-8")
    assert re.search(r"<script[^>]*\ssrc=", html) is None
    assert html.count("<script") == 3 and "plotly-graph-div" not in html

    shot = tmp_path / "report-index.png"
    visit = open_report(chromium, page_file, group="sim-bug-duplicate-assignment", search="app-0004*",
                        index_shot=shot)
    assert visit.errors == [] and visit.requests == []
    assert visit.index_rows == GROUPS + 1  # every group, and the sample beside them
    assert visit.search_rows == 10  # app-00040 .. app-00049
    assert visit.bars > 0 and visit.markers == 1 and visit.generation_numbers
    assert "duplicate_assignment" in visit.section_text
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
