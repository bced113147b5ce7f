"""`coordinator_audit.jobs.report` opened in a real headless Chromium (Debian's package, installed by
scripts/browser.sh; driven by Playwright with executable_path, `tools.report_screenshots.open_report`):
the page loads with no console error and no network request, the index lists every group, opening
a group draws its timeline (generations numbered, members by short label with the full id on
hover), and the violation is marked and listed with its evidence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coordinator_audit.jobs import report
from tools.report_screenshots import open_report

pytestmark = [pytest.mark.spark, pytest.mark.browser]


def test_report_renders_in_headless_chromium(derived_run: Path, chromium: str, tmp_path: Path) -> None:
    page_file = tmp_path / "report.html"
    assert report.main(["--tables", str(derived_run), "--out", str(page_file)]) == 0
    html = page_file.read_text(encoding="utf-8")
    assert re.search(r"<script[^>]*\ssrc=", html) is None  # plotly.js inlined, nothing loaded from elsewhere
    assert html.count("<script") == 3 and "plotly-graph-div" not in html  # data, plotly.js, the page's code

    shot = tmp_path / "report-grp-s01.png"
    s01 = open_report(chromium, page_file, group="grp-s01", search="grp-s0?", timeline_shot=shot)
    assert s01.errors == [] and s01.requests == []
    # no whatif table: no what-if column in the index, no what-if in the group
    assert "<th>last day</th></tr>" in html and s01.index_whatif == {} and "What-if" not in s01.section_text
    assert s01.index_rows == 6 and s01.search_rows == 4  # one row per group; the real broker's four match
    # one bar per generation and per ownership interval of grp-s01 (3 generations, 30 intervals)
    assert s01.bars >= 33
    assert s01.generation_numbers == ["1", "2", "3"]
    assert "unowned: eager_join_phase" in s01.legend and "unowned: owner_departed" in s01.legend
    # members by client id and short id in the legend; the full id on hover in the tables
    assert re.search(r"grp-s01-c2 #[0-9a-f]{4}", s01.legend) and not re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-", s01.legend)
    assert s01.labels and all(full.startswith(short.replace(" #", "-")) for full, short in s01.labels.items())
    # ISO 8601 UTC times, and the first generation's unknown member count said in words
    assert "2026-11-21T23:43:11.595Z" in s01.section_text and "?" not in s01.section_text
    assert "before: unknown, the first generation the tables hold" in s01.section_text
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the duplicate assignment is marked on its group's timeline and listed with its evidence
    dup = open_report(chromium, page_file, group="sim-bug-duplicate-assignment")
    assert dup.errors == [] and dup.requests == []
    assert dup.markers == 1
    assert "duplicate_assignment" in dup.section_text and "partition 14 offset 6" in dup.section_text
