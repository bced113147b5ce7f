"""`coordinator_audit.jobs.report` opened in a real headless Chromium (Debian's package, installed by
scripts/browser.sh; driven by Playwright with executable_path): the page loads with no console
error and no network request, the timeline of a sample group renders its bars, the violation is
listed with its evidence, and a screenshot is written under the test's tmp dir."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from coordinator_audit.jobs import report

pytestmark = [pytest.mark.spark, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium executable: scripts/browser.sh finds it or installs Debian's package. Skipped
    with its reason only outside CI when that cannot be done (no apt, not root); CI fails instead."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "browser.sh")], capture_output=True, text=True, check=False)
    path = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else ""
    if not path:
        reason = f"no headless Chromium: scripts/browser.sh failed ({proc.stderr.strip()[-300:]})"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def test_report_renders_in_headless_chromium(derived_run: Path, chromium: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "report.html"
    assert report.main(["--tables", str(derived_run), "--out", str(page_file)]) == 0
    html = page_file.read_text(encoding="utf-8")
    assert re.search(r"<script[^>]*\ssrc=", html) is None  # plotly.js inlined, nothing loaded from elsewhere

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:", "blob:"))
                    else None)
            page.goto(page_file.as_uri(), wait_until="load")
            timeline = page.locator("#timeline-grp-s01")
            timeline.locator(".main-svg").first.wait_for(timeout=30_000)
            # one bar per generation and per ownership interval of grp-s01 (3 generations, 30 intervals)
            bars = timeline.locator(".barlayer .point")
            assert bars.count() >= 30
            legend = timeline.locator(".legend").text_content() or ""
            assert "unowned: eager_join_phase" in legend and "unowned: owner_departed" in legend
            # the duplicate assignment is marked on its group's timeline and listed with its evidence
            dup = page.locator("#group-sim-bug-duplicate-assignment")
            assert dup.locator(".scatterlayer .point").count() == 1
            assert "duplicate_assignment" in dup.locator("table.violations").inner_text()
            assert "partition 14 offset 6" in dup.locator("table.violations").inner_text()
            assert page.locator("#health tr").count() == 1 + 6  # header + one row per group-day
            timeline.scroll_into_view_if_needed()
            shot = tmp_path / "report-grp-s01.png"
            timeline.screenshot(path=str(shot))
            page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
        finally:
            browser.close()
    assert errors == []
    assert requests == []
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
